#pragma once
// The C++ probe: what a C++ training program (LibTorch, or the emulated trainer over the driver double)
// tells the harness that hooks cannot see. Every call is a no-op outside the harness (no OOMH_EVENTS and
// no OOMH_CONTROL in the environment), never throws and never allocates, so it is safe inside a
// `catch (const c10::OutOfMemoryError&)` block.
//
//   oomh::probe::step(step, batch_size, loss);      // once per completed training step
//   oomh::probe::phase(oomh::Phase::forward);        // so step- and phase-triggered faults can fire
//   oomh::probe::oom(step, batch, "CUDA out of memory ...", /*caught=*/true);
//   oomh::probe::empty_cache(reserved_before, reserved_after, allocated_before, freeable_before);
//   oomh::probe::checkpoint_saved(path, step);  oomh::probe::checkpoint_loaded(path, step);
//   oomh::probe::samples(k);                         // samples processed (for no-sample-loss checks)

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include "oomharness/control_block.h"
#include "oomharness/event_seal.h"
#include "oomharness/events.h"

namespace oomh::probe {

namespace detail {
struct State {
  int fd = -1;
  ControlBlock* cb = nullptr;
  unsigned char key[events::kSealKeyBytes] = {};
  bool active = false;
  State() {
    const char* events = std::getenv("OOMH_EVENTS");
    const char* control = std::getenv("OOMH_CONTROL");
    if (events && *events) fd = events::open_event_log(events);
    if (control && *control) cb = control_block_open(control);
    if (cb) std::memcpy(key, cb->seal_key, sizeof key);
    active = fd >= 0 || cb != nullptr;
  }
};
inline State& state() {
  static State s;  // thread-safe initialisation; the constructor neither throws nor loops
  return s;
}
inline void emit(events::EventLine& line) {
  State& s = state();
  // Note [Sealed event lines] in event_seal.h: under the key of the attempt's block.
  if (events::write_sealed(line, s.fd, s.cb ? s.key : nullptr) && s.cb)
    s.cb->events_written.fetch_add(1, std::memory_order_relaxed);
}

// Note [Processes outside the shim] in runner/src/exec/escapes.h: under a runner (the block holds a seal key),
// the first time this process reports device memory it asks whether the shim is active in it (the shim's
// oomh_shim_active, found in the global scope where the shim was preloaded), and says so when it is not.
inline void device_memory_seen(int64_t allocated, int64_t reserved) {
  static std::atomic<bool> asked{false};
  State& s = state();
  if (allocated <= 0 && reserved <= 0) return;
  if (!s.cb || !events::seal_key_set(s.key) || asked.exchange(true, std::memory_order_relaxed)) return;
  using ActiveFn = int (*)();
  auto active = reinterpret_cast<ActiveFn>(dlsym(RTLD_DEFAULT, "oomh_shim_active"));
  if (active && active() == 1) return;
  char command[512] = {};
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t n = ::read(fd, command, sizeof command - 1);
    ::close(fd);
    for (ssize_t i = 0; i < n; ++i)
      if (command[i] == '\0') command[i] = (i + 1 < n) ? ' ' : '\0';
  }
  events::EventLine e(events::kSrcProbe, events::kOutsideShim);
  e.add("shim", active ? "inactive" : "absent").add("command", command);
  if (allocated >= 0) e.add("allocated", allocated);
  if (reserved >= 0) e.add("reserved", reserved);
  e.add("via", "probe");
  emit(e);
}
}  // namespace detail

// True when running under the harness.
inline bool active() { return detail::state().active; }

inline void started(const char* framework, const char* version) {
  if (!active()) return;
  events::EventLine e(events::kSrcProbe, events::kProbeStart);
  e.add("framework", framework).add("version", version);
  detail::emit(e);
}

inline void phase(Phase p) {
  auto& s = detail::state();
  if (s.cb) s.cb->phase.store(static_cast<uint32_t>(p), std::memory_order_relaxed);
}

// Marks the start of `step` (so step-triggered faults fire during it) without reporting it done.
inline void begin_step(int64_t step, int64_t batch_size = -1) {
  auto& s = detail::state();
  if (!s.cb) return;
  s.cb->step.store(step, std::memory_order_relaxed);
  if (batch_size >= 0) s.cb->batch_size.store(batch_size, std::memory_order_relaxed);
}

// True once for each step the runner lists in OOMH_FLUSH_AT_STEPS: the steps its faults target. A caching
// allocator serves steady steps from its cache, so the code (oomh::recover::begin_step does it) empties
// the cache as such a step begins and the step's allocations reach the driver, where the shim can fail
// them (the Python probe does the same: docs/probe.md). Parses without allocating; at most 64 steps.
inline bool flush_due(int64_t step) {
  struct Steps {
    int64_t step[64];
    bool done[64];
    int count = 0;
    Steps() {
      const char* s = std::getenv("OOMH_FLUSH_AT_STEPS");
      while (s && *s && count < 64) {
        char* end = nullptr;
        long long v = std::strtoll(s, &end, 10);
        if (end == s) break;
        step[count] = v;
        done[count++] = false;
        s = *end == ',' ? end + 1 : end;
      }
    }
  };
  static Steps steps;
  for (int i = 0; i < steps.count; ++i)
    if (steps.step[i] == step && !steps.done[i]) {
      steps.done[i] = true;
      return true;
    }
  return false;
}

// Reports a completed step.
inline void step(int64_t step, int64_t batch_size = -1, double loss = NAN, int64_t allocated = -1, int64_t reserved = -1) {
  if (!active()) return;
  detail::device_memory_seen(allocated, reserved);
  events::EventLine e(events::kSrcProbe, events::kStep);
  e.add("step", step);
  if (batch_size >= 0) e.add("batch_size", batch_size);
  if (!std::isnan(loss)) e.add("loss", loss);
  if (allocated >= 0) e.add("allocated", allocated);
  if (reserved >= 0) e.add("reserved", reserved);
  detail::emit(e);
}

inline void oom(int64_t step, int64_t batch_size, const char* message, bool caught) {
  auto& s = detail::state();
  if (!s.active) return;
  if (s.cb) {
    s.cb->ooms_seen.fetch_add(1, std::memory_order_relaxed);
    if (caught) s.cb->ooms_caught.fetch_add(1, std::memory_order_relaxed);
  }
  const char* ph = s.cb ? phase_name(static_cast<Phase>(s.cb->phase.load(std::memory_order_relaxed))) : "none";
  events::EventLine e(events::kSrcProbe, events::kOom);
  e.add("step", step).add("batch_size", batch_size).add("phase", ph).add("message", message).add("caught", caught);
  detail::emit(e);
}

// A call that empties the allocator's cache, with the allocator's figures around it. What the cache held
// free before the call is what the call could give back: empty_cache_retry tells a cache that was already
// empty (the allocator gives its free blocks back itself before it raises an OOM) from one the call could
// not shrink. allocated_before: bytes in live tensors as the call began; freeable_before: bytes of free
// cached blocks it could give back (PyTorch: free blocks that are whole segments). -1: unknown; a
// freeable_before left out is reserved_before - allocated_before, right for an allocator that never
// splits a segment between tensors.
inline void empty_cache(int64_t reserved_before, int64_t reserved_after, int64_t allocated_before = -1,
                        int64_t freeable_before = -1) {
  auto& s = detail::state();
  if (!s.active) return;
  if (s.cb) s.cb->empty_cache_calls.fetch_add(1, std::memory_order_relaxed);
  if (freeable_before < 0 && allocated_before >= 0)
    freeable_before = reserved_before > allocated_before ? reserved_before - allocated_before : 0;
  events::EventLine e(events::kSrcProbe, events::kEmptyCache);
  e.add("reserved_before", reserved_before).add("reserved_after", reserved_after);
  if (allocated_before >= 0) e.add("allocated_before", allocated_before);
  if (freeable_before >= 0) e.add("freeable_before", freeable_before);
  detail::emit(e);
}

inline void checkpoint_saved(const char* path, int64_t step) {
  if (!active()) return;
  events::EventLine e(events::kSrcProbe, events::kSave);
  e.add("path", path).add("step", step);
  detail::emit(e);
}

inline void checkpoint_loaded(const char* path, int64_t step) {
  if (!active()) return;
  events::EventLine e(events::kSrcProbe, events::kLoad);
  e.add("path", path).add("step", step);
  detail::emit(e);
}

inline void samples(int64_t count) {
  if (!active()) return;
  events::EventLine e(events::kSrcProbe, events::kSamples);
  e.add("count", count);
  detail::emit(e);
}

inline void memory(int64_t allocated, int64_t reserved) {
  if (!active()) return;
  detail::device_memory_seen(allocated, reserved);
  events::EventLine e(events::kSrcProbe, events::kMemory);
  e.add("allocated", allocated).add("reserved", reserved);
  detail::emit(e);
}

}  // namespace oomh::probe
