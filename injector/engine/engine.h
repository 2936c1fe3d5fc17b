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
// Note [A plan only the runner writes]
// The control block is mapped writable in every process of the job (the shim and the probes write their
// counters there), so the job's own code can write into it too: a job once wrote a plan with no caps into
// plan_text, bumped plan_generation, and passed "under 64 MiB" (issue 44). Only the runner may change a
// running job's plan, and the runner gives its plan in OOMH_PLAN and never writes one into a block (the
// plan-change path of Note [Plan changes at run time] serves a shim on its own, whose user publishes plans
// into the block that shim made: the GPU checks of tests/gpu/injector). So:
//  - in a runner's block (any name but kSoloBlockPrefix's) the shim installs no plan from the block: a
//    change of plan_generation is refused, counted in ControlBlock::tampered and written as a `tamper`
//    event ("plan"); the runner, which knows it wrote none, also reads plan_generation (its samples and the
//    attempt's end) and records a `tamper` event of its own, and either makes the job an error, never a
//    pass (Note [Green means tested] in runner/include/oomharness/runner/untested.h);
//  - the cap a shim enforces is its own: each process computes it from its plan (limit_) and decides
//    allocations and memory queries by that, so a job that writes DeviceCounters::cap changes nothing but
//    what the runner samples. Where the plan's caps never change, a shim that finds the block's cap unlike
//    its own puts its own back, counts it and writes a `tamper` event ("cap"); a cap schedule (at a step
//    or a time) lets two processes differ for a moment, so there the next call's check puts it back as an
//    ordinary cap_change.
// A job can still lower the shared `held` (the bytes every process books there) or wipe the counters: the
// block is shared memory the job maps, and no per-process secret would change that (the job's code runs in
// the shim's own address space). What it cannot do is give the shims another plan or another cap.
//
// Note [Counting the footprint]
// A cap counts, by default, the bytes the job allocates through the driver's allocation calls, which is
// what PyTorch's set_per_process_memory_fraction limits too. A real GPU of that size also holds what no
// allocation call shows: the CUDA context (measured for PyTorch 2.11 on an H100: 610 MiB once CUDA starts,
// 742 MiB after cuBLAS and a transformer step had loaded their kernels), module code loaded lazily, and
// what a stream-ordered pool keeps after a free. So under the same 8 GiB a job fits a larger batch under an
// allocations cap than beside a real reservation that leaves 8 GiB free (bench/RESULTS.md, "Fidelity").
// With `cap_counts: footprint` each process measures its own device footprint through the preload's probe
// (NVML's memory for this pid) and books what its ledger does not explain as held bytes, on the job's
// counters and its process slot like an allocation: the cap, the memory queries and the runner's samples
// then see what a GPU of that size would see. The overhead is never refused (it is already there), only
// counted.
// When: at most every kFootprintMaxAge per device and process, on an allocation or a memory query; and
// once more, at once, before an allocation is refused for the cap, so that a stale figure never fails a
// call (a pool block freed and then reused is counted once by NVML but, until the next measurement, also
// as overhead). Between measurements the figure may lag: memory the driver takes on its own after a
// measurement is counted up to kFootprintMaxAge late.
// The sum: footprint = allocations + overhead, where allocations are this process slot's held bytes minus
// the overhead already booked, read before and after the probe; the larger reading is used, so that an
// allocation or free in flight during the probe can only make the overhead smaller, never fail a call.
// When the probe cannot measure (no NVML, or NVML does not list this pid, as in a container with its own
// pid namespace), the shim says so once and the cap counts allocations only.
//
// Note [Counters on the hot path]
// An uncontended atomic read-modify-write costs about 5 ns on the machines we measure (bench/RESULTS.md),
// as much as a few dozen other instructions, so each number the engine keeps is kept once, with the fewest:
//  - the bytes the process holds per device: its ProcessSlot::held in the control block, where an exec'd
//    successor (and whoever gives back a dead process's bytes) finds them; the ledger does not count
//    bytes. The process's peak is raised from the value that add returned, and the job's peak from the
//    value its reservation returned, both once the driver gave the memory (a reservation it refused
//    never was memory the job held: beside a real reservation, a batch the GPU refused is not a peak).
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
// process, the rest only counted), cap changes, plan changes, the first footprint of each device, start and
// exit.

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

// Measures this process's device footprint in bytes (Note [Counting the footprint]); false when it cannot.
using FootprintProbe = bool (*)(int device, uint64_t* bytes) noexcept;

struct EngineSetup {
  ControlBlock* block = nullptr;        // required: the runner's, or one the shim created
  int events_fd = -1;                   // OOMH_EVENTS, opened O_APPEND; -1: no events
  std::optional<FaultPlan> plan;        // rules and plan caps; empty: none
  std::string plan_error;               // why OOMH_PLAN or OOMH_CAP was rejected; empty: accepted (Note [Armed record])
  // Note [A plan only the runner writes]: plans published in the block are installed only in a block a shim
  // made for itself; false in a runner's.
  bool plan_updates = true;
  std::vector<CapEntry> option_caps;    // OOMH_CAP, applied before the plan's caps
  CapCounting cap_counts = CapCounting::allocations;  // OOMH_CAP_COUNTS; a plan's cap_counts wins
  int64_t record_from = -1, record_to = -1;  // OOMH_RECORD_STEP: an alloc event per allocation call in these steps; -1: none
  FootprintProbe footprint_probe = nullptr;           // needed for CapCounting::footprint
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
  uint64_t job_held = 0;      // the job's, likewise: its peak is raised from this once the driver succeeded
};

class Engine {
 public:
  // Note [The site of a recorded call]
  // A caller that knows where in the user's code the next allocation comes from says so before making it:
  // the virtual device's caching-allocator model (python/oomharness/virtual_device/allocator.py) calls the shim's
  // exported `oomh_note_site("train.py:77")` before each segment it asks the driver for, and `nullptr`
  // after. While recording (Note [Recording a step's allocations]) the `alloc` events of that thread carry
  // it as `where`, so a sweep's site names its Python line. Per thread (a static, initial-exec TLS buffer:
  // nothing allocates), cut at 159 bytes; never read outside recording.
  static void note_site(const char* where) noexcept;
  static constexpr uint64_t kInjectEventLimit = 10000;
  static constexpr uint64_t kRecordEventLimit = 10000;  // alloc events (OOMH_RECORD_STEP) per process
  static constexpr uint64_t kFootprintMaxAge = 100'000'000;  // ns (Note [Counting the footprint])
  static constexpr uint32_t kTamperEventLimit = 16;           // per process (Note [A plan only the runner writes])

  explicit Engine(EngineSetup setup);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  AllocDecision begin_alloc(Entry entry, const char* symbol, int device, uint64_t size) noexcept;
  void end_alloc(const AllocDecision& d, bool succeeded, Space space, uint64_t key, uint64_t actual_size) noexcept;

  // Pinned host memory (Note [Host memory] in fault_plan.h): the host rules and the host cap decide, and the
  // bytes are booked on this process's host count only. Frees of host memory go through begin_free/end_free
  // like any other (the ledger knows a host record by its device, kHostDevice).
  AllocDecision begin_host_alloc(Entry entry, const char* symbol, uint64_t size) noexcept;
  void end_host_alloc(const AllocDecision& d, bool succeeded, Space space, uint64_t key, uint64_t size) noexcept;
  uint64_t host_held() const noexcept { return host_held_.load(std::memory_order_relaxed); }
  uint64_t host_peak() const noexcept { return host_peak_.load(std::memory_order_relaxed); }

  std::optional<Allocation> begin_free(Space space, uint64_t key) noexcept;
  void end_free(Space space, uint64_t key, const std::optional<Allocation>& taken, bool succeeded) noexcept;

  // Memory queries: the physical figures in, the capped ones out.
  // `from_driver` false: the figures are NVML's (its total differs from the driver's; not recorded).
  MemInfo mem_info(int device, uint64_t real_free, uint64_t real_total, bool from_driver = true) noexcept;
  uint64_t total_mem(int device, uint64_t real_total) noexcept;
  // The preload asks the driver for a device's total once per process and reports it here.
  bool needs_physical_total(int device) const noexcept;
  void note_physical_total(int device, uint64_t bytes) noexcept;

  // The armed record (Note [Armed record] in control_block.h). A way in is a lookup through dlsym or
  // cuGetProcAddress that handed out a hook; the first driver call of the process is recorded once (the
  // intercepted entry points call it; a relaxed load on every later call).
  void note_way_in(uint32_t way) noexcept;
  void note_driver_call(const char* symbol) noexcept {
    if (!driver_called_.load(std::memory_order_relaxed)) record_first_driver_call(symbol);
  }

  // Note [Where a step fault fires] in fault_plan.h: the request layer this process asks step rules at
  // (registered once, by the virtual device or the probe, before training), and one request there: true when
  // the fault plan refuses a request of `size` bytes (0: not known) on `device`, made in `step` and `phase` as
  // this process's probe counts them (not the block's, which the ranks of a job that starts torchrun itself
  // share); an inject event says so.
  void register_requests(Layer layer) noexcept;
  Layer requests_layer() const noexcept { return static_cast<Layer>(requests_.load(std::memory_order_relaxed)); }
  bool request(Layer layer, uint64_t size, int device, int64_t step, Phase phase) noexcept;

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
  // The cap this process enforces on a device, 0: none (Note [A plan only the runner writes]).
  uint64_t cap_limit(int device) const noexcept;
  size_t rule_count() const noexcept;
  CapCounting cap_counting() const noexcept;
  // Bytes of this process's footprint on `device` that its allocations do not explain, booked as held.
  uint64_t footprint_overhead(int device) const noexcept;
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
  // Note [A plan only the runner writes]: a plan in a runner's block, and a block cap unlike this process's.
  void refuse_plan(uint32_t generation) noexcept;
  void restore_cap(int device, uint64_t limit, uint64_t found) noexcept;
  void report_tamper(events::EventLine& line, const char* message) noexcept;
  void register_process(uint32_t flags, int parent_pid) noexcept;
  void note_device(int device) noexcept;
  uint64_t hold(int device, uint64_t bytes) noexcept;  // returns the process's bytes held now
  void unhold(int device, uint64_t bytes) noexcept;
  void count_freed(uint64_t bytes) noexcept;
  void report_inject(const char* symbol, uint64_t size, int device, const char* rule, const char* reason,
                     int64_t step, Phase phase, uint64_t call, MemoryKind memory = MemoryKind::device,
                     Layer layer = Layer::driver) noexcept;
  // At exit, a `rule_seen` event for each step rule: what it met in its window, for the message of a fault
  // that never fired (Note [Where a step fault fires]).
  void report_rules_seen() noexcept;
  // Counts this process as armed or as having rejected its plan, and writes shim_start.
  void write_start_event() noexcept;
  void record_first_driver_call(const char* symbol) noexcept;
  // Note [Counting the footprint]. `max_age_ns` 0: measure now (unless another thread is measuring).
  void refresh_footprint(int device, uint64_t max_age_ns) noexcept;
  void set_footprint_overhead(int device, uint64_t bytes) noexcept;
  void emit(events::EventLine& line) noexcept;
  // Note [Recording a step's allocations]
  // `oomharness sweep` first runs the job once without faults, with OOMH_RECORD_STEP=N (or A..B): every
  // allocation call the shim sees while the probe says step N is written as an `alloc` event, numbered by
  // `nth`, this process's count of such calls in that step (the count starts again when the step changes).
  // A rule `step=N,nth=K` counts the same calls the same way (Note [Rule semantics]), so the Kth recorded
  // call of step N of a deterministic job is the call that rule fails. Two threads allocating as the step
  // changes may number one call in the old count; a training step's calls come after the probe's step
  // mark, so this does not arise in the loops the sweep targets. Off (the default) it costs one compare
  // per call; on, one event line per call of those steps only.
  void report_alloc(const char* symbol, uint64_t size, int device, int64_t step, Phase phase, uint64_t call) noexcept;
  double process_elapsed() const noexcept;
  CallFacts call_facts(const Plan& plan, MemoryKind memory, Entry entry, uint64_t size, int device, int64_t step,
                       Phase phase) const noexcept;
  double job_elapsed() const noexcept;
  void vlog(LogLevel level, const char* format, va_list args) noexcept __attribute__((format(printf, 3, 0)));

  ControlBlock* cb_;
  ProcessSlot* slot_ = nullptr;
  ProcessSlot local_slot_{};  // when every slot of the block is taken
  int events_fd_;
  unsigned char seal_key_[32] = {};  // Note [Sealed event lines] in include/oomharness/event_seal.h
  LogLevel log_level_;
  int log_fd_;
  int rank_, local_rank_;
  std::vector<CapEntry> option_caps_;

  std::atomic<Plan*> plan_{nullptr};
  Plan* retired_ = nullptr;
  SpinLock plan_lock_;
  std::atomic<uint32_t> seen_generation_{0};
  bool plan_updates_;                          // Note [A plan only the runner writes]
  std::atomic<uint64_t> limit_[kMaxDevices]{};  // the cap this process enforces per device, 0: none
  std::atomic<uint32_t> tamper_events_{0};

  Ledger ledger_;  // also counts this process's free calls (Ledger::taken)
  std::atomic<uint64_t> alloc_calls_[kMaxDevices]{};
  std::atomic<uint64_t> failures_[kMaxDevices]{};
  std::atomic<uint64_t> peak_[kMaxDevices]{};  // highest slot_->held[d] once the driver gave the bytes
  std::atomic<uint64_t> host_calls_{0};     // pinned host allocation calls (Note [Host memory])
  std::atomic<uint64_t> host_failures_{0};
  std::atomic<uint64_t> host_held_{0};      // bytes this process has pinned through the shim
  std::atomic<uint64_t> host_peak_{0};
  std::atomic<uint64_t> freed_{0};  // bytes freed, counted only while a rule needs it (until_freed)
  std::atomic<uint32_t> used_devices_{0};
  std::atomic<uint32_t> physical_known_{0};
  std::atomic<uint64_t> inject_events_{0};
  std::atomic<uint8_t> requests_{0};          // the registered request layer (Layer); 0: driver, none
  std::atomic<uint64_t> request_calls_{0};    // requests asked at it (the `call` of their inject events)
  int64_t record_from_, record_to_;         // Note [Recording a step's allocations]; -1: none
  std::atomic<int64_t> recorded_step_{-1};  // the step whose calls recorded_ numbers
  std::atomic<uint64_t> recorded_{0};       // calls of that step recorded so far (their `nth`)
  std::atomic<uint64_t> recorded_total_{0}; // alloc events of the process (kRecordEventLimit)
  std::atomic<uint64_t> dropped_events_{0};
  std::atomic<bool> finished_{false};
  std::string plan_error_;                  // Note [Armed record]
  std::atomic<uint32_t> ways_{0};           // this process's ways in
  std::atomic<bool> driver_called_{false};  // this process has seen a driver call

  struct DeviceFootprint {
    std::atomic<uint64_t> overhead{0};     // booked on the job's and the slot's held
    std::atomic<uint64_t> measured_ns{0};  // CLOCK_MONOTONIC of the last measurement; 0: never
    SpinLock lock;                         // one measurement at a time; others go on without one
  };
  CapCounting option_counting_;
  FootprintProbe footprint_probe_;
  std::atomic<bool> footprint_on_{false};
  std::atomic<bool> footprint_failed_{false};
  DeviceFootprint footprint_[kMaxDevices];
  uint64_t process_start_ns_;  // CLOCK_MONOTONIC
  char plan_buffer_[kPlanCapacity];
};

}  // namespace oomh::inject
