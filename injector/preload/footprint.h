#pragma once
// The footprint probe (Note [Counting the footprint] in engine/engine.h): the device memory this process
// holds on a CUDA device, as NVML counts it for its pid, less what the device's current memory pool keeps
// for reuse (the job's next stream-ordered allocations take that without the driver asking for more).
// NVML is loaded on first use, never at start-up, and only when a cap counts the footprint.

#include <cstdint>

namespace oomh::inject {

// False when NVML is missing, does not know the device, or does not list this pid.
bool measure_footprint(int cuda_device, uint64_t* bytes) noexcept;

// Fork safety (Note [Fork safety] in engine/engine.h), from the preload's pthread_atfork handlers: the
// probe's lock is taken before fork and released after; a child starts over (it is another pid to NVML).
void footprint_prepare_fork() noexcept;
void footprint_after_fork_parent() noexcept;
void footprint_after_fork_child() noexcept;

}  // namespace oomh::inject
