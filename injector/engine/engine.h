#pragma once
// The engine: everything the shim decides, as plain C++ that tests link without preloading (heaptrack's
// habit: the preload file only forwards). One Engine per process, created when the shim is active.
//
// An allocation goes through begin_alloc (count it, check the rules, reserve against the cap) → the real
// driver call → end_alloc (record the pointer, or undo the reservation when the driver failed). A free goes
// through begin_free (take the pointer out of the ledger) → the real call → end_free (give the bytes back,
// or put the record back when the driver refused).
//
// Note [Fork safety]
// fork() copies one thread. A lock that another thread held at that moment would stay held in the child for
// ever, so the preload registers pthread_atfork handlers that take every lock the engine has (the plan lock,
// the current plan's rule locks, the ledger's shard locks, in that order) before fork and release them in
// both parent and child. The child then starts over: an empty ledger (its parent's pointers are not its
// own), fresh rule counters, its own process slot flagged kProcessForked, and a shim_start event.
//
// Note [Plan changes at run time]
// The runner may publish a new plan in the control block. Each allocation reads plan_generation with one
// relaxed load; when it moved, the call tries the plan lock and, only if it gets it, copies the plan with
// the seqlock reader, parses it and swaps in a new rule book. A call never waits for that: it uses whichever
// plan is installed. Replaced plans are never freed while the process runs (a thread may still read one;
// one small object per change), only by ~Engine, which runs in tests alone.
//
// Note [Counters on the hot path]
// An uncontended atomic read-modify-write costs about 5 ns on the machines we measure (bench/RESULTS.md),
// as much as a few dozen other instructions, so each number the engine keeps is kept once, with the fewest:
//  - the bytes the process holds per device: its ProcessSlot::held in the control block, where an exec'd
//    successor (and whoever gives back a dead process's bytes) finds them; the ledger does not count
//    bytes. The process's peak is raised from the value that add returned, once the driver gave the
//    memory (a reservation it refused never was memory the process held; the job's peak, Note [Caps
//    across processes], does count reservations).
//  - its allocation calls per device: alloc_calls_, one add per call, whose result is the running number
//    `call` of an inject event (a number no other call of the process gets).
//  - its free calls per device: counted by the ledger under the shard lock the free takes anyway, with a
//    plain add (Ledger::taken).
//  - the bytes it freed: only while the plan has an `until_freed` rule, the one thing that reads them.
//  - the job's DeviceCounters (alloc_calls, held, free_calls): shared by every process, one add each.
// An allocation with no rule matching therefore does five: the job's alloc_calls and held (a
// compare-and-swap under a cap), the process's call count and held, and the ledger shard's lock; a free
// four: the shard lock, the job's free_calls and held, the process's held. A peak takes a
// compare-and-swap only when it rises.
//
// Nothing here throws or writes per successful call; events are written for injections (the first 10000 per
// process, the rest only counted), cap changes, plan changes, start and exit.

#include "caps.h"
#include "fault_plan.h"
#include "ledger.h"
#include "options.h"
#include "rule_book.h"
#include "spin_lock.h"

#include <oomharness/control_block.h>
#include <oomharness/events.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <optional>
#include <vector>

namespace oomh::inject {

struct EngineSetup {
  ControlBlock* block = nullptr;        // required: the runner's, or one the shim created
  int events_fd = -1;                   // OOMH_EVENTS, opened O_APPEND; -1: no events
  std::optional<FaultPlan> plan;        // rules and plan caps; empty: none
  std::vector<CapEntry> option_caps;    // OOMH_CAP, applied before the plan's caps
  int rank = 0;                         // RANK (0 when unset)
  int local_rank = 0;                   // LOCAL_RANK (0 when unset)
  uint32_t process_flags = 0;           // kProcessExecd for a process that inherited the shim through exec
  int parent_pid = 0;
  LogLevel log = LogLevel::warn;
  int log_fd = 2;
};

struct AllocDecision {
  bool fail = false;     // answer CUDA_ERROR_OUT_OF_MEMORY without calling the driver
  bool tracked = false;  // false: the engine takes no part (device out of range, or after exit)
  int device = 0;
  uint64_t reserved = 0;
  uint64_t process_held = 0;  // the process's bytes on the device once this call's were added
};

class Engine {
 public:
  static constexpr uint64_t kInjectEventLimit = 10000;

  explicit Engine(EngineSetup setup);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  AllocDecision begin_alloc(Entry entry, const char* symbol, int device, uint64_t size) noexcept;
  void end_alloc(const AllocDecision& d, bool succeeded, Space space, uint64_t key, uint64_t actual_size) noexcept;

  std::optional<Allocation> begin_free(Space space, uint64_t key) noexcept;
  void end_free(Space space, uint64_t key, const std::optional<Allocation>& taken, bool succeeded) noexcept;

  // Memory queries: the physical figures in, the capped ones out.
  // `from_driver` false: the figures are NVML's (its total differs from the driver's; not recorded).
  MemInfo mem_info(int device, uint64_t real_free, uint64_t real_total, bool from_driver = true) noexcept;
  uint64_t total_mem(int device, uint64_t real_total) noexcept;
  // The preload asks the driver for a device's total once per process and reports it here.
  bool needs_physical_total(int device) const noexcept;
  void note_physical_total(int device, uint64_t bytes) noexcept;

  // Checks the control block for a new plan (called by begin_alloc and the memory queries).
  void poll_plan() noexcept;

  // Writes shim_exit per device used and gives this process's bytes back to the job. Later calls forward.
  void finish() noexcept;

  void prepare_fork() noexcept;
  void after_fork_parent() noexcept;
  void after_fork_child() noexcept;

  void warn(const char* format, ...) noexcept __attribute__((format(printf, 2, 3)));
  void log(LogLevel level, const char* format, ...) noexcept __attribute__((format(printf, 3, 4)));
  // A `warning` event plus a stderr line at warn level.
  void report_warning(const char* message) noexcept;

  ControlBlock* block() const { return cb_; }
  ProcessSlot* slot() const { return slot_; }
  Ledger& ledger() { return ledger_; }
  // This process's bytes held on a device now (its slot's share of the job's), and their peak.
  uint64_t held(int device) const noexcept;
  uint64_t peak(int device) const noexcept;
  size_t rule_count() const noexcept;
  uint64_t events_dropped() const { return dropped_events_.load(std::memory_order_relaxed); }

 private:
  struct Plan {
    FaultPlan source;
    RuleBook rules;
    CapSchedule caps;
    Plan* retired_next = nullptr;
  };

  Plan* make_plan(FaultPlan source) noexcept;
  void install(Plan* plan, const char* reason) noexcept;
  void apply_cap(Plan& plan, int device, int64_t step, const char* reason) noexcept;
  void set_cap(int device, uint64_t limit, const char* reason) noexcept;
  void register_process(uint32_t flags, int parent_pid) noexcept;
  void note_device(int device) noexcept;
  uint64_t hold(int device, uint64_t bytes) noexcept;  // returns the process's bytes held now
  void unhold(int device, uint64_t bytes) noexcept;
  void count_freed(uint64_t bytes) noexcept;
  void report_inject(const char* symbol, uint64_t size, int device, const char* rule, const char* reason,
                     int64_t step, Phase phase, uint64_t call) noexcept;
  void write_start_event() noexcept;
  void emit(events::EventLine& line) noexcept;
  double process_elapsed() const noexcept;
  double job_elapsed() const noexcept;
  void vlog(LogLevel level, const char* format, va_list args) noexcept __attribute__((format(printf, 3, 0)));

  ControlBlock* cb_;
  ProcessSlot* slot_ = nullptr;
  ProcessSlot local_slot_{};  // when every slot of the block is taken
  int events_fd_;
  LogLevel log_level_;
  int log_fd_;
  int rank_, local_rank_;
  std::vector<CapEntry> option_caps_;

  std::atomic<Plan*> plan_{nullptr};
  Plan* retired_ = nullptr;
  SpinLock plan_lock_;
  std::atomic<uint32_t> seen_generation_{0};

  Ledger ledger_;  // also counts this process's free calls (Ledger::taken)
  std::atomic<uint64_t> alloc_calls_[kMaxDevices]{};
  std::atomic<uint64_t> failures_[kMaxDevices]{};
  std::atomic<uint64_t> peak_[kMaxDevices]{};  // highest slot_->held[d] once the driver gave the bytes
  std::atomic<uint64_t> freed_{0};  // bytes freed, counted only while a rule needs it (until_freed)
  std::atomic<uint32_t> used_devices_{0};
  std::atomic<uint32_t> physical_known_{0};
  std::atomic<uint64_t> inject_events_{0};
  std::atomic<uint64_t> dropped_events_{0};
  std::atomic<bool> finished_{false};
  uint64_t process_start_ns_;  // CLOCK_MONOTONIC
  char plan_buffer_[kPlanCapacity];
};

}  // namespace oomh::inject
