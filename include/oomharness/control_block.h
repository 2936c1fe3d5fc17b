#pragma once
// The control block: one shared-memory segment per job attempt, created by the runner (or by the shim
// itself when it runs on its own), mapped by every process of the job (the shim in each of them, the
// probes) and sampled by the runner every 50 ms.
//
// Note [Control block layout]
// The layout is an ABI between the runner, the C++ shim and the Python probe (which maps the segment with
// mmap and reads/writes fields at the offsets the generated python/oomharness/_abi.py holds: Note [Generated,
// not checked] in runner/src/app/python_abi.cpp; python/oomharness/_control.py). Every field is
// a fixed-width integer at a fixed offset, checked by static_asserts below; a change of layout bumps
// kControlVersion. Readers check magic, version and size before trusting anything else.
//
// Counters are std::atomic with relaxed ordering: they are statistics and limits, not synchronisation.
// The one exception is the fault plan text, which the runner may replace at run time: it is published
// with a seqlock on plan_generation (odd while being written).
//
// Bytes held are kept twice: per device for the whole job (what a cap is checked against, so that all
// processes of the job — DataLoader workers, several ranks on one GPU — count together), and per process
// slot (so that the runner can give back what a process that died still had on the books).

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oomharness/name_table.h"

namespace oomh {

inline constexpr uint32_t kControlMagic = 0x484D4F4F;  // "OOMH" little-endian
inline constexpr uint32_t kControlVersion = 2;  // 2: seal_key (Note [Sealed event lines])
inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxProcesses = 256;
inline constexpr uint32_t kPlanCapacity = 64 * 1024;
inline constexpr int64_t kUnknownStep = -1;

// The training phase the probe reports. Numbers are ABI (the Python probe writes them: PHASES in
// python/oomharness/_control.py, generated into python/oomharness/_abi.py: Note [Generated, not checked]).
enum class Phase : uint32_t { none = 0, forward = 1, backward = 2, optimizer = 3, eval = 4, checkpoint = 5, data = 6 };

// Note [Name tables] in name_table.h; what the probe calls each phase is docs/probe.md's.
inline constexpr NameTable<Phase, 7> kPhases{{
    {Phase::none, "none", "no phase known (no probe, or between phases)"},
    {Phase::forward, "forward", "the model's forward pass"},
    {Phase::backward, "backward", "the backward pass"},
    {Phase::optimizer, "optimizer", "the optimizer's step"},
    {Phase::eval, "eval", "a forward pass under no_grad or model.eval()"},
    {Phase::checkpoint, "checkpoint", "saving or loading a checkpoint"},
    {Phase::data, "data", "from the end of a step to the next forward: fetching the next batch"},
}};

// The names are string literals: NUL-terminated, so the shim can write them with EventLine.
inline const char* phase_name(Phase p) { return name_of(kPhases, p, "none").data(); }
// Returns false for an unknown name.
inline bool phase_from_name(const char* name, Phase& out) {
  const std::optional<Phase> p = value_named(kPhases, name);
  if (p) out = *p;
  return p.has_value();
}

struct DeviceCounters {
  std::atomic<uint64_t> held;               // bytes held now by all processes of the job on this device
  std::atomic<uint64_t> peak;               // highest `held` seen
  std::atomic<uint64_t> cap;                // virtual limit in bytes; 0 = none
  std::atomic<uint64_t> alloc_calls;        // intercepted allocation calls (successful or not)
  std::atomic<uint64_t> free_calls;         // intercepted free calls
  std::atomic<uint64_t> failures_injected;  // allocations failed by a fault rule
  std::atomic<uint64_t> cap_failures;       // allocations failed because they would pass the cap
  std::atomic<uint64_t> physical_total;     // the driver's total memory for the device, 0 until known
};
static_assert(sizeof(DeviceCounters) == 64);

struct ProcessSlot {
  std::atomic<int32_t> pid;         // 0: free slot
  std::atomic<int32_t> parent_pid;
  std::atomic<uint32_t> flags;      // kProcessForked, kProcessExecd
  uint32_t reserved;
  std::atomic<uint64_t> held[kMaxDevices];  // this process's share of DeviceCounters::held
};
static_assert(sizeof(ProcessSlot) == 16 + 8 * kMaxDevices);
inline constexpr uint32_t kProcessForked = 1;  // registered by a fork() child
inline constexpr uint32_t kProcessExecd = 2;   // registered by a process that inherited the shim through exec

struct ControlBlock {
  uint32_t magic;                          // @0   kControlMagic
  uint32_t version;                        // @4   kControlVersion
  uint32_t size;                           // @8   sizeof(ControlBlock)
  uint32_t flags;                          // @12  kControlCreatedByShim, ...
  uint64_t start_ns;                       // @16  CLOCK_REALTIME when the block was created
  std::atomic<int64_t> step;               // @24  current training step (probe), kUnknownStep until known
  std::atomic<uint32_t> phase;             // @32  Phase (probe)
  std::atomic<uint32_t> plan_generation;   // @36  seqlock: odd while the runner writes plan_text
  std::atomic<int64_t> batch_size;         // @40  current batch size (probe), -1 until known
  std::atomic<uint32_t> process_count;     // @48  processes that ever registered
  std::atomic<uint32_t> device_count;      // @52  devices the shim has seen (highest ordinal + 1)
  std::atomic<uint64_t> events_written;    // @56  event lines appended by the shims and the C++ probes
  std::atomic<uint64_t> ooms_seen;         // @64  out-of-memory errors the training code saw (probe)
  std::atomic<uint64_t> ooms_caught;       // @72  ... of which the code caught and went on
  std::atomic<uint64_t> empty_cache_calls; // @80  (probe)
  // The armed record (Note [Armed record]): what the shims of the job's processes said about themselves.
  std::atomic<uint32_t> shims_armed;       // @88  processes whose shim accepted the fault plan and caps
  std::atomic<uint32_t> plans_rejected;    // @92  processes whose shim rejected them (no faults, no caps)
  std::atomic<uint32_t> ways_in;           // @96  kWayExport | kWayDlsym | kWayProcAddress, as seen
  // Note [A plan only the runner writes] in injector/engine/engine.h: times a shim found the job writing what
  // only the runner writes (a plan into a runner's block, a cap), refused it and kept its own.
  std::atomic<uint32_t> tampered;          // @100
  std::atomic<uint64_t> first_driver_call_ns;  // @104 CLOCK_REALTIME of the first intercepted driver call; 0: none
  // Event lines appended by the Python probes: their own counter, because Python cannot add atomically
  // to events_written beside the shim (Note [Counters from Python] in python/oomharness/_control.py).
  // A block's events are events_written + probe_events_written.
  std::atomic<uint64_t> probe_events_written;  // @112
  uint64_t reserved[1];                    // @120
  DeviceCounters devices[kMaxDevices];     // @128
  ProcessSlot processes[kMaxProcesses];    // @1152
  std::atomic<uint32_t> plan_size;         // bytes of plan_text in use
  uint32_t reserved2;
  char plan_text[kPlanCapacity];           // the fault plan as JSON (docs/fault-plan.md), not NUL-terminated
  // Note [Sealed event lines] in event_seal.h: the key the attempt's shims and probes seal their event lines
  // with, drawn by the runner for each attempt; all zero: seal nothing (a shim on its own).
  unsigned char seal_key[32];
};
inline constexpr uint32_t kControlCreatedByShim = 1;

// Note [Armed record]
// A green verdict is only worth something when the faults and caps it was given were in force. So each
// process under the shim says, in the control block and in its shim_start event, that it joined the job
// (process_count), whether it accepted the plan and caps (shims_armed) or rejected them (plans_rejected,
// with the reason in the event), how it was reached (ways_in), and when it first saw a driver call
// (first_driver_call_ns, plus a driver_call event). The runner reads these once an attempt is over and
// judges a job whose plan had rules or caps as an error, never as a pass, when no process armed, one
// rejected the plan, or no driver call came (runner/src/app/untested.cpp).
// Ways in (Note [Three ways in] in injector/preload/hooks.cpp): a lookup through dlsym or cuGetProcAddress
// that handed out one of the shim's hooks sets its bit; a driver call that arrives before any such lookup
// came through the exported symbol (the program links libcuda).
inline constexpr uint32_t kWayExport = 1;
inline constexpr uint32_t kWayDlsym = 2;
inline constexpr uint32_t kWayProcAddress = 4;

static_assert(offsetof(ControlBlock, step) == 24);
static_assert(offsetof(ControlBlock, phase) == 32);
static_assert(offsetof(ControlBlock, plan_generation) == 36);
static_assert(offsetof(ControlBlock, batch_size) == 40);
static_assert(offsetof(ControlBlock, events_written) == 56);
static_assert(offsetof(ControlBlock, ooms_seen) == 64);
static_assert(offsetof(ControlBlock, ooms_caught) == 72);
static_assert(offsetof(ControlBlock, empty_cache_calls) == 80);
static_assert(offsetof(ControlBlock, shims_armed) == 88);
static_assert(offsetof(ControlBlock, plans_rejected) == 92);
static_assert(offsetof(ControlBlock, ways_in) == 96);
static_assert(offsetof(ControlBlock, tampered) == 100);
static_assert(offsetof(ControlBlock, first_driver_call_ns) == 104);
static_assert(offsetof(ControlBlock, probe_events_written) == 112);
static_assert(offsetof(ControlBlock, devices) == 128);
static_assert(offsetof(ControlBlock, processes) == 128 + 64 * kMaxDevices);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free,
              "the control block needs lock-free atomics to work across processes");

inline uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Raises `peak` to at least `value`.
inline void raise_peak(std::atomic<uint64_t>& peak, uint64_t value) {
  uint64_t seen = peak.load(std::memory_order_relaxed);
  while (seen < value && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {}
}

// Initialises a zeroed mapping as a fresh control block.
inline void control_block_init(ControlBlock* cb, uint32_t flags = 0) {
  cb->version = kControlVersion;
  cb->size = sizeof(ControlBlock);
  cb->flags = flags;
  cb->start_ns = realtime_ns();
  cb->step.store(kUnknownStep, std::memory_order_relaxed);
  cb->batch_size.store(-1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint32_t>*>(&cb->magic)->store(kControlMagic, std::memory_order_release);
}

// True when `cb` is a control block this build understands.
inline bool control_block_valid(const ControlBlock* cb) {
  return cb && cb->magic == kControlMagic && cb->version == kControlVersion && cb->size == sizeof(ControlBlock);
}

// Creates the named POSIX shared-memory segment `name` ("/oomh-...") and initialises it.
// Returns nullptr with errno set on failure. Never throws, never allocates.
inline ControlBlock* control_block_create(const char* name, uint32_t flags = 0) {
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, sizeof(ControlBlock)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name);
    errno = e;
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(ControlBlock), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name);
    errno = e;
    return nullptr;
  }
  auto* cb = static_cast<ControlBlock*>(p);
  control_block_init(cb, flags);
  return cb;
}

// Note [A block the job cannot take down]
// A block the job can shrink (ftruncate on a /dev/shm file) would kill the runner with SIGBUS at its next
// sample. So the runner's blocks are memfds sealed against shrinking and growing (F_SEAL_SHRINK,
// F_SEAL_GROW, then F_SEAL_SEAL): the job reaches one by the path /proc/<runner pid>/fd/<n> (OOMH_CONTROL),
// which opens the same memory, and nothing it does to the file changes its size. A memfd has no name in
// /dev/shm, so nothing is left there when the runner dies; its memory goes with the last descriptor or
// mapping. Names without a second '/' are POSIX shared-memory names (the shim's own blocks, older runners).
// What the job can still write is everything in the block, and its plan_text above all: Note [A plan only the
// runner writes] in injector/engine/engine.h says why that does not change what is tested.

// Creates a sealed memfd control block (runner side). Returns nullptr with errno set on failure; on success
// `fd_out` holds the memfd (close-on-exec), which must stay open while the job may open the block by path.
inline ControlBlock* control_block_create_sealed(int& fd_out, uint32_t flags = 0) {
  fd_out = -1;
  int fd = memfd_create("oomh-control", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, sizeof(ControlBlock)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(ControlBlock), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    errno = e;
    return nullptr;
  }
  auto* cb = static_cast<ControlBlock*>(p);
  control_block_init(cb, flags);
  fd_out = fd;
  return cb;
}

// The name a shim on its own gives the block it creates: "/oomh-solo-<pid>". Any other name is a runner's.
inline constexpr const char* kSoloBlockPrefix = "/oomh-solo-";
inline bool control_name_is_solo(const char* name) {
  return name && std::strncmp(name, kSoloBlockPrefix, std::strlen(kSoloBlockPrefix)) == 0;
}

// True when `name` is a file path (/proc/<pid>/fd/<n>) rather than a POSIX shared-memory name.
inline bool control_name_is_path(const char* name) { return name && name[0] == '/' && std::strchr(name + 1, '/'); }

// Maps an existing segment. Returns nullptr (errno set; EPROTO for a bad magic/version/size) on failure.
inline ControlBlock* control_block_open(const char* name) {
  int fd = control_name_is_path(name) ? open(name, O_RDWR | O_CLOEXEC) : shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  struct stat st{};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(ControlBlock)) {
    close(fd);
    errno = EPROTO;
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(ControlBlock), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) { errno = e; return nullptr; }
  auto* cb = static_cast<ControlBlock*>(p);
  if (!control_block_valid(cb)) {
    munmap(p, sizeof(ControlBlock));
    errno = EPROTO;
    return nullptr;
  }
  return cb;
}

inline void control_block_close(ControlBlock* cb) {
  if (cb) munmap(cb, sizeof(ControlBlock));
}

// Publishes a new fault plan (runner side). Readers see either the old or the new text, never a mix.
// Returns false when the text does not fit.
inline bool control_block_publish_plan(ControlBlock* cb, const char* text, uint32_t size) {
  if (size > kPlanCapacity) return false;
  uint32_t g = cb->plan_generation.load(std::memory_order_relaxed);
  cb->plan_generation.store(g + 1, std::memory_order_relaxed);  // odd: writing
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(cb->plan_text, text, size);
  cb->plan_size.store(size, std::memory_order_relaxed);
  cb->plan_generation.store(g + 2, std::memory_order_release);  // even: stable
  return true;
}

// Copies the current plan (reader side) into `out` (capacity kPlanCapacity). Returns the generation it
// read, or 0 when there is no plan or the copy raced with a writer (try again on a later call).
inline uint32_t control_block_read_plan(const ControlBlock* cb, char* out, uint32_t& size) {
  uint32_t g1 = cb->plan_generation.load(std::memory_order_acquire);
  if (g1 == 0 || (g1 & 1u)) return 0;
  uint32_t n = cb->plan_size.load(std::memory_order_relaxed);
  if (n > kPlanCapacity) return 0;
  std::memcpy(out, cb->plan_text, n);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (cb->plan_generation.load(std::memory_order_relaxed) != g1) return 0;
  size = n;
  return g1;
}

}  // namespace oomh
