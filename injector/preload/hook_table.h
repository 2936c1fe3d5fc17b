#pragma once
// Note [Hook table]
// Every entry point the shim intercepts, declared once. The preload (hooks.cpp) pairs each entry with its
// replacement by index (a static_assert keeps the two in step); the sync test (tests/injector) walks the
// same table and checks that each CUDA entry is reached through the exported symbol, dlsym and
// cuGetProcAddress_v2 alike (Project-HAMi's consistency check), and each NVML entry through dlsym.
//
// `base` and `since` describe what cuGetProcAddress hands out: asked for `base` with a cudaVersion of at least
// `since`, the driver returns this variant (the highest `since` that fits wins); `ptsz` marks the
// per-thread-default-stream variant, chosen by CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. A `required`
// entry exists in every driver the shim supports (CUDA 12 and newer); a missing optional one is skipped.

#include <cstdint>
#include <string_view>

namespace oomh::inject {

enum class HookLibrary : uint8_t { cuda, nvml };
// What the call does, for the tests: allocate, free or query.
enum class HookRole : uint8_t { resolver, alloc, free, query };

struct HookSpec {
  const char* name;  // the exported symbol
  const char* base;  // the name cuGetProcAddress is asked for ("" for NVML)
  int since;         // cudaVersion from which `base` means this variant
  bool ptsz;
  HookLibrary library;
  HookRole role;
  bool required;
};

inline constexpr HookSpec kHookTable[] = {
    {"cuGetProcAddress", "cuGetProcAddress", 0, false, HookLibrary::cuda, HookRole::resolver, true},
    {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, false, HookLibrary::cuda, HookRole::resolver, true},
    {"cuMemAlloc_v2", "cuMemAlloc", 3020, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemAllocManaged", "cuMemAllocManaged", 0, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemAllocAsync", "cuMemAllocAsync", 0, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemAllocAsync_ptsz", "cuMemAllocAsync", 0, true, HookLibrary::cuda, HookRole::alloc, false},
    {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 0, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync", 0, true, HookLibrary::cuda, HookRole::alloc, false},
    {"cuMemCreate", "cuMemCreate", 0, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemFree_v2", "cuMemFree", 3020, false, HookLibrary::cuda, HookRole::free, true},
    {"cuMemFreeAsync", "cuMemFreeAsync", 0, false, HookLibrary::cuda, HookRole::free, true},
    {"cuMemFreeAsync_ptsz", "cuMemFreeAsync", 0, true, HookLibrary::cuda, HookRole::free, false},
    {"cuMemRelease", "cuMemRelease", 0, false, HookLibrary::cuda, HookRole::free, true},
    // Pinned host memory (Note [Host memory] in injector/engine/fault_plan.h).
    {"cuMemHostAlloc", "cuMemHostAlloc", 0, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemAllocHost_v2", "cuMemAllocHost", 3020, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemHostRegister_v2", "cuMemHostRegister", 6050, false, HookLibrary::cuda, HookRole::alloc, true},
    {"cuMemFreeHost", "cuMemFreeHost", 0, false, HookLibrary::cuda, HookRole::free, true},
    {"cuMemHostUnregister", "cuMemHostUnregister", 0, false, HookLibrary::cuda, HookRole::free, true},
    {"cuMemGetInfo_v2", "cuMemGetInfo", 3020, false, HookLibrary::cuda, HookRole::query, true},
    {"cuDeviceTotalMem_v2", "cuDeviceTotalMem", 3020, false, HookLibrary::cuda, HookRole::query, true},
    {"nvmlDeviceGetMemoryInfo", "", 0, false, HookLibrary::nvml, HookRole::query, false},
    {"nvmlDeviceGetMemoryInfo_v2", "", 0, false, HookLibrary::nvml, HookRole::query, false},
};
inline constexpr int kHookCount = static_cast<int>(sizeof(kHookTable) / sizeof(kHookTable[0]));

// Index of the entry named `name`, or -1.
constexpr int hook_index(std::string_view name) {
  for (int i = 0; i < kHookCount; ++i)
    if (name == kHookTable[i].name) return i;
  return -1;
}

// What cuGetProcAddress(base, cudaVersion, flags) means, by name: the entry's index, or -1 when the shim does
// not intercept it (another function, or an old variant such as the 32-bit cuMemAlloc below CUDA 3.2).
constexpr int hook_for_proc_address(std::string_view base, int cuda_version, bool per_thread_stream) {
  int best = -1;
  bool has_ptsz = false;
  for (int i = 0; i < kHookCount; ++i)
    if (kHookTable[i].library == HookLibrary::cuda && base == kHookTable[i].base && kHookTable[i].ptsz) has_ptsz = true;
  for (int i = 0; i < kHookCount; ++i) {
    const HookSpec& h = kHookTable[i];
    if (h.library != HookLibrary::cuda || base != h.base || cuda_version < h.since) continue;
    if (has_ptsz && h.ptsz != per_thread_stream) continue;
    if (best < 0 || h.since > kHookTable[best].since) best = i;
  }
  return best;
}

static_assert(hook_for_proc_address("cuMemAlloc", 13000, false) == hook_index("cuMemAlloc_v2"));
static_assert(hook_for_proc_address("cuMemAlloc", 2000, false) == -1);
static_assert(hook_for_proc_address("cuMemAllocAsync", 13000, true) == hook_index("cuMemAllocAsync_ptsz"));
static_assert(hook_for_proc_address("cuMemFree", 13000, true) == hook_index("cuMemFree_v2"));
static_assert(hook_for_proc_address("cuGetProcAddress", 13000, false) == hook_index("cuGetProcAddress_v2"));
static_assert(hook_for_proc_address("cuGetProcAddress", 11080, false) == hook_index("cuGetProcAddress"));
static_assert(hook_for_proc_address("cuMemHostRegister", 13000, false) == hook_index("cuMemHostRegister_v2"));
static_assert(hook_for_proc_address("cuMemHostRegister", 4000, false) == -1);

}  // namespace oomh::inject
