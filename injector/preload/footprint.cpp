// The footprint probe: footprint.h.

#include <oomharness/process_ids.h>
#include "footprint.h"

#include "real_driver.h"
#include "../engine/spin_lock.h"

#include <oomharness/control_block.h>

#include <cuda.h>

#include <cstdlib>

#include <dlfcn.h>
#include <unistd.h>

namespace oomh::inject {
namespace {

// NVML, declared here: the shim needs only these functions and one stable struct (nvmlProcessInfo_t, v3).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
constexpr nvmlReturn_t kNvmlSuccess = 0, kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;

struct Nvml {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned int*, NvmlProcessInfo*) = nullptr;
  CUresult (*bus_id)(char*, int, CUdevice) = nullptr;
  CUresult (*device_pool)(CUmemoryPool*, CUdevice) = nullptr;
  CUresult (*pool_attribute)(CUmemoryPool, CUmemPool_attribute, void*) = nullptr;
  nvmlDevice_t devices[kMaxDevices] = {};
  bool device_tried[kMaxDevices] = {};
  bool tried = false, ok = false;

  void devices_reset() {  // the functions stay; which device is which is asked again
    for (int d = 0; d < kMaxDevices; ++d) {
      devices[d] = nullptr;
      device_tried[d] = false;
    }
  }
};

Nvml g_nvml;
SpinLock g_lock;  // guards g_nvml; held around one NVML query at a time (the engine rate-limits them)

template <typename Fn>
void find(void* lib, const char* name, Fn& out) {
  out = lib ? reinterpret_cast<Fn>(real_dlsym()(lib, name)) : nullptr;
}

bool start(Nvml& n) {
  if (n.tried) return n.ok;
  n.tried = true;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  find(lib, "nvmlInit_v2", n.init);
  find(lib, "nvmlDeviceGetHandleByPciBusId_v2", n.by_bus_id);
  find(lib, "nvmlDeviceGetComputeRunningProcesses_v3", n.processes);
  void* cuda = libcuda();
  find(cuda, "cuDeviceGetPCIBusId", n.bus_id);
  find(cuda, "cuDeviceGetMemPool", n.device_pool);
  find(cuda, "cuMemPoolGetAttribute", n.pool_attribute);
  n.ok = n.init && n.by_bus_id && n.processes && n.bus_id && n.init() == kNvmlSuccess;
  return n.ok;
}

nvmlDevice_t nvml_device(Nvml& n, int cuda_device) {
  if (!n.device_tried[cuda_device]) {
    n.device_tried[cuda_device] = true;
    char bus_id[32] = {};
    if (n.bus_id(bus_id, sizeof bus_id, cuda_device) == CUDA_SUCCESS) n.by_bus_id(bus_id, &n.devices[cuda_device]);
  }
  return n.devices[cuda_device];
}

// This process's pid as NVML names it (Note [Pids the runner can see] in include/oomharness/process_ids.h),
// read once per process under g_lock; 0: not yet.
int32_t g_own_pid = 0;
int32_t own_pid() noexcept {
  if (g_own_pid == 0) g_own_pid = process_ids().pid;
  return g_own_pid;
}

// NVML's figure for this pid on the device.
bool process_memory(Nvml& n, nvmlDevice_t device, uint64_t* bytes) {
  NvmlProcessInfo local[64];
  NvmlProcessInfo* infos = local;
  unsigned int count = 64;
  nvmlReturn_t rc = n.processes(device, &count, infos);
  if (rc == kNvmlInsufficientSize) {  // a crowded GPU: ask again with room for all (and a few more)
    count += 16;
    infos = static_cast<NvmlProcessInfo*>(std::malloc(count * sizeof(NvmlProcessInfo)));
    rc = infos ? n.processes(device, &count, infos) : rc;
  }
  bool found = false;
  unsigned int pid = static_cast<unsigned int>(own_pid());  // NVML names processes as /proc does
  for (unsigned int i = 0; rc == kNvmlSuccess && i < count && !found; ++i) {
    if (infos[i].pid != pid || infos[i].usedGpuMemory == kNvmlValueNotAvailable) continue;
    *bytes = infos[i].usedGpuMemory;
    found = true;
  }
  if (infos != local) std::free(infos);
  return found;
}

// What the device's current pool keeps for reuse: reserved but not in use. 0 when the driver cannot say.
uint64_t pool_spare(Nvml& n, int cuda_device) {
  CUmemoryPool pool = nullptr;
  if (!n.device_pool || !n.pool_attribute || n.device_pool(&pool, cuda_device) != CUDA_SUCCESS) return 0;
  cuuint64_t reserved = 0, used = 0;
  if (n.pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
      n.pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
    return 0;
  return reserved > used ? reserved - used : 0;
}

}  // namespace

bool measure_footprint(int cuda_device, uint64_t* bytes) noexcept {
  if (cuda_device < 0 || cuda_device >= kMaxDevices || !bytes) return false;
  SpinGuard guard(g_lock);
  if (!start(g_nvml)) return false;
  nvmlDevice_t device = nvml_device(g_nvml, cuda_device);
  uint64_t held = 0;
  if (!device || !process_memory(g_nvml, device, &held)) return false;
  uint64_t spare = pool_spare(g_nvml, cuda_device);
  *bytes = held > spare ? held - spare : 0;
  return true;
}

void footprint_prepare_fork() noexcept { g_lock.lock(); }
void footprint_after_fork_parent() noexcept { g_lock.unlock(); }
void footprint_after_fork_child() noexcept {
  g_nvml.devices_reset();
  g_own_pid = 0;
  g_lock.unlock();
}

}  // namespace oomh::inject
