#pragma once
// The event schema: what every process of a job appends to the attempt's event log (JSON lines).
//
//   {"t":1763780000.123456,"pid":4242,"src":"shim","kind":"inject","fields":{"entry":"cuMemAlloc_v2",...}}
//
//   t       wall-clock time (CLOCK_REALTIME) in seconds, microsecond resolution: events of several
//           processes are ordered by it
//   pid     the process that wrote the line
//   src     who wrote it: "shim" (the injector), "probe" (Python or C++ probe), "runner"
//   kind    what happened, one of the kinds below
//   fields  the kind's fields (docs/events.md lists them)
//
// Each line is written with a single write(2) on a descriptor opened with O_APPEND, so lines of several
// processes never interleave. EventLine formats into a fixed buffer: it never allocates and never throws,
// so the shim can use it inside a hook and the C++ probe inside an OOM handler.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iterator>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oomharness/name_table.h"

namespace oomh::events {

// Sources.
inline constexpr const char* kSrcShim = "shim";
inline constexpr const char* kSrcProbe = "probe";
inline constexpr const char* kSrcRunner = "runner";

// Kinds written by the shim.
inline constexpr const char* kShimStart = "shim_start";
inline constexpr const char* kDriverCall = "driver_call";
inline constexpr const char* kInject = "inject";
inline constexpr const char* kAlloc = "alloc";
inline constexpr const char* kCapChange = "cap_change";
inline constexpr const char* kPlanChange = "plan_change";
inline constexpr const char* kFootprint = "footprint";
inline constexpr const char* kShimExit = "shim_exit";
inline constexpr const char* kWarning = "warning";
inline constexpr const char* kRuleSeen = "rule_seen";
inline constexpr const char* kTamper = "tamper";  // the shim and the runner (Note [A plan only the runner writes])

// Kinds written by the probes (Python and C++).
inline constexpr const char* kProbeStart = "probe_start";
inline constexpr const char* kStep = "step";
inline constexpr const char* kPhase = "phase";
inline constexpr const char* kOom = "oom";
inline constexpr const char* kOomCaught = "oom_caught";
inline constexpr const char* kEmptyCache = "empty_cache";
inline constexpr const char* kSave = "checkpoint_save";
inline constexpr const char* kLoad = "checkpoint_load";
inline constexpr const char* kModelState = "model_state";
inline constexpr const char* kSamples = "samples";
inline constexpr const char* kMemory = "memory";
inline constexpr const char* kSnapshot = "snapshot";
inline constexpr const char* kProbeExit = "probe_exit";
inline constexpr const char* kMemoryBreakdown = "memory_breakdown";
inline constexpr const char* kEvalForward = "eval_forward";
inline constexpr const char* kOutsideShim = "outside_shim";  // Note [Processes outside the shim] (runner/src/exec/escapes.h)
// Written by the virtual CUDA device (python/oomharness/virtual_device/), with src "probe".
inline constexpr const char* kVirtualDevice = "virtual_device";
inline constexpr const char* kDivergence = "divergence";
inline constexpr const char* kLibraryAlloc = "library_alloc";
// Written by its shape-only mode (python/oomharness/virtual_device/shape_only.py, `oomharness predict`), with src "probe".
inline constexpr const char* kShapeOnly = "shape_only";
inline constexpr const char* kValuesNotComputed = "values_not_computed";
inline constexpr const char* kPrediction = "prediction";

// Kinds the runner adds to the trace (never written by a job).
inline constexpr const char* kAttemptStart = "attempt_start";
inline constexpr const char* kAttemptExit = "attempt_exit";
inline constexpr const char* kObserved = "observed";
inline constexpr const char* kReclaimed = "reclaimed";
inline constexpr const char* kHang = "hang";
inline constexpr const char* kStoppedForRestart = "stopped_for_restart";

// Note [Name tables] in name_table.h: every kind, the source that writes it, and its fields (docs/events.md
// says more). A `warning` comes from the shim, the runner and the probe alike (listed under the shim).
inline constexpr NameTable<std::string_view, 39> kEventKinds{{
    {kSrcShim, kShimStart,
     "pid, ppid, exec (bool), forked (bool), rules, cap, plan (\"accepted\"|\"rejected\"), plan_error"},
    {kSrcShim, kDriverCall, "entry, export, dlsym, proc_address (the process's first driver call)"},
    {kSrcShim, kInject,
     "entry, size, device, rule, reason (\"rule\"|\"cap\"), step, phase, tid, call, memory, layer (\"driver\"|"
     "\"allocator\"|\"probe\": Note [Where a step fault fires] in injector/engine/fault_plan.h)"},
    {kSrcShim, kAlloc, "entry, size, device, step, phase, call, nth[, where] (OOMH_RECORD_STEP only)"},
    {kSrcShim, kCapChange, "device, from, to, reason"},
    {kSrcShim, kPlanChange, "generation, rules"},
    {kSrcShim, kFootprint, "device, footprint, overhead (first measurement per device)"},
    {kSrcShim, kShimExit, "per device: alloc_calls, failures, held, peak, overhead"},
    {kSrcShim, kWarning, "message"},
    {kSrcShim, kRuleSeen,
     "at a process's exit, for each rule with a step window: rule, layer, triggers, driver_calls and requests "
     "met in its window (Note [Where a step fault fires])"},
    // Written by the shim and by the runner: Note [A plan only the runner writes] in injector/engine/engine.h.
    {kSrcShim, kTamper, "what (\"plan\"|\"cap\"), message; generation (a plan), device, cap, found (a cap)"},
    {kSrcProbe, kProbeStart, "framework, version, allocator"},
    {kSrcProbe, kStep, "step, batch_size, loss, allocated, reserved"},
    {kSrcProbe, kPhase, "phase (only when a fault needs it; not per step by default)"},
    {kSrcProbe, kOom, "step, batch_size, phase, message, device, size"},
    {kSrcProbe, kOomCaught, "step: the code caught the OOM and went on"},
    {kSrcProbe, kEmptyCache, "reserved_before, reserved_after, allocated_before, freeable_before"},
    {kSrcProbe, kSave, "path, step, completed, digest, tensors"},
    {kSrcProbe, kLoad, "path, step, digest, tensors"},
    {kSrcProbe, kModelState, "step, model, tensors, unmatched, from [{digests, tensors}]"},
    {kSrcProbe, kSamples, "count (samples processed since the last step event)"},
    {kSrcProbe, kMemory, "allocated, reserved (at a point the code chose)"},
    {kSrcProbe, kSnapshot, "path of a saved PyTorch memory snapshot"},
    {kSrcProbe, kProbeExit, "reason"},
    {kSrcProbe, kMemoryBreakdown,
     "what held the memory (docs/diagnosis.md): at (\"oom\"|\"peak\"|\"step\"), step, phase, batch_size, allocated, "
     "reserved, total, parameters, gradients, optimizer_state, workspace, other, cached_free, exact, "
     "top [{bytes, shape, dtype, site}], sites [{site, bytes, count}]"},
    {kSrcProbe, kEvalForward, "step, grad, training, batch_size, site (once per evaluation)"},
    {kSrcProbe, kOutsideShim,
     "shim (\"absent\"|\"inactive\"), command, allocated, reserved (the probe's figures), used (NVML's), via "
     "(\"probe\"|\"nvml\"): a process of the job that holds device memory without the shim, said by its probe or by "
     "the runner (once per process; the job is then an error)"},
    // Written by the virtual CUDA device (python/oomharness/virtual_device/), with src "probe".
    {kSrcProbe, kVirtualDevice, "description, torch, model, cublas_workspace"},
    {kSrcProbe, kDivergence, "kind, detail (Note [Divergences] in virtual_device/device.py)"},
    {kSrcProbe, kLibraryAlloc, "library, thread, bytes, counted (a CUDA library's handle made outside the caching allocator; "
                               "counted: whether the shim saw it, so that a cap counts it: cuBLAS's yes, cuDNN 9's no)"},
    {kSrcProbe, kShapeOnly, "kernels, context (at the start of a shape-only run)"},
    {kSrcProbe, kValuesNotComputed, "site (the first value a shape-only run stood in for)"},
    {kSrcProbe, kPrediction, "the shape-only run's prediction, written at its exit (docs/predict.md)"},
    {kSrcRunner, kAttemptStart, "attempt, argv"},
    {kSrcRunner, kAttemptExit, "attempt, code, signal, timed_out, oom_message"},
    {kSrcRunner, kObserved, "key, value, stream, line (a stdout/stderr regex hit)"},
    {kSrcRunner, kReclaimed, "pid, device, bytes (a dead process's bytes given back)"},
    // Note [Hang detection] in job_runner_hangs.cpp.
    {kSrcRunner, kHang,
     "a distributed job's rank stopped advancing after another rank ended: rank (the one that stalled), step (its "
     "last step in progress, -1 unknown), waited (seconds since another rank ended or since its last step, whichever "
     "is later), stall (the limit), after_rank (the rank that ended first)"},
    // Note [A restart of every rank] in job_runner_hangs.cpp.
    {kSrcRunner, kStoppedForRestart,
     "a rank the runner stopped because another rank died of what restarts the job (restart.on), as torchrun's "
     "agent stops a failed worker's group: rank (the one stopped), step (its step in progress, -1 unknown), "
     "after_rank (the rank that died), waited (seconds since it died)"},
}};

// Note [Event fields]
// The fields each kind may carry, declared once: the C++ writers spell them as here, and the Python package
// gets them through python/oomharness/_abi.py, which is generated from this table (Note [Generated, not
// checked] in runner/src/app/python_abi.cpp): its event writer refuses, under the tests, a field a kind does not
// list. `rank` may be on any event a probe writes (Note [Ranks seen in events] in python/oomharness/probe/),
// and `truncated` on any line EventLine cut short. docs/events.md says what each field means.
struct KindFields {
  std::string_view kind;
  std::string_view fields;  // space-separated
};
inline constexpr std::string_view kAnyProbeFields = "rank";
inline constexpr std::string_view kAnyFields = "truncated";
inline constexpr KindFields kEventFields[] = {
    {kShimStart, "ppid exec forked rules cap plan plan_error"},
    {kDriverCall, "entry export dlsym proc_address"},
    {kInject, "entry size device rule reason step phase tid call memory layer"},
    {kAlloc, "entry size device step phase call nth where"},
    {kCapChange, "device from to reason"},
    {kPlanChange, "generation rules"},
    {kFootprint, "device footprint overhead"},
    {kShimExit, "device alloc_calls free_calls failures held peak job_held job_peak overhead events_dropped"},
    {kWarning, "message observed_dropped"},
    {kRuleSeen, "rule layer triggers driver_calls requests"},
    {kTamper, "what message generation device cap found"},
    {kProbeStart, "framework version allocator"},
    {kStep, "step batch_size batch_from loss data grads_cleared site allocated reserved"},
    {kPhase, "phase"},
    {kOom, "step batch_size batch_from phase message oom_kind exception device size caught data"},
    {kOomCaught, "step"},
    {kEmptyCache, "reserved_before reserved_after allocated_before freeable_before"},
    {kSave, "path step completed digest tensors optimizer_state"},
    {kLoad, "path step completed digest tensors"},
    {kModelState, "step model tensors unmatched unseen from restored optimizer_steps"},
    {kSamples, "count"},
    {kMemory, "allocated reserved"},
    {kSnapshot, "path"},
    {kProbeExit, "reason"},
    {kMemoryBreakdown,
     "at step phase batch_size completed site allocated reserved total parameters gradients optimizer_state "
     "workspace other cached_free exact top sites inputs stats_allocated stats_reserved summary history_allocated "
     "gather_s reserved_peak error"},
    {kEvalForward, "step grad training batch_size site"},
    {kOutsideShim, "shim command allocated reserved used via"},
    {kVirtualDevice, "description torch model cublas_workspace"},
    {kDivergence, "kind detail"},
    {kLibraryAlloc, "library thread bytes counted"},
    {kShapeOnly, "kernels context"},
    {kValuesNotComputed, "site"},
    {kPrediction,
     "peak_allocated peak_reserved context libraries breakdown ooms values_computed stand_ins stand_in_sites "
     "kernels divergences segments torch steps phases stopped_after saved"},
    {kAttemptStart, "attempt argv master_port reserved"},
    {kAttemptExit, "attempt code signal timed_out oom_message interrupted"},
    {kObserved, "key value stream line"},
    {kReclaimed, "pid device bytes"},
    {kHang, "rank step waited stall after_rank after"},
    {kStoppedForRestart, "rank step after_rank waited"},
};

// kEventFields lists the kinds of kEventKinds, in its order.
constexpr bool event_fields_follow_kinds() {
  if (std::size(kEventFields) != kEventKinds.size()) return false;
  for (size_t i = 0; i < kEventKinds.size(); ++i)
    if (kEventFields[i].kind != kEventKinds[i].name) return false;
  return true;
}
static_assert(event_fields_follow_kinds(), "kEventFields must list every kind of kEventKinds, in the same order");

inline double now_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec / 1000) * 1e-6;
}

// One event line, formatted in place. Too long a line is cut at a field boundary and marked
// "truncated":true, so the line stays valid JSON.
class EventLine {
 public:
  static constexpr size_t kCapacity = 2048;

  EventLine(const char* src, const char* kind) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    len_ = std::snprintf(buf_, kCapacity, "{\"t\":%lld.%06ld,\"pid\":%d,\"src\":\"%s\",\"kind\":\"%s\",\"fields\":{",
                         static_cast<long long>(ts.tv_sec), ts.tv_nsec / 1000, static_cast<int>(getpid()), src, kind);
  }

  EventLine& add(const char* key, int64_t v) {
    char tmp[32];
    std::snprintf(tmp, sizeof tmp, "%lld", static_cast<long long>(v));
    return raw(key, tmp);
  }
  EventLine& add(const char* key, uint64_t v) {
    char tmp[32];
    std::snprintf(tmp, sizeof tmp, "%llu", static_cast<unsigned long long>(v));
    return raw(key, tmp);
  }
  EventLine& add(const char* key, int v) { return add(key, static_cast<int64_t>(v)); }
  EventLine& add(const char* key, unsigned v) { return add(key, static_cast<uint64_t>(v)); }
  EventLine& add(const char* key, long long v) { return add(key, static_cast<int64_t>(v)); }
  EventLine& add(const char* key, unsigned long long v) { return add(key, static_cast<uint64_t>(v)); }
  EventLine& add(const char* key, bool v) { return raw(key, v ? "true" : "false"); }
  EventLine& add(const char* key, double v) {
    if (!std::isfinite(v)) return raw(key, "null");
    char tmp[40];
    std::snprintf(tmp, sizeof tmp, "%.9g", v);
    return raw(key, tmp);
  }
  EventLine& add(const char* key, const char* s) {
    if (!s) return raw(key, "null");
    char tmp[1024];
    size_t n = 0;
    tmp[n++] = '"';
    for (const char* p = s; *p && n + 8 < sizeof tmp; ++p) {
      unsigned char c = static_cast<unsigned char>(*p);
      if (c == '"' || c == '\\') { tmp[n++] = '\\'; tmp[n++] = static_cast<char>(c); }
      else if (c == '\n') { tmp[n++] = '\\'; tmp[n++] = 'n'; }
      else if (c == '\t') { tmp[n++] = '\\'; tmp[n++] = 't'; }
      else if (c < 0x20) { n += std::snprintf(tmp + n, sizeof tmp - n, "\\u%04x", c); }
      else tmp[n++] = static_cast<char>(c);
    }
    tmp[n++] = '"';
    tmp[n] = '\0';
    return raw(key, tmp);
  }

  // The finished line, with its newline.
  const char* data() {
    finish();
    return buf_;
  }
  size_t size() {
    finish();
    return static_cast<size_t>(len_);
  }

  // Appends the line to `fd` in one write. Returns false when the write failed or was short.
  bool write_to(int fd) {
    if (fd < 0) return false;
    finish();
    ssize_t w = ::write(fd, buf_, static_cast<size_t>(len_));
    return w == len_;
  }

 private:
  EventLine& raw(const char* key, const char* value) {
    if (finished_ || truncated_) return *this;
    size_t need = std::strlen(key) + std::strlen(value) + 4;
    if (static_cast<size_t>(len_) + need + 32 >= kCapacity) {
      len_ += std::snprintf(buf_ + len_, kCapacity - len_, "%s\"truncated\":true", fields_ ? "," : "");
      truncated_ = true;
      return *this;
    }
    len_ += std::snprintf(buf_ + len_, kCapacity - len_, "%s\"%s\":%s", fields_ ? "," : "", key, value);
    ++fields_;
    return *this;
  }
  void finish() {
    if (finished_) return;
    len_ += std::snprintf(buf_ + len_, kCapacity - len_, "}}\n");
    finished_ = true;
  }

  char buf_[kCapacity];
  int len_ = 0;
  int fields_ = 0;
  bool finished_ = false;
  bool truncated_ = false;
};

// Opens an event log for appending (O_APPEND | O_CLOEXEC, created 0644). Returns -1 on failure.
// Never blocks: a job may have put a FIFO where its log goes (issue 44), whose open would wait for a reader
// in the shim's start-up for ever; O_NONBLOCK makes that fail (ENXIO) or, with a reader, go on, and keeps a
// write into a full pipe from stopping a hook (it fails instead: the line is lost, as the runner reads the
// file it made, Note [An event log replaced]). A regular file gets its blocking writes back.
inline int open_event_log(const char* path) {
  if (!path || !*path) return -1;
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
  struct stat st {};
  if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace oomh::events
