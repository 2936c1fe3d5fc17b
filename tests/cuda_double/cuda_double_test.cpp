// The driver double, loaded the way a job loads the driver: dlopen("libcuda.so.1") through LD_LIBRARY_PATH,
// then dlsym and cuGetProcAddress_v2. ctest sets CUDA_DOUBLE_MEMORY=64MiB and CUDA_DOUBLE_DEVICES=2.
// Cases that need a process where cuInit never ran (or ran with other settings) run as threadsafe death
// tests: gtest re-executes this binary for them, so the driver's state starts fresh.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <dlfcn.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <cstring>

#include "proc_table.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kTotal = 64 * kMiB;  // CUDA_DOUBLE_MEMORY in CMakeLists.txt

void* library() {
  static void* handle = [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "dlopen(libcuda.so.1): %s (is LD_LIBRARY_PATH the double's folder?)\n", dlerror());
      std::abort();
    }
    if (!dlsym(h, "oomh_cuda_double_procs")) {
      std::fprintf(stderr, "libcuda.so.1 found first is not the driver double: set LD_LIBRARY_PATH\n");
      std::abort();
    }
    return h;
  }();
  return handle;
}

void* sym(const char* name) { return dlsym(library(), name); }

PFN_cuGetProcAddress_v12000 get_proc() {
  return reinterpret_cast<PFN_cuGetProcAddress_v12000>(sym("cuGetProcAddress_v2"));
}

template <class F>
F proc(const char* base, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  CUresult r = get_proc()(base, &fn, version, flags, &status);
  if (r != CUDA_SUCCESS || !fn) {
    std::fprintf(stderr, "cuGetProcAddress_v2(%s, %d) failed: %d\n", base, version, static_cast<int>(r));
    std::abort();
  }
  return reinterpret_cast<F>(fn);
}

// Every function the tests call, resolved through cuGetProcAddress_v2 as the CUDA runtime does.
struct Api {
  PFN_cuInit_v2000 init = proc<PFN_cuInit_v2000>("cuInit", 2000);
  PFN_cuDriverGetVersion_v2020 driver_version = proc<PFN_cuDriverGetVersion_v2020>("cuDriverGetVersion", 2020);
  PFN_cuDeviceGet_v2000 device_get = proc<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000);
  PFN_cuDeviceGetCount_v2000 device_count = proc<PFN_cuDeviceGetCount_v2000>("cuDeviceGetCount", 2000);
  PFN_cuDeviceGetName_v2000 device_name = proc<PFN_cuDeviceGetName_v2000>("cuDeviceGetName", 2000);
  PFN_cuDeviceTotalMem_v3020 total_mem = proc<PFN_cuDeviceTotalMem_v3020>("cuDeviceTotalMem", 3020);
  PFN_cuDeviceGetUuid_v11040 uuid = proc<PFN_cuDeviceGetUuid_v11040>("cuDeviceGetUuid", 11040);
  PFN_cuDeviceGetPCIBusId_v4010 bus_id = proc<PFN_cuDeviceGetPCIBusId_v4010>("cuDeviceGetPCIBusId", 4010);
  PFN_cuDevicePrimaryCtxRetain_v7000 retain = proc<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain", 7000);
  PFN_cuDevicePrimaryCtxRelease_v11000 release =
      proc<PFN_cuDevicePrimaryCtxRelease_v11000>("cuDevicePrimaryCtxRelease", 11000);
  PFN_cuCtxSetCurrent_v4000 set_current = proc<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent", 4000);
  PFN_cuCtxGetCurrent_v4000 get_current = proc<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000);
  PFN_cuCtxGetDevice_v2000 ctx_device = proc<PFN_cuCtxGetDevice_v2000>("cuCtxGetDevice", 2000);
  PFN_cuCtxPushCurrent_v4000 push = proc<PFN_cuCtxPushCurrent_v4000>("cuCtxPushCurrent", 4000);
  PFN_cuCtxPopCurrent_v4000 pop = proc<PFN_cuCtxPopCurrent_v4000>("cuCtxPopCurrent", 4000);
  PFN_cuCtxCreate_v12050 ctx_create = proc<PFN_cuCtxCreate_v12050>("cuCtxCreate", 12050);
  PFN_cuCtxDestroy_v4000 ctx_destroy = proc<PFN_cuCtxDestroy_v4000>("cuCtxDestroy", 4000);
  PFN_cuStreamCreate_v2000 stream_create = proc<PFN_cuStreamCreate_v2000>("cuStreamCreate", 2000);
  PFN_cuStreamDestroy_v4000 stream_destroy = proc<PFN_cuStreamDestroy_v4000>("cuStreamDestroy", 4000);
  PFN_cuStreamSynchronize_v7000_ptsz stream_sync =
      proc<PFN_cuStreamSynchronize_v7000_ptsz>("cuStreamSynchronize", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  PFN_cuMemAlloc_v3020 alloc = proc<PFN_cuMemAlloc_v3020>("cuMemAlloc", 3020);
  PFN_cuMemAllocPitch_v3020 alloc_pitch = proc<PFN_cuMemAllocPitch_v3020>("cuMemAllocPitch", 3020);
  PFN_cuMemAllocManaged_v6000 alloc_managed = proc<PFN_cuMemAllocManaged_v6000>("cuMemAllocManaged", 6000);
  PFN_cuMemFree_v3020 free = proc<PFN_cuMemFree_v3020>("cuMemFree", 3020);
  PFN_cuMemAllocAsync_v11020_ptsz alloc_async = proc<PFN_cuMemAllocAsync_v11020_ptsz>(
      "cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  PFN_cuMemFreeAsync_v11020 free_async = proc<PFN_cuMemFreeAsync_v11020>("cuMemFreeAsync", 11020);
  PFN_cuMemAllocFromPoolAsync_v11020 alloc_from_pool =
      proc<PFN_cuMemAllocFromPoolAsync_v11020>("cuMemAllocFromPoolAsync", 11020);
  PFN_cuDeviceGetDefaultMemPool_v11020 default_pool =
      proc<PFN_cuDeviceGetDefaultMemPool_v11020>("cuDeviceGetDefaultMemPool", 11020);
  PFN_cuMemPoolCreate_v11020 pool_create = proc<PFN_cuMemPoolCreate_v11020>("cuMemPoolCreate", 11020);
  PFN_cuMemPoolDestroy_v11020 pool_destroy = proc<PFN_cuMemPoolDestroy_v11020>("cuMemPoolDestroy", 11020);
  PFN_cuMemGetInfo_v3020 mem_info = proc<PFN_cuMemGetInfo_v3020>("cuMemGetInfo", 3020);
  PFN_cuMemGetAllocationGranularity_v10020 granularity =
      proc<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity", 10020);
  PFN_cuMemCreate_v10020 create = proc<PFN_cuMemCreate_v10020>("cuMemCreate", 10020);
  PFN_cuMemRelease_v10020 release_handle = proc<PFN_cuMemRelease_v10020>("cuMemRelease", 10020);
  PFN_cuMemAddressReserve_v10020 reserve = proc<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve", 10020);
  PFN_cuMemAddressFree_v10020 address_free = proc<PFN_cuMemAddressFree_v10020>("cuMemAddressFree", 10020);
  PFN_cuMemMap_v10020 map = proc<PFN_cuMemMap_v10020>("cuMemMap", 10020);
  PFN_cuMemUnmap_v10020 unmap = proc<PFN_cuMemUnmap_v10020>("cuMemUnmap", 10020);
  PFN_cuMemSetAccess_v10020 set_access = proc<PFN_cuMemSetAccess_v10020>("cuMemSetAccess", 10020);
  PFN_cuMemcpyHtoD_v3020 htod = proc<PFN_cuMemcpyHtoD_v3020>("cuMemcpyHtoD", 3020);
  PFN_cuMemcpyDtoH_v3020 dtoh = proc<PFN_cuMemcpyDtoH_v3020>("cuMemcpyDtoH", 3020);
  PFN_cuMemsetD8_v3020 memset8 = proc<PFN_cuMemsetD8_v3020>("cuMemsetD8", 3020);
  PFN_cuMemHostAlloc_v2020 host_alloc = proc<PFN_cuMemHostAlloc_v2020>("cuMemHostAlloc", 2020);
  PFN_cuMemAllocHost_v3020 alloc_host = proc<PFN_cuMemAllocHost_v3020>("cuMemAllocHost", 3020);
  PFN_cuMemFreeHost_v2000 free_host = proc<PFN_cuMemFreeHost_v2000>("cuMemFreeHost", 2000);
  PFN_cuMemHostRegister_v6050 host_register = proc<PFN_cuMemHostRegister_v6050>("cuMemHostRegister", 6050);
  PFN_cuMemHostUnregister_v4000 host_unregister = proc<PFN_cuMemHostUnregister_v4000>("cuMemHostUnregister", 4000);
  PFN_cuGetErrorName_v6000 error_name = proc<PFN_cuGetErrorName_v6000>("cuGetErrorName", 6000);
  PFN_cuGetErrorString_v6000 error_string = proc<PFN_cuGetErrorString_v6000>("cuGetErrorString", 6000);
};

const Api& api() {
  static Api a;
  return a;
}

// A test's view of the driver after cuInit, with device `d`'s primary context current on this thread.
class Driver : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(api().init(0), CUDA_SUCCESS); make_current(0); }
  void TearDown() override {
    for (CUdevice d : retained_) api().release(d);
    api().set_current(nullptr);
  }
  void make_current(CUdevice d) {
    CUcontext ctx = nullptr;
    ASSERT_EQ(api().retain(&ctx, d), CUDA_SUCCESS);
    retained_.push_back(d);
    ASSERT_EQ(api().set_current(ctx), CUDA_SUCCESS);
  }
  static size_t free_bytes() {
    size_t free = 0, total = 0;
    EXPECT_EQ(api().mem_info(&free, &total), CUDA_SUCCESS);
    EXPECT_EQ(total, kTotal);
    return free;
  }
  std::vector<CUdevice> retained_;
};

// For death tests: a failed check in the re-executed child says what failed and exits non-zero.
#define CHILD_EXPECT_EQ(a, b)                                                          \
  do {                                                                                 \
    auto va = (a);                                                                     \
    auto vb = (b);                                                                     \
    if (!(va == vb)) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s != %s\n", __FILE__, __LINE__, #a, #b);           \
      std::fflush(stderr);                                                             \
      std::_Exit(1);                                                                   \
    }                                                                                  \
  } while (0)

class FreshProcess : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// --- exported names and cuGetProcAddress -----------------------------------------------------------------

TEST(CudaDoubleExports, HasTheDriversVersionedAndLegacyNames) {
  for (const char* name :
       {"cuInit", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuDeviceTotalMem_v2", "cuMemAllocPitch_v2",
        "cuGetProcAddress_v2", "cuGetProcAddress", "cuMemAlloc", "cuMemFree", "cuMemGetInfo", "cuCtxCreate_v4",
        "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuStreamDestroy_v2", "cuDevicePrimaryCtxRelease_v2",
        "cuDevicePrimaryCtxReset_v2", "cuDeviceGetUuid_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
        "cuMemFreeAsync_ptsz", "cuMemAllocFromPoolAsync_ptsz", "cuStreamSynchronize_ptsz", "cuMemcpyHtoD_v2",
        "cuMemcpyDtoH_v2", "cuMemsetD8_v2", "cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemHostAlloc",
        "cuMemAllocHost_v2", "cuMemFreeHost", "cuMemHostRegister_v2", "cuMemHostUnregister"})
    EXPECT_NE(sym(name), nullptr) << name;
  // Names the driver does not have, and the double's own C++ internals, are not exported.
  EXPECT_EQ(sym("cuMemAlloc_v3"), nullptr);
  EXPECT_EQ(sym("_ZN11cuda_double6Driver3getEv"), nullptr);
}

TEST(CudaDoubleExports, ProcTableMatchesCudaTypedefsAndDlsym) {
  const char* path = std::getenv("OOMH_CUDA_TYPEDEFS");
  ASSERT_NE(path, nullptr) << "ctest sets OOMH_CUDA_TYPEDEFS to cudaTypedefs.h";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string typedefs = text.str();
  auto table = reinterpret_cast<const OomhDoubleProc* (*)(size_t*)>(sym("oomh_cuda_double_procs"));
  size_t n = 0;
  const OomhDoubleProc* rows = table(&n);
  ASSERT_GT(n, 40u);
  for (size_t i = 0; i < n; ++i) {
    const OomhDoubleProc& p = rows[i];
    std::string pfn = "PFN_" + std::string(p.base) + "_v" + std::to_string(p.version);
    std::string symbol = p.symbol;
    if (p.per_thread) pfn += symbol.ends_with("_ptds") ? "_ptds" : "_ptsz";
    EXPECT_NE(typedefs.find(pfn + ")"), std::string::npos) << pfn << " is not in " << path;
    EXPECT_EQ(sym(p.symbol), p.function) << p.symbol;
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status{};
    cuuint64_t flags = p.per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    // A flavour's own version finds it (or a per-thread flavour of the same version).
    ASSERT_EQ(get_proc()(p.base, &fn, p.version, flags, &status), CUDA_SUCCESS) << p.symbol;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    if (!p.per_thread && fn != p.function) {
      Dl_info info{};
      ASSERT_NE(dladdr(fn, &info), 0);
      EXPECT_TRUE(std::string(info.dli_sname).ends_with("_ptsz") || std::string(info.dli_sname).ends_with("_ptds"))
          << p.symbol << " resolved to " << info.dli_sname;
    } else {
      EXPECT_EQ(fn, p.function) << p.symbol;
    }
  }
}

struct Flavour {
  const char* base;
  int version;
  cuuint64_t flags;
  const char* symbol;
};

TEST(CudaDoubleProcAddress, PicksTheFlavourForVersionAndStreamMode) {
  constexpr cuuint64_t PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  constexpr cuuint64_t LEGACY = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  const Flavour cases[] = {
      {"cuMemAlloc", 2000, 0, "cuMemAlloc"},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13000, PT, "cuMemAlloc_v2"},  // no per-thread flavour: the legacy one
      {"cuMemFree", 12000, 0, "cuMemFree_v2"},
      {"cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2"},
      {"cuMemGetInfo", 3010, 0, "cuMemGetInfo"},
      {"cuDeviceTotalMem", 12000, 0, "cuDeviceTotalMem_v2"},
      {"cuMemAllocPitch", 13000, 0, "cuMemAllocPitch_v2"},
      {"cuMemAllocAsync", 12000, 0, "cuMemAllocAsync"},
      {"cuMemAllocAsync", 12000, LEGACY, "cuMemAllocAsync"},
      {"cuMemAllocAsync", 12000, PT, "cuMemAllocAsync_ptsz"},
      {"cuMemFreeAsync", 12000, PT, "cuMemFreeAsync_ptsz"},
      {"cuMemAllocFromPoolAsync", 12000, PT, "cuMemAllocFromPoolAsync_ptsz"},
      {"cuStreamSynchronize", 13000, PT, "cuStreamSynchronize_ptsz"},
      {"cuStreamSynchronize", 6050, PT, "cuStreamSynchronize"},  // before per-thread streams existed
      {"cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", 13000, PT, "cuMemcpyHtoD_v2_ptds"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuDevicePrimaryCtxRelease", 10020, 0, "cuDevicePrimaryCtxRelease"},
      {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
      {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
      {"cuCtxGetDevice", 12080, 0, "cuCtxGetDevice"},
      {"cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"},
      {"cuDeviceGetUuid", 11040, 0, "cuDeviceGetUuid_v2"},
      {"cuInit", 13000, 0, "cuInit"},
  };
  for (const auto& c : cases) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(get_proc()(c.base, &fn, c.version, c.flags, &status), CUDA_SUCCESS) << c.base << " " << c.version;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT_EQ(fn, sym(c.symbol)) << c.base << " at " << c.version << " flags " << c.flags << " should be " << c.symbol;
  }
}

TEST(CudaDoubleProcAddress, UnknownSymbolsAndOldVersionsAreNotFound) {
  void* fn = &fn;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(get_proc()("cuNoSuchFunction", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(get_proc()("cuMemAllocAsync", &fn, 11010, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(get_proc()("cuMemAlloc", &fn, 13010, 0, &status), CUDA_ERROR_INVALID_VALUE);  // newer than the driver
  EXPECT_EQ(get_proc()("cuMemAlloc", &fn, 13000, 4, &status), CUDA_ERROR_INVALID_VALUE);  // unknown flag
  EXPECT_EQ(get_proc()(nullptr, &fn, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  // The legacy four-argument entry point answers the same way.
  auto v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(sym("cuGetProcAddress"));
  ASSERT_NE(v1, nullptr);
  EXPECT_EQ(v1("cuMemFree", &fn, 3020, 0), CUDA_SUCCESS);
  EXPECT_EQ(fn, sym("cuMemFree_v2"));
  EXPECT_EQ(v1("cuNoSuchFunction", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
}

// --- initialisation and configuration ---------------------------------------------------------------

TEST_F(FreshProcess, CallsBeforeCuInitFailNotInitialized) {
  auto child = [&] {
        const Api& a = api();
        int count = -1, version = 0;
        CUdeviceptr p = 0;
        CHILD_EXPECT_EQ(a.device_count(&count), CUDA_ERROR_NOT_INITIALIZED);
        CHILD_EXPECT_EQ(a.alloc(&p, 1024), CUDA_ERROR_NOT_INITIALIZED);
        CHILD_EXPECT_EQ(a.free(0x1000), CUDA_ERROR_NOT_INITIALIZED);
        CUdevice dev = -1;
        CHILD_EXPECT_EQ(a.ctx_device(&dev), CUDA_ERROR_NOT_INITIALIZED);
        CHILD_EXPECT_EQ(a.driver_version(&version), CUDA_SUCCESS);  // allowed before cuInit, as in the driver
        CHILD_EXPECT_EQ(version, 13000);
        CHILD_EXPECT_EQ(a.init(1), CUDA_ERROR_INVALID_VALUE);
        CHILD_EXPECT_EQ(a.init(0), CUDA_SUCCESS);
        CHILD_EXPECT_EQ(a.device_count(&count), CUDA_SUCCESS);
        CHILD_EXPECT_EQ(count, 2);
        std::_Exit(0);};
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST_F(FreshProcess, BadMemorySizeFailsCuInitWithAMessage) {
  auto child = [&] {
        setenv("CUDA_DOUBLE_MEMORY", "12XB", 1);
        std::_Exit(api().init(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1);};
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "CUDA_DOUBLE_MEMORY: bad size '12XB': unknown unit 'XB'");
}

TEST_F(FreshProcess, NoDevicesIsNoDevice) {
  auto child = [&] {
        setenv("CUDA_DOUBLE_DEVICES", "0", 1);
        std::_Exit(api().init(0) == CUDA_ERROR_NO_DEVICE ? 0 : 1);};
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST_F(FreshProcess, LargeDevicesCostNothingUntilTouched) {
  std::ifstream overcommit("/proc/sys/vm/overcommit_memory");
  int mode = 0;
  overcommit >> mode;
  if (mode == 2) GTEST_SKIP() << "strict overcommit: large MAP_NORESERVE mappings are refused here";
  auto child = [&] {
        setenv("CUDA_DOUBLE_MEMORY", "1TiB", 1);
        const Api& a = api();
        CHILD_EXPECT_EQ(a.init(0), CUDA_SUCCESS);
        CUcontext ctx = nullptr;
        CHILD_EXPECT_EQ(a.retain(&ctx, 0), CUDA_SUCCESS);
        CHILD_EXPECT_EQ(a.set_current(ctx), CUDA_SUCCESS);
        CUdeviceptr p = 0, q = 0;
        CHILD_EXPECT_EQ(a.alloc(&p, size_t{300} << 30), CUDA_SUCCESS);
        CHILD_EXPECT_EQ(a.alloc(&q, size_t{300} << 30), CUDA_SUCCESS);
        CHILD_EXPECT_EQ(a.memset8(p, 7, 4096), CUDA_SUCCESS);  // only what is touched is backed
        CHILD_EXPECT_EQ(a.free(p), CUDA_SUCCESS);
        CHILD_EXPECT_EQ(a.free(q), CUDA_SUCCESS);
        std::_Exit(0);};
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// Pinned host memory (the comment at the top of driver_double.h): counted against CUDA_DOUBLE_HOST_MEMORY by
// every way of pinning, refused past it with exactly CUDA_ERROR_OUT_OF_MEMORY, and the driver's codes for a
// pointer it never pinned.
TEST_F(FreshProcess, PinnedHostMemoryStopsAtItsLimit) {
  auto child = [&] {
    setenv("CUDA_DOUBLE_HOST_MEMORY", "8MiB", 1);
    const Api& a = api();
    CHILD_EXPECT_EQ(a.init(0), CUDA_SUCCESS);
    void* p = nullptr;
    void* q = nullptr;
    CHILD_EXPECT_EQ(a.host_alloc(&p, 4 * kMiB, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
    std::memset(p, 1, 4 * kMiB);  // real, writable host memory
    CHILD_EXPECT_EQ(a.alloc_host(&q, 4 * kMiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_EXPECT_EQ(q == nullptr, true);
    CHILD_EXPECT_EQ(a.alloc_host(&q, 2 * kMiB), CUDA_SUCCESS);
    static char buffer[2 * kMiB];
    CHILD_EXPECT_EQ(a.host_register(buffer, sizeof buffer, 0), CUDA_SUCCESS);
    CHILD_EXPECT_EQ(a.host_register(buffer, sizeof buffer, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CHILD_EXPECT_EQ(a.host_alloc(&p, 1, 0x100), CUDA_ERROR_INVALID_VALUE);  // an unknown flag
    void* full = nullptr;
    CHILD_EXPECT_EQ(a.host_alloc(&full, 1, 0), CUDA_ERROR_OUT_OF_MEMORY);  // 8 MiB pinned
    CHILD_EXPECT_EQ(a.free_host(buffer), CUDA_ERROR_INVALID_VALUE);       // registered, not allocated
    CHILD_EXPECT_EQ(a.host_unregister(q), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CHILD_EXPECT_EQ(a.host_unregister(buffer), CUDA_SUCCESS);
    CHILD_EXPECT_EQ(a.free_host(q), CUDA_SUCCESS);
    CHILD_EXPECT_EQ(a.free_host(q), CUDA_ERROR_INVALID_VALUE);  // twice
    // A host cuMemCreate takes from the same limit.
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemGenericAllocationHandle h = 0;
    CHILD_EXPECT_EQ(a.create(&h, 6 * kMiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_EXPECT_EQ(a.create(&h, 4 * kMiB, &prop, 0), CUDA_SUCCESS);
    CHILD_EXPECT_EQ(a.host_alloc(&full, 1, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_EXPECT_EQ(a.release_handle(h), CUDA_SUCCESS);
    CHILD_EXPECT_EQ(a.free_host(p), CUDA_SUCCESS);
    CHILD_EXPECT_EQ(a.host_alloc(&full, 8 * kMiB, 0), CUDA_SUCCESS);
    std::_Exit(0);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// --- devices and contexts ------------------------------------------------------------------------------

TEST_F(Driver, DescribesTheConfiguredDevices) {
  int count = 0;
  ASSERT_EQ(api().device_count(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  CUdevice dev = -1;
  EXPECT_EQ(api().device_get(&dev, 1), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(api().device_get(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().device_get(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  char name[64] = {};
  ASSERT_EQ(api().device_name(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "oomharness CUDA driver double");
  EXPECT_EQ(api().device_name(name, sizeof name, 5), CUDA_ERROR_INVALID_DEVICE);
  size_t total = 0;
  ASSERT_EQ(api().total_mem(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, kTotal);
  CUuuid u0{}, u1{};
  ASSERT_EQ(api().uuid(&u0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().uuid(&u1, 1), CUDA_SUCCESS);
  EXPECT_NE(std::string(u0.bytes, 16), std::string(u1.bytes, 16));
  char bus[32] = {};
  ASSERT_EQ(api().bus_id(bus, sizeof bus, 1), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:02:00.0");
}

TEST_F(Driver, ContextStackFollowsTheDriversRules) {
  CUdevice dev = -1;
  ASSERT_EQ(api().ctx_device(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  CUcontext primary1 = nullptr, popped = nullptr, current = nullptr;
  ASSERT_EQ(api().retain(&primary1, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().push(primary1), CUDA_SUCCESS);
  ASSERT_EQ(api().ctx_device(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  ASSERT_EQ(api().pop(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, primary1);
  ASSERT_EQ(api().ctx_device(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(api().release(1), CUDA_SUCCESS);
  // A created context becomes current; destroying it leaves the one below.
  CUcontext created = nullptr;
  ASSERT_EQ(api().ctx_create(&created, nullptr, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, created);
  EXPECT_EQ(api().ctx_destroy(created), CUDA_SUCCESS);
  EXPECT_EQ(api().ctx_destroy(created), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(api().ctx_device(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  // Setting NULL pops; with no context left, allocation has no device to go to.
  ASSERT_EQ(api().set_current(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
  CUdeviceptr p = 0;
  size_t free = 0, total = 0;
  EXPECT_EQ(api().alloc(&p, 1024), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().mem_info(&free, &total), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().pop(&popped), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(Driver, DestroyingAContextBelowTheTopKeepsTheRestInOrder) {
  CUcontext created = nullptr, primary1 = nullptr, current = nullptr, popped = nullptr;
  ASSERT_EQ(api().ctx_create(&created, nullptr, 0, 1), CUDA_SUCCESS);  // [primary 0, created]
  ASSERT_EQ(api().retain(&primary1, 1), CUDA_SUCCESS);
  retained_.push_back(1);
  ASSERT_EQ(api().push(primary1), CUDA_SUCCESS);  // [primary 0, created, primary 1]
  ASSERT_EQ(api().ctx_destroy(created), CUDA_SUCCESS);
  ASSERT_EQ(api().get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary1);
  ASSERT_EQ(api().pop(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, primary1);
  CUdevice dev = -1;
  ASSERT_EQ(api().ctx_device(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);  // the destroyed one is gone from the middle
  // cuCtxSetCurrent replaces the top only.
  ASSERT_EQ(api().push(primary1), CUDA_SUCCESS);
  ASSERT_EQ(api().set_current(primary1), CUDA_SUCCESS);
  ASSERT_EQ(api().pop(&popped), CUDA_SUCCESS);
  ASSERT_EQ(api().ctx_device(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
}

// The current context belongs to the thread (the double keeps it thread-local, without a lock, as the
// driver does): a new thread starts with none, and what it makes current is its own.
TEST_F(Driver, TheCurrentContextIsPerThread) {
  CUresult in_new_thread = CUDA_SUCCESS, after_set = CUDA_ERROR_UNKNOWN;
  CUdevice seen = -1;
  std::thread other([&] {
    CUdevice dev = -1;
    in_new_thread = api().ctx_device(&dev);
    CUcontext ctx = nullptr;
    if (api().retain(&ctx, 1) != CUDA_SUCCESS || api().set_current(ctx) != CUDA_SUCCESS) return;
    after_set = api().ctx_device(&seen);
    api().set_current(nullptr);
    api().release(1);
  });
  other.join();
  EXPECT_EQ(in_new_thread, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(after_set, CUDA_SUCCESS);
  EXPECT_EQ(seen, 1);
  CUdevice here = -1;
  ASSERT_EQ(api().ctx_device(&here), CUDA_SUCCESS);
  EXPECT_EQ(here, 0);  // this thread's context did not move
}

// --- memory --------------------------------------------------------------------------------------------

TEST_F(Driver, OutOfMemoryExactlyAtTheConfiguredSize) {
  std::vector<CUdeviceptr> held(4);
  for (auto& p : held) ASSERT_EQ(api().alloc(&p, 16 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), 0u);
  CUdeviceptr extra = 0;
  EXPECT_EQ(api().alloc(&extra, 1), CUDA_ERROR_OUT_OF_MEMORY);
  // Device 1 has its own 64 MiB.
  make_current(1);
  ASSERT_EQ(api().alloc(&extra, 64 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(api().free(extra), CUDA_SUCCESS);
  make_current(0);
  ASSERT_EQ(api().free(held[2]), CUDA_SUCCESS);
  EXPECT_EQ(api().alloc(&extra, 16 * kMiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api().alloc(&held[2], 16 * kMiB), CUDA_SUCCESS);
  for (auto p : held) ASSERT_EQ(api().free(p), CUDA_SUCCESS);
  EXPECT_EQ(api().alloc(&extra, kTotal + 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(api().alloc(&extra, SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(free_bytes(), kTotal);
  const char* name = nullptr;
  ASSERT_EQ(api().error_name(CUDA_ERROR_OUT_OF_MEMORY, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_EQ(api().error_string(CUDA_ERROR_OUT_OF_MEMORY, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "out of memory");
}

TEST_F(Driver, MemInfoCountsRoundedSizes) {
  const size_t before = free_bytes();
  EXPECT_EQ(before, kTotal);
  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  size_t pitch = 0;
  ASSERT_EQ(api().alloc(&a, 1), CUDA_SUCCESS);        // 512
  ASSERT_EQ(api().alloc(&b, 513), CUDA_SUCCESS);      // 1024
  ASSERT_EQ(api().alloc_managed(&c, 1000, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);  // 1024
  ASSERT_EQ(api().alloc_pitch(&d, &pitch, 100, 3, 4), CUDA_SUCCESS);  // 3 rows of 512
  EXPECT_EQ(pitch, 512u);
  EXPECT_EQ(free_bytes(), before - 512 - 1024 - 1024 - 1536);
  for (CUdeviceptr p : {a, b, c, d}) ASSERT_EQ(api().free(p), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(Driver, BadArgumentsGetTheDriversCodes) {
  CUdeviceptr p = 0;
  EXPECT_EQ(api().alloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().alloc(nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().free(0xdead0000), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api().alloc(&p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(api().free(p + 16), CUDA_ERROR_INVALID_VALUE);  // not the start of an allocation
  EXPECT_EQ(api().free(p), CUDA_SUCCESS);
  EXPECT_EQ(api().free(p), CUDA_ERROR_INVALID_VALUE);  // twice
  size_t pitch = 0;
  EXPECT_EQ(api().alloc_pitch(&p, &pitch, 100, 3, 3), CUDA_ERROR_INVALID_VALUE);
  const char* text = nullptr;
  EXPECT_EQ(api().error_name(static_cast<CUresult>(424242), &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
  ASSERT_EQ(api().error_name(CUDA_ERROR_NOT_INITIALIZED, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_NOT_INITIALIZED");
}

TEST_F(Driver, CopiesReadAndWriteTheMemory) {
  CUdeviceptr p = 0;
  ASSERT_EQ(api().alloc(&p, 1000), CUDA_SUCCESS);
  const std::string msg = "hello device";
  ASSERT_EQ(api().htod(p, msg.data(), msg.size()), CUDA_SUCCESS);
  std::string back(msg.size(), '\0');
  ASSERT_EQ(api().dtoh(back.data(), p, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, msg);
  ASSERT_EQ(api().memset8(p + 6, 'X', 6), CUDA_SUCCESS);
  ASSERT_EQ(api().dtoh(back.data(), p, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, "hello XXXXXX");
  char big[2048] = {};
  EXPECT_EQ(api().htod(p, big, sizeof big), CUDA_ERROR_INVALID_VALUE);  // past the (rounded) allocation
  EXPECT_EQ(api().dtoh(big, 0x10, 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().free(p), CUDA_SUCCESS);
  EXPECT_EQ(api().memset8(p, 0, 8), CUDA_ERROR_INVALID_VALUE);  // freed
}

TEST_F(Driver, StreamOrderedAllocationAndPools) {
  CUstream s = nullptr;
  ASSERT_EQ(api().stream_create(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr p = 0, q = 0;
  ASSERT_EQ(api().alloc_async(&p, 8 * kMiB, s), CUDA_SUCCESS);
  ASSERT_EQ(api().alloc_async(&q, 1 * kMiB, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kTotal - 9 * kMiB);
  EXPECT_EQ(api().alloc_async(&p, 64 * kMiB, s), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api().free_async(p, s), CUDA_SUCCESS);
  ASSERT_EQ(api().free_async(q, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().stream_sync(s), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kTotal);

  // A pool on device 1 takes device 1's memory although device 0 is current.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CUmemoryPool pool = nullptr, default_pool = nullptr;
  ASSERT_EQ(api().pool_create(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(api().alloc_from_pool(&p, 60 * kMiB, pool, s), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kTotal);
  EXPECT_EQ(api().alloc_from_pool(&q, 8 * kMiB, pool, s), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api().free_async(p, s), CUDA_SUCCESS);
  EXPECT_EQ(api().pool_destroy(pool), CUDA_SUCCESS);
  ASSERT_EQ(api().default_pool(&default_pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().pool_destroy(default_pool), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().stream_destroy(s), CUDA_SUCCESS);
  EXPECT_EQ(api().stream_destroy(s), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(Driver, VirtualMemoryCreateMapRelease) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  size_t gran = 0;
  ASSERT_EQ(api().granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(gran, 2 * kMiB);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(api().create(&h, 3 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);  // not a granularity multiple
  EXPECT_EQ(api().create(&h, 66 * kMiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api().create(&h, 4 * kMiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kTotal - 4 * kMiB);  // creating the handle is what takes memory

  CUdeviceptr va = 0;
  ASSERT_EQ(api().reserve(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(va % gran, 0u);
  EXPECT_EQ(free_bytes(), kTotal - 4 * kMiB);  // reserving addresses takes none
  ASSERT_EQ(api().map(va, 4 * kMiB, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().map(va, 4 * kMiB, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
  ASSERT_EQ(api().map(va + 4 * kMiB, 2 * kMiB, 2 * kMiB, h, 0), CUDA_SUCCESS);  // the same memory twice
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(api().set_access(va, 6 * kMiB, &access, 1), CUDA_SUCCESS);
  const std::string msg = "mapped twice";
  ASSERT_EQ(api().htod(va + 2 * kMiB, msg.data(), msg.size()), CUDA_SUCCESS);
  std::string back(msg.size(), '\0');
  ASSERT_EQ(api().dtoh(back.data(), va + 4 * kMiB, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, msg);

  // Released while mapped: the memory stays in use until the last mapping goes.
  ASSERT_EQ(api().release_handle(h), CUDA_SUCCESS);
  EXPECT_EQ(api().release_handle(h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(free_bytes(), kTotal - 4 * kMiB);
  ASSERT_EQ(api().unmap(va, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kTotal - 4 * kMiB);
  EXPECT_EQ(api().address_free(va, 8 * kMiB), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(api().unmap(va + 4 * kMiB, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kTotal);
  EXPECT_EQ(api().address_free(va, 8 * kMiB), CUDA_SUCCESS);
}

TEST_F(Driver, EightThreadsKeepExactTotals) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 2000;
  CUcontext ctx = nullptr;
  ASSERT_EQ(api().get_current(&ctx), CUDA_SUCCESS);
  std::vector<std::vector<CUdeviceptr>> kept(kThreads);
  std::vector<size_t> kept_bytes(kThreads, 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (api().set_current(ctx) != CUDA_SUCCESS) ++failures;
      uint32_t seed = 12345u + static_cast<uint32_t>(t);
      std::vector<CUdeviceptr> live;
      for (int i = 0; i < kRounds; ++i) {
        seed = seed * 1664525u + 1013904223u;
        size_t size = 1 + (seed >> 8) % (16 * 1024);  // kept ones total about 4 MiB: no OOM here
        CUdeviceptr p = 0;
        if (api().alloc(&p, size) != CUDA_SUCCESS) { ++failures; continue; }
        if ((seed >> 4) % 32 == 0) {
          kept[t].push_back(p);
          kept_bytes[t] += (size + 511) / 512 * 512;
        } else {
          live.push_back(p);
        }
        if (live.size() > 8) {
          if (api().free(live.front()) != CUDA_SUCCESS) ++failures;
          live.erase(live.begin());
        }
      }
      for (CUdeviceptr p : live)
        if (api().free(p) != CUDA_SUCCESS) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  size_t total_kept = 0;
  for (size_t b : kept_bytes) total_kept += b;
  EXPECT_GT(total_kept, 0u);
  EXPECT_EQ(free_bytes(), kTotal - total_kept);
  for (auto& v : kept)
    for (CUdeviceptr p : v) ASSERT_EQ(api().free(p), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes(), kTotal);
}

TEST_F(Driver, LegacyEntryPointsUse32BitValues) {
  // The legacy signatures, which cuda.h only declares for the driver's own build.
  using CUdeviceptr_v1 = unsigned int;
  using LegacyAlloc = CUresult (*)(CUdeviceptr_v1*, unsigned int);
  using LegacyFree = CUresult (*)(CUdeviceptr_v1);
  using LegacyInfo = CUresult (*)(unsigned int*, unsigned int*);
  auto legacy_alloc = reinterpret_cast<LegacyAlloc>(sym("cuMemAlloc"));
  auto legacy_free = reinterpret_cast<LegacyFree>(sym("cuMemFree"));
  auto legacy_info = reinterpret_cast<LegacyInfo>(sym("cuMemGetInfo"));
  ASSERT_TRUE(legacy_alloc && legacy_free && legacy_info);
  CUdeviceptr_v1 p = 0;
  CUresult r = legacy_alloc(&p, 1000);
#ifdef MAP_32BIT
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_NE(p, 0u);
  unsigned int free = 0, total = 0;
  ASSERT_EQ(legacy_info(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, kTotal);
  EXPECT_EQ(free, kTotal - 1024);
  EXPECT_EQ(legacy_free(p), CUDA_SUCCESS);
#else
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
#endif
}

}  // namespace
