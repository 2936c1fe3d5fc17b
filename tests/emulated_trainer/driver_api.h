#pragma once
// The driver functions the emulated trainer calls, and the three ways it can find them:
//
//   procaddress  dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then every other function through
//                cuGetProcAddress_v2 with the version of the ABI this file uses: what the CUDA runtime
//                (and so PyTorch) does, and the path the harness's shim must see. The default.
//   dlsym        dlopen, then dlsym of each versioned name ("cuMemAlloc_v2").
//   link         the program is linked against libcuda.so and calls the exported symbols directly.
//
// One table (DRIVER_FUNCTIONS) lists field, base name, ABI version and exported symbol; the typedef of
// each field is cudaTypedefs.h's PFN_<base>_v<version>, so a wrong version does not compile.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace trainer {

#define DRIVER_FUNCTIONS(X)                                                              \
  X(init, cuInit, 2000, cuInit)                                                          \
  X(get_error_name, cuGetErrorName, 6000, cuGetErrorName)                                \
  X(device_get, cuDeviceGet, 2000, cuDeviceGet)                                          \
  X(primary_retain, cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain)            \
  X(primary_release, cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2)     \
  X(ctx_set_current, cuCtxSetCurrent, 4000, cuCtxSetCurrent)                             \
  X(stream_create, cuStreamCreate, 2000, cuStreamCreate)                                 \
  X(stream_destroy, cuStreamDestroy, 4000, cuStreamDestroy_v2)                           \
  X(stream_synchronize, cuStreamSynchronize, 2000, cuStreamSynchronize)                  \
  X(mem_get_info, cuMemGetInfo, 3020, cuMemGetInfo_v2)                                   \
  X(mem_alloc, cuMemAlloc, 3020, cuMemAlloc_v2)                                          \
  X(mem_free, cuMemFree, 3020, cuMemFree_v2)                                             \
  X(mem_alloc_pitch, cuMemAllocPitch, 3020, cuMemAllocPitch_v2)                          \
  X(mem_alloc_managed, cuMemAllocManaged, 6000, cuMemAllocManaged)                       \
  X(mem_alloc_async, cuMemAllocAsync, 11020, cuMemAllocAsync)                            \
  X(mem_free_async, cuMemFreeAsync, 11020, cuMemFreeAsync)                               \
  X(mem_granularity, cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity) \
  X(mem_create, cuMemCreate, 10020, cuMemCreate)                                         \
  X(mem_release, cuMemRelease, 10020, cuMemRelease)                                      \
  X(mem_address_reserve, cuMemAddressReserve, 10020, cuMemAddressReserve)                \
  X(mem_address_free, cuMemAddressFree, 10020, cuMemAddressFree)                         \
  X(mem_map, cuMemMap, 10020, cuMemMap)                                                  \
  X(mem_unmap, cuMemUnmap, 10020, cuMemUnmap)                                            \
  X(mem_set_access, cuMemSetAccess, 10020, cuMemSetAccess)                               \
  X(memset_d8, cuMemsetD8, 3020, cuMemsetD8_v2)

#define DRIVER_FIELD(field, base, version, symbol) PFN_##base##_v##version field = nullptr;
struct DriverApi {
  DRIVER_FUNCTIONS(DRIVER_FIELD)
};
#undef DRIVER_FIELD

enum class Resolve { procaddress, dlsym, link };

// Fills `api`. Returns an empty string, or what went wrong ("dlopen(libcuda.so.1): ...").
std::string resolve_driver(Resolve how, DriverApi& api);

// "CUDA_ERROR_OUT_OF_MEMORY", or the number when the driver does not know the code.
std::string error_name(const DriverApi& api, CUresult r);

}  // namespace trainer
