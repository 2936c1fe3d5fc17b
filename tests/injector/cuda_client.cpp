// A small CUDA driver client for the preload tests: it reaches the driver by each of the three paths a real
// program uses (the exported symbol it links against, dlopen + dlsym, cuGetProcAddress_v2 as the CUDA runtime
// does) and prints what happened, one fact per line, for tests/injector/preload_test.cpp to check.
//
//   cuda_client table PATH        where each hook-table entry resolves to through PATH: shim, real or missing
//   cuda_client reach PATH        every allocation entry twice, then every free entry, then the queries
//   cuda_client info PATH         cuMemGetInfo_v2 / cuDeviceTotalMem_v2 / NVML before and after allocating 4 MiB
//   cuda_client threads T N       T threads x N cuMemAlloc_v2/cuMemFree_v2 pairs (every 100th kept)
//   cuda_client fork              allocate, fork; the child allocates 3 MiB and exits
//   cuda_client exec              fork + exec this program as `child-alloc`
//   cuda_client child-alloc       allocate 5 MiB and report OOMH_ variables
//   cuda_client passthrough       allocate, check that nothing of the shim is visible
// PATH: export | dlsym | procaddr

#include "../../injector/preload/hook_table.h"

#include <cuda.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#undef cuGetProcAddress
extern "C" CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
extern "C" CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
extern "C" CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
extern "C" CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);

namespace {

using oomh::inject::HookLibrary;
using oomh::inject::kHookTable;

constexpr size_t MiB = size_t{1} << 20;

// The exported-symbol path: references the linker binds (to the shim when it is preloaded).
struct Exported {
  const char* name;
  void* address;
};
const Exported kExported[] = {
    {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress)},
    {"cuGetProcAddress_v2", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
    {"cuMemAlloc_v2", reinterpret_cast<void*>(&cuMemAlloc_v2)},
    {"cuMemAllocPitch_v2", reinterpret_cast<void*>(&cuMemAllocPitch_v2)},
    {"cuMemAllocManaged", reinterpret_cast<void*>(&cuMemAllocManaged)},
    {"cuMemAllocAsync", reinterpret_cast<void*>(&cuMemAllocAsync)},
    {"cuMemAllocAsync_ptsz", reinterpret_cast<void*>(&cuMemAllocAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", reinterpret_cast<void*>(&cuMemAllocFromPoolAsync)},
    {"cuMemAllocFromPoolAsync_ptsz", reinterpret_cast<void*>(&cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
    {"cuMemFree_v2", reinterpret_cast<void*>(&cuMemFree_v2)},
    {"cuMemFreeAsync", reinterpret_cast<void*>(&cuMemFreeAsync)},
    {"cuMemFreeAsync_ptsz", reinterpret_cast<void*>(&cuMemFreeAsync_ptsz)},
    {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
    {"cuMemHostAlloc", reinterpret_cast<void*>(&cuMemHostAlloc)},
    {"cuMemAllocHost_v2", reinterpret_cast<void*>(&cuMemAllocHost_v2)},
    {"cuMemHostRegister_v2", reinterpret_cast<void*>(&cuMemHostRegister_v2)},
    {"cuMemFreeHost", reinterpret_cast<void*>(&cuMemFreeHost)},
    {"cuMemHostUnregister", reinterpret_cast<void*>(&cuMemHostUnregister)},
    {"cuMemGetInfo_v2", reinterpret_cast<void*>(&cuMemGetInfo_v2)},
    {"cuDeviceTotalMem_v2", reinterpret_cast<void*>(&cuDeviceTotalMem_v2)},
};

void* libcuda() {
  static void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  return h;
}

void* libnvml() {
  static void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  return h;
}

// The version to ask cuGetProcAddress with for a table entry: its own `since`, the newest otherwise.
int version_for(const oomh::inject::HookSpec& h) {
  if (h.since > 0) return h.since;
  return std::strcmp(h.base, "cuGetProcAddress") == 0 ? 11030 : 13000;
}

void* through_procaddr(const char* base, int version, bool ptsz) {
  auto proc = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(libcuda(), "cuGetProcAddress_v2"));
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (!proc || proc(base, &p, version, ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                    &status) != CUDA_SUCCESS)
    return nullptr;
  return p;
}

void* resolve(const std::string& path, const oomh::inject::HookSpec& h) {
  if (path == "export") {
    for (const auto& e : kExported)
      if (std::strcmp(e.name, h.name) == 0) return e.address;
    return nullptr;
  }
  if (path == "dlsym") return dlsym(h.library == HookLibrary::cuda ? libcuda() : libnvml(), h.name);
  if (h.library != HookLibrary::cuda) return nullptr;
  return through_procaddr(h.base, version_for(h), h.ptsz);
}

const char* owner(void* p) {
  if (!p) return "missing";
  Dl_info info{};
  if (!dladdr(p, &info) || !info.dli_fname) return "unknown";
  return std::strstr(info.dli_fname, "liboomharness_inject") ? "shim" : "real";
}

template <typename Fn>
Fn get(const std::string& path, const char* name) {
  int i = oomh::inject::hook_index(name);
  if (i < 0) {
    std::fprintf(stderr, "cuda_client: %s is not in the hook table\n", name);
    std::exit(3);
  }
  auto f = reinterpret_cast<Fn>(resolve(path, kHookTable[i]));
  if (!f) {
    std::fprintf(stderr, "cuda_client: cannot resolve %s through %s\n", name, path.c_str());
    std::exit(3);
  }
  return f;
}

void check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuda_client: %s failed with %d\n", what, static_cast<int>(rc));
    std::exit(4);
  }
}

void init_device() {
  check(cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

int table(const std::string& path) {
  for (const auto& h : kHookTable) std::printf("%s %s\n", h.name, owner(resolve(path, h)));
  return 0;
}

int reach(const std::string& path) {
  init_device();
  CUstream stream = nullptr;
  check(cuStreamCreate(&stream, 0), "cuStreamCreate");
  CUmemoryPool pool = nullptr;
  check(cuDeviceGetDefaultMemPool(&pool, 0), "cuDeviceGetDefaultMemPool");

  auto alloc = get<decltype(&cuMemAlloc_v2)>(path, "cuMemAlloc_v2");
  auto pitch = get<decltype(&cuMemAllocPitch_v2)>(path, "cuMemAllocPitch_v2");
  auto managed = get<decltype(&cuMemAllocManaged)>(path, "cuMemAllocManaged");
  auto async = get<decltype(&cuMemAllocAsync)>(path, "cuMemAllocAsync");
  auto async_ptsz = get<decltype(&cuMemAllocAsync)>(path, "cuMemAllocAsync_ptsz");
  auto from_pool = get<decltype(&cuMemAllocFromPoolAsync)>(path, "cuMemAllocFromPoolAsync");
  auto from_pool_ptsz = get<decltype(&cuMemAllocFromPoolAsync)>(path, "cuMemAllocFromPoolAsync_ptsz");
  auto create = get<decltype(&cuMemCreate)>(path, "cuMemCreate");
  auto free_sync = get<decltype(&cuMemFree_v2)>(path, "cuMemFree_v2");
  auto free_async = get<decltype(&cuMemFreeAsync)>(path, "cuMemFreeAsync");
  auto free_async_ptsz = get<decltype(&cuMemFreeAsync)>(path, "cuMemFreeAsync_ptsz");
  auto release = get<decltype(&cuMemRelease)>(path, "cuMemRelease");
  auto get_info = get<decltype(&cuMemGetInfo_v2)>(path, "cuMemGetInfo_v2");
  auto total_mem = get<decltype(&cuDeviceTotalMem_v2)>(path, "cuDeviceTotalMem_v2");
  auto host_alloc = get<decltype(&cuMemHostAlloc)>(path, "cuMemHostAlloc");
  auto alloc_host = get<decltype(&cuMemAllocHost_v2)>(path, "cuMemAllocHost_v2");
  auto host_register = get<decltype(&cuMemHostRegister_v2)>(path, "cuMemHostRegister_v2");
  auto free_host = get<decltype(&cuMemFreeHost)>(path, "cuMemFreeHost");
  auto host_unregister = get<decltype(&cuMemHostUnregister)>(path, "cuMemHostUnregister");

  // Address space is not memory: the shim must not count this.
  CUdeviceptr reserved = 0;
  check(cuMemAddressReserve(&reserved, 64 * MiB, 0, 0, 0), "cuMemAddressReserve");

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;

  // Each entry twice in a row: with the tests' `every: 2` plan the first call passes, the second fails.
  CUdeviceptr kept[7] = {};
  CUmemGenericAllocationHandle handle = 0;
  auto twice = [](const char* name, auto&& call) {
    for (int attempt = 1; attempt <= 2; ++attempt) {
      size_t size = 0;
      CUresult rc = call(attempt, size);
      std::printf("call %s %d rc=%d size=%zu\n", name, attempt, static_cast<int>(rc), size);
    }
  };
  auto keep = [](int attempt, CUdeviceptr p, CUdeviceptr& slot) {
    if (attempt == 1) slot = p;
  };
  twice("cuMemAlloc_v2", [&](int attempt, size_t& size) {
    CUdeviceptr p = 0;
    size = 1 * MiB;
    CUresult rc = alloc(&p, size);
    keep(attempt, p, kept[0]);
    return rc;
  });
  twice("cuMemAllocPitch_v2", [&](int attempt, size_t& size) {
    CUdeviceptr p = 0;
    size_t pitch_bytes = 0;
    CUresult rc = pitch(&p, &pitch_bytes, 2 * MiB - 100, 1, 4);
    size = pitch_bytes;  // what the driver gave, which the shim books
    keep(attempt, p, kept[1]);
    return rc;
  });
  twice("cuMemAllocManaged", [&](int attempt, size_t& size) {
    CUdeviceptr p = 0;
    size = 3 * MiB;
    CUresult rc = managed(&p, size, CU_MEM_ATTACH_GLOBAL);
    keep(attempt, p, kept[2]);
    return rc;
  });
  twice("cuMemAllocAsync", [&](int attempt, size_t& size) {
    CUdeviceptr p = 0;
    size = 4 * MiB;
    CUresult rc = async(&p, size, stream);
    keep(attempt, p, kept[3]);
    return rc;
  });
  twice("cuMemAllocAsync_ptsz", [&](int attempt, size_t& size) {
    CUdeviceptr p = 0;
    size = 5 * MiB;
    CUresult rc = async_ptsz(&p, size, stream);
    keep(attempt, p, kept[4]);
    return rc;
  });
  twice("cuMemAllocFromPoolAsync", [&](int attempt, size_t& size) {
    CUdeviceptr p = 0;
    size = 6 * MiB;
    CUresult rc = from_pool(&p, size, pool, stream);
    keep(attempt, p, kept[5]);
    return rc;
  });
  twice("cuMemAllocFromPoolAsync_ptsz", [&](int attempt, size_t& size) {
    CUdeviceptr p = 0;
    size = 7 * MiB;
    CUresult rc = from_pool_ptsz(&p, size, pool, stream);
    keep(attempt, p, kept[6]);
    return rc;
  });
  twice("cuMemCreate", [&](int attempt, size_t& size) {
    CUmemGenericAllocationHandle h = 0;
    size = 8 * MiB;
    CUresult rc = create(&h, size, &prop, 0);
    if (attempt == 1) handle = h;
    return rc;
  });
  // Pinned host memory (Note [Host memory]): the tests' plan has a host rule `every: 2` of its own, so each
  // host entry fails on its second call too, and host calls never move the device rule's count.
  CUmemAllocationProp host = prop;
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle host_handle = 0;
  void* pinned[2] = {};
  static char registered[2][MiB];
  twice("cuMemCreate(host)", [&](int attempt, size_t& size) {
    CUmemGenericAllocationHandle h = 0;
    size = 2 * MiB;
    CUresult rc = create(&h, size, &host, 0);
    if (attempt == 1) host_handle = h;
    return rc;
  });
  twice("cuMemHostAlloc", [&](int attempt, size_t& size) {
    void* p = nullptr;
    size = 1 * MiB;
    CUresult rc = host_alloc(&p, size, 0);
    if (attempt == 1) pinned[0] = p;
    return rc;
  });
  twice("cuMemAllocHost_v2", [&](int attempt, size_t& size) {
    void* p = nullptr;
    size = 2 * MiB;
    CUresult rc = alloc_host(&p, size);
    if (attempt == 1) pinned[1] = p;
    return rc;
  });
  twice("cuMemHostRegister_v2", [&](int attempt, size_t& size) {
    size = MiB;
    return host_register(registered[attempt - 1], size, 0);
  });
  size_t free_bytes = 0, total_bytes = 0;
  check(get_info(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
  std::printf("info held free=%zu total=%zu\n", free_bytes, total_bytes);
  std::printf("free cuMemFree_v2 rc=%d\n", static_cast<int>(free_sync(kept[0])));
  std::printf("free cuMemFree_v2 rc=%d\n", static_cast<int>(free_sync(kept[1])));
  std::printf("free cuMemFree_v2 rc=%d\n", static_cast<int>(free_sync(kept[2])));
  std::printf("free cuMemFreeAsync rc=%d\n", static_cast<int>(free_async(kept[3], stream)));
  std::printf("free cuMemFreeAsync_ptsz rc=%d\n", static_cast<int>(free_async_ptsz(kept[4], stream)));
  std::printf("free cuMemFreeAsync rc=%d\n", static_cast<int>(free_async(kept[5], stream)));
  std::printf("free cuMemFreeAsync_ptsz rc=%d\n", static_cast<int>(free_async_ptsz(kept[6], stream)));
  std::printf("free cuMemRelease rc=%d\n", static_cast<int>(release(handle)));
  std::printf("free cuMemRelease rc=%d\n", static_cast<int>(release(host_handle)));
  std::printf("free cuMemFreeHost rc=%d\n", static_cast<int>(free_host(pinned[0])));
  std::printf("free cuMemFreeHost rc=%d\n", static_cast<int>(free_host(pinned[1])));
  std::printf("free cuMemHostUnregister rc=%d\n", static_cast<int>(host_unregister(registered[0])));
  // Freeing what was never pinned is the driver's error, passed through.
  std::printf("bad cuMemFreeHost rc=%d\n", static_cast<int>(free_host(registered[1])));
  check(get_info(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
  std::printf("info free=%zu total=%zu\n", free_bytes, total_bytes);
  size_t total = 0;
  check(total_mem(&total, 0), "cuDeviceTotalMem_v2");
  std::printf("total_mem %zu\n", total);
  return 0;
}

int info(const std::string& path) {
  init_device();
  auto get_info = get<decltype(&cuMemGetInfo_v2)>(path, "cuMemGetInfo_v2");
  auto alloc = get<decltype(&cuMemAlloc_v2)>(path, "cuMemAlloc_v2");
  size_t free_bytes = 0, total_bytes = 0, total = 0;
  check(get_info(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
  std::printf("before free=%zu total=%zu\n", free_bytes, total_bytes);
  CUdeviceptr p = 0;
  std::printf("alloc rc=%d\n", static_cast<int>(alloc(&p, 4 * MiB)));
  check(get_info(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
  std::printf("after free=%zu total=%zu\n", free_bytes, total_bytes);
  CUdeviceptr big = 0;
  std::printf("big rc=%d\n", static_cast<int>(alloc(&big, 48 * MiB)));
  if (path != "procaddr") {
    auto total_mem = get<decltype(&cuDeviceTotalMem_v2)>(path, "cuDeviceTotalMem_v2");
    check(total_mem(&total, 0), "cuDeviceTotalMem_v2");
    std::printf("total_mem %zu\n", total);
  }
  if (path == "dlsym" && libnvml()) {
    struct Mem { unsigned long long total, free, used; } m{};
    struct MemV2 { unsigned int version; unsigned long long total, reserved, free, used; } m2{};
    using Device = void*;
    auto get_handle = reinterpret_cast<int (*)(unsigned int, Device*)>(dlsym(libnvml(), "nvmlDeviceGetHandleByIndex_v2"));
    auto mem = reinterpret_cast<int (*)(Device, Mem*)>(dlsym(libnvml(), "nvmlDeviceGetMemoryInfo"));
    auto mem2 = reinterpret_cast<int (*)(Device, MemV2*)>(dlsym(libnvml(), "nvmlDeviceGetMemoryInfo_v2"));
    for (unsigned int i = 0; i < 2 && get_handle && mem && mem2; ++i) {
      Device d = nullptr;
      get_handle(i, &d);
      mem(d, &m);
      mem2(d, &m2);
      std::printf("nvml %u total=%llu free=%llu used=%llu v2total=%llu v2free=%llu v2used=%llu v2reserved=%llu\n", i,
                  m.total, m.free, m.used, m2.total, m2.free, m2.used, m2.reserved);
    }
  }
  return 0;
}

int threads(int count, int per_thread) {
  init_device();
  CUcontext ctx = nullptr;
  check(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < count; ++t) {
    pool.emplace_back([&] {
      cuCtxSetCurrent(ctx);
      for (int i = 0; i < per_thread; ++i) {
        CUdeviceptr p = 0;
        if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS) { failures++; continue; }
        if (i % 100 != 0 && cuMemFree_v2(p) != CUDA_SUCCESS) failures++;
      }
    });
  }
  for (auto& th : pool) th.join();
  std::printf("failures %d\n", failures.load());
  return failures.load() == 0 ? 0 : 1;
}

int child_alloc() {
  init_device();
  CUdeviceptr p = 0;
  CUresult rc = cuMemAlloc_v2(&p, 5 * MiB);
  const char* parent = std::getenv("OOMH_SHIM_PARENT");
  std::printf("child pid=%d rc=%d shim_parent=%s\n", static_cast<int>(getpid()), static_cast<int>(rc), parent ? parent : "-");
  return rc == CUDA_SUCCESS ? 0 : 1;
}

int do_fork() {
  init_device();
  CUdeviceptr p = 0;
  check(cuMemAlloc_v2(&p, 2 * MiB), "cuMemAlloc_v2 in the parent");
  pid_t child = fork();
  if (child == 0) {
    CUdeviceptr q = 0;
    CUresult rc = cuMemAlloc_v2(&q, 3 * MiB);
    std::printf("forked pid=%d rc=%d\n", static_cast<int>(getpid()), static_cast<int>(rc));
    std::fflush(stdout);
    std::exit(rc == CUDA_SUCCESS ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("parent pid=%d child=%d status=%d\n", static_cast<int>(getpid()), static_cast<int>(child), status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int do_exec() {
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    execl("/proc/self/exe", "cuda_client", "child-alloc", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("parent pid=%d child=%d status=%d\n", static_cast<int>(getpid()), static_cast<int>(child), status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int passthrough() {
  init_device();
  CUdeviceptr p = 0;
  check(cuMemAlloc_v2(&p, MiB), "cuMemAlloc_v2");
  check(cuMemFree_v2(p), "cuMemFree_v2");
  std::string block = "/dev/shm/oomh-solo-" + std::to_string(getpid());
  struct stat st{};
  std::printf("control_env=%s\n", std::getenv("OOMH_CONTROL") ? "set" : "unset");
  std::printf("shim_parent_env=%s\n", std::getenv("OOMH_SHIM_PARENT") ? "set" : "unset");
  std::printf("block=%s\n", stat(block.c_str(), &st) == 0 ? "exists" : "absent");
  // Real pointers, unwrapped, from dlsym and cuGetProcAddress.
  std::printf("dlsym=%s\n", owner(dlsym(libcuda(), "cuMemAlloc_v2")));
  std::printf("procaddr=%s\n", owner(through_procaddr("cuMemAlloc", 13000, false)));
  return 0;
}

int solo() {
  init_device();
  CUdeviceptr p = 0;
  CUresult rc = cuMemAlloc_v2(&p, MiB);
  const char* name = std::getenv("OOMH_CONTROL");
  std::string expected = "/oomh-solo-" + std::to_string(getpid());
  struct stat st{};
  std::printf("rc=%d control=%s expected=%s block=%s\n", static_cast<int>(rc), name ? name : "-", expected.c_str(),
              stat(("/dev/shm" + expected).c_str(), &st) == 0 ? "exists" : "absent");
  return 0;
}

// A pitched allocation whose padded rows pass the cap (1 x 262144 bytes: 128 MiB once each row is padded
// to 512), then one that fits; prints each result and the pitch.
int pitch() {
  init_device();
  CUdeviceptr big = 0, small = 0;
  size_t big_pitch = 0, small_pitch = 0;
  CUresult big_rc = cuMemAllocPitch_v2(&big, &big_pitch, 1, 262144, 4);
  CUresult small_rc = cuMemAllocPitch_v2(&small, &small_pitch, 100, 10, 4);
  std::printf("big rc=%d pitch=%zu ptr=%llu\nsmall rc=%d pitch=%zu\n", static_cast<int>(big_rc), big_pitch,
              static_cast<unsigned long long>(big), static_cast<int>(small_rc), small_pitch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  std::string path = argc > 2 ? argv[2] : "export";
  if (mode == "table") return table(path);
  if (mode == "reach") return reach(path);
  if (mode == "info") return info(path);
  if (mode == "threads" && argc > 3) return threads(std::atoi(argv[2]), std::atoi(argv[3]));
  if (mode == "fork") return do_fork();
  if (mode == "exec") return do_exec();
  if (mode == "child-alloc") return child_alloc();
  if (mode == "passthrough") return passthrough();
  if (mode == "solo") return solo();
  if (mode == "pitch") return pitch();
  std::fprintf(stderr, "usage: cuda_client table|reach|info PATH | threads T N | fork | exec | passthrough | solo\n");
  return 2;
}
