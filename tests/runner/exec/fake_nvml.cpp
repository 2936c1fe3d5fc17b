// A stand-in for libnvidia-ml.so.1 (Note [Processes outside the shim] in runner/src/exec/escapes.h): one GPU,
// whose compute processes are the lines of the file named by FAKE_NVML_PIDS ("PID [BYTES]" each), read at
// every call. The tests make a job's process appear on the GPU by writing its pid there. FAKE_NVML_DEVICES
// sets how many GPUs (default 1; 0: nvmlInit fails as on a machine without a driver).
#include <cstdio>
#include <cstdlib>

extern "C" {

struct ProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

namespace {
int devices() {
  const char* n = getenv("FAKE_NVML_DEVICES");
  return n && *n ? atoi(n) : 1;
}
}  // namespace

int nvmlInit_v2() { return devices() > 0 ? 0 : 9; /* NVML_ERROR_DRIVER_NOT_LOADED */ }
int nvmlShutdown() { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = static_cast<unsigned>(devices());
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  *device = reinterpret_cast<void*>(static_cast<unsigned long>(index + 1));
  return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, ProcessInfo* infos) {
  const char* path = getenv("FAKE_NVML_PIDS");
  unsigned int n = 0, room = *count;
  FILE* f = path ? fopen(path, "r") : nullptr;
  if (reinterpret_cast<unsigned long>(device) == 1 && f) {
    unsigned int pid;
    unsigned long long bytes;
    char line[128];
    while (fgets(line, sizeof line, f)) {
      int got = sscanf(line, "%u %llu", &pid, &bytes);
      if (got < 1) continue;
      if (n < room) {
        infos[n].pid = pid;
        infos[n].usedGpuMemory = got == 2 ? bytes : 0;
        infos[n].gpuInstanceId = infos[n].computeInstanceId = 0xFFFFFFFFu;
      }
      ++n;
    }
  }
  if (f) fclose(f);
  *count = n;
  return n > room ? 7 /* NVML_ERROR_INSUFFICIENT_SIZE */ : 0;
}
}  // extern "C"
