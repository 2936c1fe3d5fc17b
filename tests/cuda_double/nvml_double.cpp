// A stand-in for libnvidia-ml.so.1 with the functions the shim meets: its NVML memory hooks (two devices of
// 80 GiB with 70 GiB free, 1 GiB reserved; a device handle is its index + 1), and what its footprint probe
// asks (Note [Counting the footprint] in injector/engine/engine.h): the device behind a PCI bus id as the
// CUDA double names them ("0000:01:00.0" is device 0), and the compute processes on a device, which is this
// process alone, holding what the CUDA double says it holds there (oomh_cuda_double_used). The preload
// tests, the runner's footprint test and jobs on the virtual CUDA device load it.
//
// NVML_DOUBLE_PID_OFFSET=N reports the process under its pid + N, as NVML does in a container with its own
// pid namespace (the pid NVML knows is the host's): the shim then cannot find itself.
#include <cstdint>
#include "oomharness/process_ids.h"
#include <cstdio>
#include <cstdlib>

#include <dlfcn.h>
#include <unistd.h>

namespace {
constexpr unsigned long long kGiB = 1ull << 30;
constexpr int kSuccess = 0, kInvalidArgument = 2, kNotFound = 6, kInsufficientSize = 7;
struct Memory { unsigned long long total, free, used; };
struct MemoryV2 { unsigned int version; unsigned long long total, reserved, free, used; };
struct ProcessInfo { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; };

int index_of(void* device) { return static_cast<int>(reinterpret_cast<uintptr_t>(device)) - 1; }
}  // namespace

extern "C" {
int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index > 1) return kInvalidArgument;
  *device = reinterpret_cast<void*>(static_cast<uintptr_t>(index + 1));
  return kSuccess;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  if (!bus_id || !device || std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4) return kInvalidArgument;
  if (bus < 1 || bus > 2) return kNotFound;
  *device = reinterpret_cast<void*>(static_cast<uintptr_t>(bus));
  return kSuccess;
}
int nvmlDeviceGetIndex(void* device, unsigned int* index) {
  *index = static_cast<unsigned int>(index_of(device));
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void*, Memory* m) {
  *m = Memory{80 * kGiB, 70 * kGiB, 10 * kGiB};
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo_v2(void*, MemoryV2* m) {
  *m = MemoryV2{m->version, 80 * kGiB, kGiB, 70 * kGiB, 9 * kGiB};
  return kSuccess;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, ProcessInfo* infos) {
  if (!count || index_of(device) < 0 || index_of(device) > 1) return kInvalidArgument;
  auto used = reinterpret_cast<unsigned long long (*)(int)>(dlsym(RTLD_DEFAULT, "oomh_cuda_double_used"));
  unsigned long long bytes = used ? used(index_of(device)) : 0;
  if (bytes == 0) {  // no context there: NVML does not list the process
    *count = 0;
    return kSuccess;
  }
  if (*count < 1 || !infos) {
    *count = 1;
    return kInsufficientSize;
  }
  const char* offset = std::getenv("NVML_DOUBLE_PID_OFFSET");
  // As the driver does, by the pid /proc names the process by (Note [Pids the runner can see]).
  const int32_t pid = oomh::process_ids().pid;
  infos[0] = ProcessInfo{static_cast<unsigned int>(pid + (offset ? std::atoi(offset) : 0)), bytes, 0xFFFFFFFFu, 0xFFFFFFFFu};
  *count = 1;
  return kSuccess;
}
}
