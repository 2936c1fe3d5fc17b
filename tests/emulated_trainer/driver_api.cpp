// Finds the driver functions (see driver_api.h for the three ways).
#include "driver_api.h"

#include <dlfcn.h>

namespace trainer {

namespace {

std::string by_procaddress(DriverApi& api) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return std::string("dlopen(libcuda.so.1): ") + dlerror();
  auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) return "libcuda.so.1 has no cuGetProcAddress_v2 (a driver older than CUDA 12)";
  std::string missing;
#define DRIVER_RESOLVE(field, base, version, symbol)                                              \
  {                                                                                               \
    void* fn = nullptr;                                                                           \
    CUdriverProcAddressQueryResult status{};                                                      \
    CUresult r = get_proc(#base, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);             \
    if (r != CUDA_SUCCESS || !fn)                                                                 \
      missing += std::string(missing.empty() ? "" : ", ") + #base + "@" + #version;               \
    api.field = reinterpret_cast<PFN_##base##_v##version>(fn);                                    \
  }
  DRIVER_FUNCTIONS(DRIVER_RESOLVE)
#undef DRIVER_RESOLVE
  return missing.empty() ? "" : "cuGetProcAddress_v2 did not find " + missing;
}

std::string by_dlsym(DriverApi& api) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return std::string("dlopen(libcuda.so.1): ") + dlerror();
  std::string missing;
#define DRIVER_DLSYM(field, base, version, symbol)                                 \
  api.field = reinterpret_cast<PFN_##base##_v##version>(dlsym(lib, #symbol));      \
  if (!api.field) missing += std::string(missing.empty() ? "" : ", ") + #symbol;
  DRIVER_FUNCTIONS(DRIVER_DLSYM)
#undef DRIVER_DLSYM
  return missing.empty() ? "" : "libcuda.so.1 does not export " + missing;
}

void by_link(DriverApi& api) {
#define DRIVER_LINK(field, base, version, symbol) api.field = &symbol;
  DRIVER_FUNCTIONS(DRIVER_LINK)
#undef DRIVER_LINK
}

}  // namespace

std::string resolve_driver(Resolve how, DriverApi& api) {
  switch (how) {
    case Resolve::procaddress: return by_procaddress(api);
    case Resolve::dlsym: return by_dlsym(api);
    case Resolve::link: by_link(api); return "";
  }
  return "unknown resolve mode";
}

std::string error_name(const DriverApi& api, CUresult r) {
  const char* name = nullptr;
  if (api.get_error_name && api.get_error_name(r, &name) == CUDA_SUCCESS && name) return name;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

}  // namespace trainer
