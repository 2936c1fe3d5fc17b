// A library whose constructor looks CUDA up before main runs (as some frameworks' static initialisers do):
// dlsym for hooked names, cuGetProcAddress_v2, and one call through each. Preloaded before or after the
// shim, it must not deadlock, recurse or crash (preload_test.cpp, StartUp tests).
#include <cuda.h>

#include <cstdio>

#include <dlfcn.h>

namespace {
__attribute__((constructor)) void look_up_cuda_early() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) return;
  auto proc = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(h, "cuGetProcAddress_v2"));
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(h, "cuInit"));
  auto info = reinterpret_cast<decltype(&cuMemGetInfo_v2)>(dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2"));
  void* alloc = dlsym(RTLD_NEXT, "cuMemAlloc_v2");
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  CUresult rc = proc ? proc("cuMemAlloc", &p, 13000, 0, &status) : CUDA_ERROR_NOT_FOUND;
  if (init) init(0);
  size_t free_bytes = 0, total = 0;
  CUresult info_rc = info ? info(&free_bytes, &total) : CUDA_ERROR_NOT_FOUND;  // no context yet: an error, not a hang
  std::fprintf(stderr, "early: proc=%d alloc=%d procaddr_rc=%d info_rc=%d\n", proc != nullptr, alloc != nullptr,
               static_cast<int>(rc), static_cast<int>(info_rc));
}
}  // namespace
