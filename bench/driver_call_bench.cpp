// What the shim adds to a driver call on the real driver: a plain timed program that reaches the driver the
// way a framework does (dlopen("libcuda.so.1") + dlsym, which the preloaded shim answers with its hooks) and
// times, per call, the intercepted entry points a training job meets:
//   alloc_free   cuMemAlloc_v2 + cuMemFree_v2 of --size bytes (a caching allocator growing and shrinking)
//   async_pair   cuMemAllocAsync + cuMemFreeAsync of --size bytes on a stream, from the device's default pool
//                with its release threshold raised (the cudaMallocAsync backend's steady state)
//   mem_get_info cuMemGetInfo_v2
// Each figure is the median over --reps repetitions of the mean of --calls calls (one pair counts as one).
// Prints one JSON line. bench/gpu/driver_calls.py runs it natively and under the shim, alternating, and
// reports the difference; on the CPU driver double it runs the same way (async_pair is left out where the
// driver cannot do it).
//
// --nvml loads NVML and initialises it before measuring (as a footprint cap does), without the shim, and
// also times nvmlInit_v2 and one nvmlDeviceGetComputeRunningProcesses_v3: whether NVML's presence alone
// changes what the driver's calls cost.
//
//   driver_call_bench [--calls N] [--reps R] [--size BYTES] [--nvml]

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <dlfcn.h>

namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
Fn sym(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "driver_call_bench: %s\n", what.c_str());
  std::exit(1);
}

// Median over `reps` of the mean ns per iteration of `calls` iterations of `body`; `after` runs untimed
// after each repetition (a stream synchronisation).
template <typename Body, typename After>
double median_ns(int reps, int calls, Body&& body, After&& after) {
  std::vector<double> per;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) body();
    double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    after();
    per.push_back(ns / calls);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 2000, reps = 15;
  size_t size = size_t{2} << 20;
  bool nvml = false;
  for (int i = 1; i < argc; i += 2) {
    if (!std::strcmp(argv[i], "--nvml")) {
      nvml = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) die(std::string("missing value for ") + argv[i]);
    if (!std::strcmp(argv[i], "--calls")) calls = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--size")) size = std::strtoull(argv[i + 1], nullptr, 10);
    else die(std::string("unknown argument ") + argv[i]);
  }
  if (calls < 1 || reps < 1 || size == 0) die("--calls, --reps and --size must be positive");

  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) die(std::string("cannot load libcuda.so.1: ") + dlerror());
  auto init = sym<decltype(&cuInit)>(lib, "cuInit");
  auto device_get = sym<decltype(&cuDeviceGet)>(lib, "cuDeviceGet");
  auto retain = sym<decltype(&cuDevicePrimaryCtxRetain)>(lib, "cuDevicePrimaryCtxRetain");
  auto set_current = sym<decltype(&cuCtxSetCurrent)>(lib, "cuCtxSetCurrent");
  auto alloc = sym<decltype(&cuMemAlloc_v2)>(lib, "cuMemAlloc_v2");
  auto release = sym<decltype(&cuMemFree_v2)>(lib, "cuMemFree_v2");
  auto info = sym<decltype(&cuMemGetInfo_v2)>(lib, "cuMemGetInfo_v2");
  auto stream_create = sym<decltype(&cuStreamCreate)>(lib, "cuStreamCreate");
  auto stream_sync = sym<decltype(&cuStreamSynchronize)>(lib, "cuStreamSynchronize");
  auto alloc_async = sym<decltype(&cuMemAllocAsync)>(lib, "cuMemAllocAsync");
  auto free_async = sym<decltype(&cuMemFreeAsync)>(lib, "cuMemFreeAsync");
  auto default_pool = sym<decltype(&cuDeviceGetDefaultMemPool)>(lib, "cuDeviceGetDefaultMemPool");
  auto pool_set = sym<decltype(&cuMemPoolSetAttribute)>(lib, "cuMemPoolSetAttribute");
  if (!init || !device_get || !retain || !set_current || !alloc || !release || !info) die("the driver lacks a basic entry point");

  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (init(0) != CUDA_SUCCESS || device_get(&dev, 0) != CUDA_SUCCESS || retain(&ctx, dev) != CUDA_SUCCESS ||
      set_current(ctx) != CUDA_SUCCESS)
    die("cannot make a context on device 0");

  double nvml_init_ms = -1, nvml_query_us = -1;
  if (nvml) {
    void* ml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    auto nvml_init = ml ? sym<int (*)()>(ml, "nvmlInit_v2") : nullptr;
    auto by_index = ml ? sym<int (*)(unsigned, void**)>(ml, "nvmlDeviceGetHandleByIndex_v2") : nullptr;
    struct Info { unsigned pid; unsigned long long used; unsigned gi, ci; };
    auto processes = ml ? sym<int (*)(void*, unsigned*, Info*)>(ml, "nvmlDeviceGetComputeRunningProcesses_v3") : nullptr;
    if (!nvml_init || !by_index || !processes) die("--nvml: cannot load NVML");
    auto t0 = Clock::now();
    if (nvml_init() != 0) die("--nvml: nvmlInit_v2 failed");
    nvml_init_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    void* handle = nullptr;
    by_index(0, &handle);
    Info infos[64];
    std::vector<double> q;
    for (int i = 0; i < 21; ++i) {
      unsigned count = 64;
      auto t1 = Clock::now();
      processes(handle, &count, infos);
      q.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t1).count());
    }
    std::sort(q.begin(), q.end());
    nvml_query_us = q[q.size() / 2];
  }

  auto nothing = [] {};
  double alloc_free = median_ns(reps, calls, [&] {
    CUdeviceptr p = 0;
    if (alloc(&p, size) != CUDA_SUCCESS || release(p) != CUDA_SUCCESS) die("cuMemAlloc/cuMemFree failed");
  }, nothing);
  size_t free_bytes = 0, total = 0;
  double mem_get_info = median_ns(reps, calls, [&] { info(&free_bytes, &total); }, nothing);

  double async_pair = -1;
  CUstream stream = nullptr;
  CUmemoryPool pool = nullptr;
  cuuint64_t keep = ~cuuint64_t{0};
  if (stream_create && stream_sync && alloc_async && free_async && default_pool && pool_set &&
      stream_create(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS && default_pool(&pool, dev) == CUDA_SUCCESS &&
      pool_set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) == CUDA_SUCCESS) {
    async_pair = median_ns(reps, calls, [&] {
      CUdeviceptr p = 0;
      if (alloc_async(&p, size, stream) != CUDA_SUCCESS || free_async(p, stream) != CUDA_SUCCESS) die("async pair failed");
    }, [&] { stream_sync(stream); });
  }
  std::printf("{\"alloc_free_ns\": %.1f, \"async_pair_ns\": %.1f, \"mem_get_info_ns\": %.1f, \"calls\": %d, \"reps\": %d, "
              "\"size\": %zu, \"nvml_init_ms\": %.2f, \"nvml_query_us\": %.1f}\n",
              alloc_free, async_pair, mem_get_info, calls, reps, size, nvml_init_ms, nvml_query_us);
  return 0;
}
