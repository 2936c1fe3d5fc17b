// A stand-in for libnvidia-ml.so.1 with the four functions the shim's NVML hooks meet: two devices of 80 GiB
// with 70 GiB free, 1 GiB reserved; a device handle is its index + 1. Only the preload tests load it.
#include <cstdint>

namespace {
constexpr unsigned long long kGiB = 1ull << 30;
struct Memory { unsigned long long total, free, used; };
struct MemoryV2 { unsigned int version; unsigned long long total, reserved, free, used; };
}  // namespace

extern "C" {
int nvmlInit_v2() { return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index > 1) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = reinterpret_cast<void*>(static_cast<uintptr_t>(index + 1));
  return 0;
}
int nvmlDeviceGetIndex(void* device, unsigned int* index) {
  *index = static_cast<unsigned int>(reinterpret_cast<uintptr_t>(device) - 1);
  return 0;
}
int nvmlDeviceGetMemoryInfo(void*, Memory* m) {
  *m = Memory{80 * kGiB, 70 * kGiB, 10 * kGiB};
  return 0;
}
int nvmlDeviceGetMemoryInfo_v2(void*, MemoryV2* m) {
  *m = MemoryV2{m->version, 80 * kGiB, kGiB, 70 * kGiB, 9 * kGiB};
  return 0;
}
}
