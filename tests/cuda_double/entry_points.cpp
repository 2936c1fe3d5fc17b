// The driver double's exported entry points: each one checks its arguments the way the driver does and
// forwards to cuda_double::Driver. Compiled with __CUDA_API_VERSION_INTERNAL (as the driver itself is), so
// that cuda.h declares the real versioned names (cuMemAlloc_v2, cuMemAllocAsync_ptsz, ...) and the legacy
// plain ones, and every definition below is checked against the driver's own signature.
//
// Entry points are implemented once; a flavour that differs only in its name (_ptsz, _ptds, _v2 with the
// same signature) forwards to the implementation. The library is linked with -Bsymbolic, so the addresses
// that cuGetProcAddress hands out are this library's own even when a preloaded shim exports the same names,
// as they are in the real libcuda.
#include "driver_double.h"
#include "proc_table.h"

#include <climits>
#include <cstdio>
#include <cstring>

#define DRIVER_API extern "C" __attribute__((visibility("default"))) CUresult

using cuda_double::Driver;

namespace {

Driver& drv() { return Driver::get(); }

#define REQUIRE_INIT()                                        \
  do {                                                        \
    if (!drv().initialized()) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

CUresult current_device_checked(int& device) {
  if (!drv().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return drv().current_device(device);
}

CUresult alloc_on_current(CUdeviceptr* dptr, size_t bytes, bool low = false) {
  int device = 0;
  if (CUresult r = current_device_checked(device); r != CUDA_SUCCESS) return r;
  return drv().allocate(device, bytes, dptr, low);
}

CUresult alloc_on_stream(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  REQUIRE_INIT();
  int device = 0;
  if (CUresult r = drv().stream_device(stream, device); r != CUDA_SUCCESS) return r;
  return drv().allocate(device, bytes, dptr);
}

CUresult alloc_from_pool(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) {
  REQUIRE_INIT();
  int device = 0;
  if (CUresult r = drv().stream_device(stream, device); r != CUDA_SUCCESS) return r;
  if (CUresult r = drv().pool_device(pool, device); r != CUDA_SUCCESS) return r;
  return drv().allocate(device, bytes, dptr);
}

CUresult free_checked(CUdeviceptr ptr) {
  REQUIRE_INIT();
  return drv().free(ptr);
}

CUresult copy(void* dst, const void* src, size_t bytes, CUdeviceptr device_side) {
  REQUIRE_INIT();
  if (bytes == 0) return CUDA_SUCCESS;
  if (!dst || !src || !drv().addressable(device_side, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, src, bytes);
  return CUDA_SUCCESS;
}

CUresult fill(CUdeviceptr dst, unsigned char value, size_t bytes) {
  REQUIRE_INIT();
  if (bytes == 0) return CUDA_SUCCESS;
  if (!drv().addressable(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return CUDA_SUCCESS;
}

unsigned int clamp32(size_t v) { return v > UINT_MAX ? UINT_MAX : static_cast<unsigned int>(v); }

CUresult create_context(CUcontext* pctx, CUdevice dev) {
  REQUIRE_INIT();
  return drv().create_context(dev, pctx);
}

CUresult synchronize_context(CUcontext ctx) {
  REQUIRE_INIT();
  if (ctx == nullptr) {
    int device = 0;
    return drv().current_device(device);
  }
  return drv().valid_context(ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace

// --- initialisation and devices -------------------------------------------------------------------------

DRIVER_API cuInit(unsigned int Flags) { return drv().init(Flags); }

DRIVER_API cuDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = cuda_double::kDriverVersion;
  return CUDA_SUCCESS;
}

DRIVER_API cuDeviceGet(CUdevice* device, int ordinal) {
  REQUIRE_INIT();
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!drv().valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

DRIVER_API cuDeviceGetCount(int* count) {
  REQUIRE_INIT();
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = drv().device_count();
  return CUDA_SUCCESS;
}

DRIVER_API cuDeviceGetName(char* name, int len, CUdevice dev) {
  REQUIRE_INIT();
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!drv().valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", "oomharness CUDA driver double");
  return CUDA_SUCCESS;
}

DRIVER_API cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  REQUIRE_INIT();
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!drv().valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = drv().total_memory();
  return CUDA_SUCCESS;
}

DRIVER_API cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t total = 0;
  CUresult r = cuDeviceTotalMem_v2(&total, dev);
  if (r == CUDA_SUCCESS) {
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = clamp32(total);
  }
  return r;
}

DRIVER_API cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  REQUIRE_INIT();
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!drv().valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // Stable per device, so that tools keying on the UUID see the same device across runs.
  static constexpr char kPrefix[] = "oomh-double-";
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, kPrefix, sizeof kPrefix - 1);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

DRIVER_API cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

DRIVER_API cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  REQUIRE_INIT();
  if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!drv().valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", dev + 1);
  return CUDA_SUCCESS;
}

// --- contexts -------------------------------------------------------------------------------------------

DRIVER_API cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  REQUIRE_INIT();
  return drv().retain_primary(dev, pctx);
}

DRIVER_API cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  REQUIRE_INIT();
  return drv().release_primary(dev);
}
DRIVER_API cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

DRIVER_API cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  REQUIRE_INIT();
  return drv().reset_primary(dev);
}
DRIVER_API cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

DRIVER_API cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  REQUIRE_INIT();
  return drv().primary_state(dev, flags, active);
}

DRIVER_API cuCtxCreate(CUcontext* pctx, unsigned int /*flags*/, CUdevice dev) { return create_context(pctx, dev); }
DRIVER_API cuCtxCreate_v2(CUcontext* pctx, unsigned int /*flags*/, CUdevice dev) { return create_context(pctx, dev); }
DRIVER_API cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* /*paramsArray*/, int /*numParams*/,
                          unsigned int /*flags*/, CUdevice dev) {
  return create_context(pctx, dev);
}
DRIVER_API cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* /*ctxCreateParams*/, unsigned int /*flags*/,
                          CUdevice dev) {
  return create_context(pctx, dev);
}

DRIVER_API cuCtxDestroy_v2(CUcontext ctx) {
  REQUIRE_INIT();
  return drv().destroy_context(ctx);
}
DRIVER_API cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

// Replaces the top of the calling thread's context stack; NULL pops it (the driver's documented rule).
DRIVER_API cuCtxSetCurrent(CUcontext ctx) {
  REQUIRE_INIT();
  if (ctx != nullptr && !drv().valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  cuda_double::context_stack().set_top(reinterpret_cast<cuda_double::Context*>(ctx));
  return CUDA_SUCCESS;
}

DRIVER_API cuCtxGetCurrent(CUcontext* pctx) {
  REQUIRE_INIT();
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(cuda_double::context_stack().top());
  return CUDA_SUCCESS;
}

DRIVER_API cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = current_device_checked(d); r != CUDA_SUCCESS) return r;
  *device = d;
  return CUDA_SUCCESS;
}

DRIVER_API cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (ctx == nullptr) return cuCtxGetDevice(device);
  REQUIRE_INIT();
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!drv().valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = reinterpret_cast<cuda_double::Context*>(ctx)->device;
  return CUDA_SUCCESS;
}

DRIVER_API cuCtxPushCurrent_v2(CUcontext ctx) {
  REQUIRE_INIT();
  if (!drv().valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  cuda_double::context_stack().push(reinterpret_cast<cuda_double::Context*>(ctx));
  return CUDA_SUCCESS;
}
DRIVER_API cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

DRIVER_API cuCtxPopCurrent_v2(CUcontext* pctx) {
  REQUIRE_INIT();
  cuda_double::ContextStack& stack = cuda_double::context_stack();
  if (!stack.top()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(stack.top());
  stack.pop();
  return CUDA_SUCCESS;
}
DRIVER_API cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }

// Nothing runs asynchronously in the double, so synchronising only checks that there is a context.
DRIVER_API cuCtxSynchronize(void) { return synchronize_context(nullptr); }
DRIVER_API cuCtxSynchronize_v2(CUcontext ctx) { return synchronize_context(ctx); }

// --- streams --------------------------------------------------------------------------------------------

DRIVER_API cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  REQUIRE_INIT();
  if (Flags & ~static_cast<unsigned int>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  return drv().create_stream(phStream);
}

DRIVER_API cuStreamDestroy_v2(CUstream hStream) {
  REQUIRE_INIT();
  return drv().destroy_stream(hStream);
}
DRIVER_API cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }

DRIVER_API cuStreamSynchronize(CUstream hStream) {
  REQUIRE_INIT();
  int device = 0;
  return drv().stream_device(hStream, device);
}
DRIVER_API cuStreamSynchronize_ptsz(CUstream hStream) { return cuStreamSynchronize(hStream); }

// --- allocation -----------------------------------------------------------------------------------------

DRIVER_API cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) { return alloc_on_current(dptr, bytesize); }

// The 32-bit legacy entry point: it can only return an address below 4 GiB.
DRIVER_API cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult r = alloc_on_current(&p, bytesize, /*low=*/true);
  if (r == CUDA_SUCCESS) {
    if (p > UINT_MAX) {
      drv().free(p);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = static_cast<CUdeviceptr_v1>(p);
  }
  return r;
}

// Rows are padded to 512 bytes, the texture alignment the driver pads pitched rows to.
DRIVER_API cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                              unsigned int ElementSizeBytes) {
  REQUIRE_INIT();
  if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
  size_t pitch = (WidthInBytes + cuda_double::kAllocationRounding - 1) / cuda_double::kAllocationRounding *
                 cuda_double::kAllocationRounding;
  if (Height > SIZE_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = alloc_on_current(dptr, pitch * Height);
  if (r == CUDA_SUCCESS) *pPitch = pitch;
  return r;
}

DRIVER_API cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes, unsigned int Height,
                           unsigned int ElementSizeBytes) {
  if (!dptr || !pPitch) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  size_t pitch = 0;
  CUresult r = cuMemAllocPitch_v2(&p, &pitch, WidthInBytes, Height, ElementSizeBytes);
  if (r != CUDA_SUCCESS) return r;
  if (p > UINT_MAX || pitch > UINT_MAX) {  // no 32-bit address to give: the legacy ABI cannot express it
    drv().free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *dptr = static_cast<CUdeviceptr_v1>(p);
  *pPitch = static_cast<unsigned int>(pitch);
  return CUDA_SUCCESS;
}

// Managed memory counts against the current device, as if it had migrated there (the worst case).
DRIVER_API cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return alloc_on_current(dptr, bytesize);
}

DRIVER_API cuMemFree_v2(CUdeviceptr dptr) { return free_checked(dptr); }
DRIVER_API cuMemFree(CUdeviceptr_v1 dptr) { return free_checked(dptr); }

// Stream-ordered allocation. There is no queued work in the double, so memory is taken and given back at
// the call; a pool never keeps freed memory (a release threshold of 0, the driver's default).
DRIVER_API cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_on_stream(dptr, bytesize, hStream);
}
DRIVER_API cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_on_stream(dptr, bytesize, hStream);
}
DRIVER_API cuMemFreeAsync(CUdeviceptr dptr, CUstream /*hStream*/) { return free_checked(dptr); }
DRIVER_API cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream /*hStream*/) { return free_checked(dptr); }
DRIVER_API cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream);
}
DRIVER_API cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream);
}

DRIVER_API cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  REQUIRE_INIT();
  return drv().default_pool(dev, pool_out);
}
DRIVER_API cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  REQUIRE_INIT();
  return drv().create_pool(pool, poolProps);
}
DRIVER_API cuMemPoolDestroy(CUmemoryPool pool) {
  REQUIRE_INIT();
  return drv().destroy_pool(pool);
}

DRIVER_API cuMemGetInfo_v2(size_t* free, size_t* total) {
  int device = 0;
  if (CUresult r = current_device_checked(device); r != CUDA_SUCCESS) return r;
  return drv().memory_info(device, free, total);
}

DRIVER_API cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  size_t f = 0, t = 0;
  CUresult r = cuMemGetInfo_v2(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free = clamp32(f);
    *total = clamp32(t);
  }
  return r;
}

// --- pinned host memory --------------------------------------------------------------------------------

DRIVER_API cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  REQUIRE_INIT();
  if (Flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  return drv().host_alloc(bytesize, pp);
}
DRIVER_API cuMemAllocHost_v2(void** pp, size_t bytesize) {
  REQUIRE_INIT();
  return drv().host_alloc(bytesize, pp);
}
DRIVER_API cuMemFreeHost(void* p) {
  REQUIRE_INIT();
  return drv().host_free(p);
}
DRIVER_API cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  REQUIRE_INIT();
  if (Flags & ~(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                CU_MEMHOSTREGISTER_READ_ONLY))
    return CUDA_ERROR_INVALID_VALUE;
  return drv().host_register(p, bytesize);
}
DRIVER_API cuMemHostUnregister(void* p) {
  REQUIRE_INIT();
  return drv().host_unregister(p);
}

// --- virtual memory management --------------------------------------------------------------------------

DRIVER_API cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                         CUmemAllocationGranularity_flags option) {
  REQUIRE_INIT();
  if (!granularity || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  if (!drv().valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  *granularity = cuda_double::kVmmGranularity;
  return CUDA_SUCCESS;
}

DRIVER_API cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                       unsigned long long flags) {
  REQUIRE_INIT();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return drv().create_physical(handle, size, prop);
}

DRIVER_API cuMemRelease(CUmemGenericAllocationHandle handle) {
  REQUIRE_INIT();
  return drv().release_physical(handle);
}

DRIVER_API cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr /*addr*/,
                               unsigned long long flags) {
  REQUIRE_INIT();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return drv().reserve_address(ptr, size, alignment);  // the address hint is only a hint, as in the driver
}

DRIVER_API cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT();
  return drv().free_address(ptr, size);
}

DRIVER_API cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                    unsigned long long flags) {
  REQUIRE_INIT();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return drv().map(ptr, size, offset, handle);
}

DRIVER_API cuMemUnmap(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT();
  return drv().unmap(ptr, size);
}

DRIVER_API cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  REQUIRE_INIT();
  return drv().set_access(ptr, size, desc, count);
}

// --- copies, so that programs can touch their memory ---------------------------------------------------

DRIVER_API cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return copy(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount, dstDevice);
}
DRIVER_API cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}
DRIVER_API cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void* srcHost, unsigned int ByteCount) {
  return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

DRIVER_API cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return copy(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount, srcDevice);
}
DRIVER_API cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}
DRIVER_API cuMemcpyDtoH(void* dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) {
  return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

DRIVER_API cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) { return fill(dstDevice, uc, N); }
DRIVER_API cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) { return fill(dstDevice, uc, N); }
DRIVER_API cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N) { return fill(dstDevice, uc, N); }

// --- errors ---------------------------------------------------------------------------------------------

namespace {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;  // what the driver's cuGetErrorString says
};

constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* find_error(CUresult code) {
  for (const auto& e : kErrors)
    if (e.code == code) return &e;
  return nullptr;
}

}  // namespace

DRIVER_API cuGetErrorName(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *pStr = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

DRIVER_API cuGetErrorString(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *pStr = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// --- cuGetProcAddress -----------------------------------------------------------------------------------

DRIVER_API cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                               CUdriverProcAddressQueryResult* symbolStatus);

namespace {

// Versions are those of cudaTypedefs.h (PFN_<base>_v<version>[_ptsz|_ptds]); cuda_double_test checks
// every row against it.
#define PROC(base, version, fn) {#base, version, 0, #fn, reinterpret_cast<void*>(&fn)}
#define PROC_PT(base, version, fn) {#base, version, 1, #fn, reinterpret_cast<void*>(&fn)}

const OomhDoubleProc kProcs[] = {
    PROC(cuInit, 2000, cuInit),
    PROC(cuDriverGetVersion, 2020, cuDriverGetVersion),
    PROC(cuDeviceGet, 2000, cuDeviceGet),
    PROC(cuDeviceGetCount, 2000, cuDeviceGetCount),
    PROC(cuDeviceGetName, 2000, cuDeviceGetName),
    PROC(cuDeviceTotalMem, 2000, cuDeviceTotalMem),
    PROC(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    PROC(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    PROC(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    PROC(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    PROC(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    PROC(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
    PROC(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    PROC(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
    PROC(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    PROC(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    PROC(cuCtxCreate, 2000, cuCtxCreate),
    PROC(cuCtxCreate, 3020, cuCtxCreate_v2),
    PROC(cuCtxCreate, 11040, cuCtxCreate_v3),
    PROC(cuCtxCreate, 12050, cuCtxCreate_v4),
    PROC(cuCtxDestroy, 2000, cuCtxDestroy),
    PROC(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    PROC(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    PROC(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    PROC(cuCtxGetDevice, 2000, cuCtxGetDevice),
    PROC(cuCtxGetDevice, 13000, cuCtxGetDevice_v2),
    PROC(cuCtxPushCurrent, 2000, cuCtxPushCurrent),
    PROC(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    PROC(cuCtxPopCurrent, 2000, cuCtxPopCurrent),
    PROC(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    PROC(cuCtxSynchronize, 2000, cuCtxSynchronize),
    PROC(cuCtxSynchronize, 13000, cuCtxSynchronize_v2),
    PROC(cuStreamCreate, 2000, cuStreamCreate),
    PROC(cuStreamDestroy, 2000, cuStreamDestroy),
    PROC(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    PROC(cuStreamSynchronize, 2000, cuStreamSynchronize),
    PROC_PT(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz),
    PROC(cuMemAlloc, 2000, cuMemAlloc),
    PROC(cuMemAlloc, 3020, cuMemAlloc_v2),
    PROC(cuMemAllocPitch, 2000, cuMemAllocPitch),
    PROC(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    PROC(cuMemAllocManaged, 6000, cuMemAllocManaged),
    PROC(cuMemFree, 2000, cuMemFree),
    PROC(cuMemFree, 3020, cuMemFree_v2),
    PROC(cuMemAllocAsync, 11020, cuMemAllocAsync),
    PROC_PT(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz),
    PROC(cuMemFreeAsync, 11020, cuMemFreeAsync),
    PROC_PT(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz),
    PROC(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync),
    PROC_PT(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz),
    PROC(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
    PROC(cuMemPoolCreate, 11020, cuMemPoolCreate),
    PROC(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    PROC(cuMemGetInfo, 2000, cuMemGetInfo),
    PROC(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    PROC(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
    PROC(cuMemCreate, 10020, cuMemCreate),
    PROC(cuMemRelease, 10020, cuMemRelease),
    PROC(cuMemHostAlloc, 2020, cuMemHostAlloc),
    PROC(cuMemAllocHost, 3020, cuMemAllocHost_v2),
    PROC(cuMemFreeHost, 2000, cuMemFreeHost),
    PROC(cuMemHostRegister, 6050, cuMemHostRegister_v2),
    PROC(cuMemHostUnregister, 4000, cuMemHostUnregister),
    PROC(cuMemAddressReserve, 10020, cuMemAddressReserve),
    PROC(cuMemAddressFree, 10020, cuMemAddressFree),
    PROC(cuMemMap, 10020, cuMemMap),
    PROC(cuMemUnmap, 10020, cuMemUnmap),
    PROC(cuMemSetAccess, 10020, cuMemSetAccess),
    PROC(cuMemcpyHtoD, 2000, cuMemcpyHtoD),
    PROC(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2),
    PROC_PT(cuMemcpyHtoD, 7000, cuMemcpyHtoD_v2_ptds),
    PROC(cuMemcpyDtoH, 2000, cuMemcpyDtoH),
    PROC(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2),
    PROC_PT(cuMemcpyDtoH, 7000, cuMemcpyDtoH_v2_ptds),
    PROC(cuMemsetD8, 2000, cuMemsetD8),
    PROC(cuMemsetD8, 3020, cuMemsetD8_v2),
    PROC_PT(cuMemsetD8, 7000, cuMemsetD8_v2_ptds),
    PROC(cuGetErrorName, 6000, cuGetErrorName),
    PROC(cuGetErrorString, 6000, cuGetErrorString),
    PROC(cuGetProcAddress, 11030, cuGetProcAddress),
    PROC(cuGetProcAddress, 12000, cuGetProcAddress_v2),
};

#undef PROC
#undef PROC_PT

// The flavour of `symbol` for `cudaVersion`: the newest one introduced at or before that version; with
// the per-thread flag, a _ptsz/_ptds flavour wins over a legacy one of the same version, and the legacy one
// is returned where no per-thread flavour exists (the rule documented for cuGetProcAddress).
const OomhDoubleProc* find_proc(const char* symbol, int cudaVersion, bool per_thread, bool& known) {
  const OomhDoubleProc* best = nullptr;
  known = false;
  for (const auto& p : kProcs) {
    if (std::strcmp(p.base, symbol) != 0) continue;
    known = true;
    if (p.version > cudaVersion || (p.per_thread && !per_thread)) continue;
    if (!best || p.version > best->version || (p.version == best->version && p.per_thread)) best = &p;
  }
  return best;
}

}  // namespace

// What the NVML double reports as this process's memory on a device (the double's own introspection).
extern "C" __attribute__((visibility("default"))) unsigned long long oomh_cuda_double_used(int device) {
  return drv().used(device);
}

extern "C" __attribute__((visibility("default"))) const OomhDoubleProc* oomh_cuda_double_procs(size_t* count) {
  if (count) *count = sizeof kProcs / sizeof kProcs[0];
  return kProcs;
}

DRIVER_API cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                               CUdriverProcAddressQueryResult* symbolStatus) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  constexpr cuuint64_t kKnownFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnownFlags) != 0 || cudaVersion > cuda_double::kDriverVersion) return CUDA_ERROR_INVALID_VALUE;
  bool known = false;
  const OomhDoubleProc* p =
      find_proc(symbol, cudaVersion, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, known);
  if (!p) {
    if (symbolStatus)
      *symbolStatus = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = p->function;
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

DRIVER_API cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}
