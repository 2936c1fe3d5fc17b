#pragma once
// Caps: a virtual limit on the bytes the whole job holds on a device (docs/fault-plan.md, "Caps").
//
// Note [Caps across processes]
// The limit that applies now is computed by every process from the same plan, and written to the control
// block's DeviceCounters::cap for the runner to sample (each process decides by its own copy: Note [A plan
// only the runner writes] in engine.h), and the bytes are reserved on the block's shared `held` before
// the real allocation: a compare-and-swap loop that never lets `held` pass `cap`, undone when the driver
// then fails. Two processes near the cap therefore never both get through, and never fail spuriously.
// A cap only counts what the shim saw being allocated; memory the job held before the shim was loaded, the
// CUDA context itself, and other jobs on the GPU are the driver's business (it still fails for real).
//
// A schedule entry with `at` latches in each process once reached (a step going back after a resume does
// not lift a cap that already applied). `at.after` counts from the control block's creation (the job's
// start), so every process agrees on when a time-triggered cap applies.

#include "fault_plan.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace oomh::inject {

struct MemInfo {
  uint64_t free = 0;
  uint64_t total = 0;
};

// What cuMemGetInfo answers under a cap: total = min(cap, physical total); free = min(physical free,
// cap - held by the job); never above the physical figures. cap == 0: the physical figures.
MemInfo capped_mem_info(uint64_t real_free, uint64_t real_total, uint64_t cap, uint64_t job_held) noexcept;

// Reserves `size` bytes on the job's shared counters unless that would pass the cap. Returns false (and
// changes nothing) when it would. `held_after` gets the job's held bytes with this reservation in: the
// peak is raised from it once the driver gave the memory (a reservation it refused never was held).
// `cap` is the limit the calling process enforces (0: none), never the block's: Note [A plan only the runner
// writes] in engine.h.
bool reserve_bytes(DeviceCounters& device, uint64_t size, uint64_t cap, uint64_t* held_after = nullptr) noexcept;
// Gives back bytes that reserve_bytes (or a record) added.
void release_bytes(DeviceCounters& device, uint64_t size) noexcept;

class CapSchedule {
 public:
  CapSchedule() = default;
  explicit CapSchedule(std::vector<CapEntry> entries);

  bool empty() const { return entries_.empty(); }
  // True when some entry applies later (at a step or a time): the engine then re-checks on each call.
  bool changes() const { return changes_; }
  bool needs_time() const { return needs_time_; }
  // True when some entry names this device (or every device).
  bool covers(int device) const noexcept;

  // The limit for `device` at this step and job time: the last entry (in order) for the device or for every
  // device that applies, 0 when none. `why` is "start", "step" or "time": how the winning entry applied.
  uint64_t limit_for(int device, int64_t step, double job_elapsed_s, const char** why) noexcept;
  // The same for the process's pinned host memory (`memory: host` entries, Note [Host memory]).
  uint64_t host_limit(int64_t step, double job_elapsed_s) noexcept;
  bool has_host() const { return has_host_; }

 private:
  std::vector<CapEntry> entries_;
  std::unique_ptr<std::atomic<bool>[]> reached_;
  bool changes_ = false;
  bool needs_time_ = false;
  bool has_host_ = false;

  uint64_t limit_of(MemoryKind memory, int device, int64_t step, double job_elapsed_s, const char** why) noexcept;
};

}  // namespace oomh::inject
