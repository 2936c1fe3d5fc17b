// Trace + verdicts -> JobResult: the facts the reports show, derived once, here.

#include "oomharness/runner/results_builder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "oomharness/events.h"
#include "oomharness/reports/tracebacks.h"
#include "oomharness/units.h"

namespace oomh {

namespace {

// A job writes its own divergence events: a hostile one cannot grow the results past this many.
constexpr size_t kMaxDivergences = 32;

bool is_probe(const Event& e, const char* kind) { return e.src == events::kSrcProbe && e.kind == kind; }

int64_t step_of(const Event& e) { return completed_step(e); }  // the trace model's rule

std::string step_text(int64_t step) { return step >= 0 ? " at step " + std::to_string(step) : std::string(); }

}  // namespace

namespace {

JobStatus status_from_verdicts(const JobOutcome& outcome, const std::vector<Verdict>& verdicts) {
  if (!outcome.error.empty()) return JobStatus::error;
  if (outcome.interrupted) return JobStatus::interrupted;
  if (verdicts.empty()) {
    // No checks asked for: the job is an ordinary test, and its last attempt's exit decides.
    const auto& attempts = outcome.trace.attempts;
    if (attempts.empty()) return JobStatus::error;
    const Attempt& last = attempts.back();
    bool ok = last.end_kind == AttemptEnd::exited && last.exit_code && *last.exit_code == 0;
    return ok ? JobStatus::passed : JobStatus::failed;
  }
  bool inconclusive = false;
  for (const auto& v : verdicts) {
    if (against_expectation(v)) return JobStatus::failed;
    if (v.status == VerdictStatus::inconclusive) inconclusive = true;
  }
  return inconclusive ? JobStatus::inconclusive : JobStatus::passed;
}

}  // namespace

JobStatus job_status(const JobOutcome& outcome, const std::vector<Verdict>& verdicts, const StatusRules& rules) {
  JobStatus s = status_from_verdicts(outcome, verdicts);
  if (s == JobStatus::passed && rules.inconclusive) s = JobStatus::inconclusive;
  if (s == JobStatus::inconclusive && rules.strict) s = JobStatus::failed;
  return s;
}

static AttemptOutcome end_outcome(AttemptEnd end, const std::optional<int>& exit_code, bool by_oom) {
  switch (end) {
    case AttemptEnd::failed_to_start: return AttemptOutcome::failed_to_start;
    case AttemptEnd::interrupted: return AttemptOutcome::interrupted;
    case AttemptEnd::timed_out: return AttemptOutcome::timeout;
    case AttemptEnd::signalled: return by_oom ? AttemptOutcome::oom : AttemptOutcome::signal;
    case AttemptEnd::exited: break;
  }
  if (exit_code && *exit_code == 0) return AttemptOutcome::ok;
  return by_oom ? AttemptOutcome::oom : AttemptOutcome::nonzero;
}

AttemptOutcome attempt_outcome(const Attempt& a) { return end_outcome(a.end_kind, a.exit_code, a.ended_by_oom()); }

// Which injected faults the code saw: Note [Visible faults] in policies/src/trace.cpp.
std::vector<FaultRecord> fault_records(const Trace& trace, double job_start) {
  std::vector<FaultRecord> out;
  for (const Attempt& a : trace.attempts) {
    for (const InjectedFault& injected : a.injected_faults()) {
      const Event& e = *injected.event;
      FaultRecord f;
      f.attempt = a.index;
      f.t = e.t - job_start;
      f.rule = e.text("rule", e.text("reason") == "cap" ? "cap" : "");
      f.entry = e.text("entry");
      f.size = static_cast<uint64_t>(std::max<int64_t>(0, e.integer("size", 0)));
      f.device = static_cast<int>(e.integer("device", 0));
      f.step = e.integer("step", -1);
      f.phase = e.text("phase");
      f.visible = injected.visible;
      f.layer = e.text("layer", "driver");  // logs written before layers had none: the driver's
      out.push_back(std::move(f));
    }
  }
  return out;
}

std::map<int, std::vector<TimelinePoint>> rank_timeline(const Trace& trace, double job_start, size_t max_points) {
  // One sample tick of a rank reads all its devices at one t: those are summed into one point.
  std::map<int, std::map<double, TimelinePoint>> per_rank;
  for (const Attempt& a : trace.attempts)
    for (const MemorySample& s : a.samples) {
      if (s.rank < 0) continue;
      TimelinePoint& p = per_rank[s.rank][s.t];
      p.t = s.t - job_start;
      p.held += s.held;
      p.cap = std::max(p.cap, s.cap);
      p.step = s.step;
    }
  std::map<int, std::vector<TimelinePoint>> out;
  if (max_points == 0) return out;
  for (auto& [rank, by_t] : per_rank) {
    std::vector<TimelinePoint> points;
    for (auto& [t, p] : by_t) points.push_back(p);
    out[rank] = downsample_timeline(points, max_points);
  }
  return out;
}

std::map<int, std::vector<TimelinePoint>> memory_timeline(const Trace& trace, double job_start, size_t max_points) {
  std::map<int, std::vector<const MemorySample*>> per_device;
  for (const Attempt& a : trace.attempts)
    for (const MemorySample& s : a.samples) per_device[s.device].push_back(&s);
  std::map<int, std::vector<TimelinePoint>> out;
  if (max_points == 0) return out;
  for (auto& [device, samples] : per_device) {
    std::stable_sort(samples.begin(), samples.end(), [](const MemorySample* x, const MemorySample* y) { return x->t < y->t; });
    auto point = [&](const MemorySample* s) { return TimelinePoint{s->t - job_start, s->held, s->cap, s->step}; };
    std::vector<TimelinePoint> points;
    for (const auto* sample : samples) points.push_back(point(sample));
    // reports' downsampling keeps each bucket's lowest and highest point: a chart of memory must never
    // hide a peak (the moment an OOM is about).
    out[device] = downsample_timeline(points, max_points);
  }
  return out;
}

namespace {

std::map<int, uint64_t> peaks(const Trace& trace) {
  std::map<int, uint64_t> out;
  for (const Attempt& a : trace.attempts) {
    for (const MemorySample& s : a.samples) {
      uint64_t& p = out[s.device];
      p = std::max({p, s.peak, s.held});
    }
    // The shim's own count at exit is exact; samples every 50 ms can miss a short peak.
    for (const Event& e : a.events) {
      if (e.src != events::kSrcShim || e.kind != events::kShimExit || !e.has("peak")) continue;
      uint64_t& p = out[static_cast<int>(e.integer("device", 0))];
      p = std::max(p, static_cast<uint64_t>(std::max<int64_t>(0, e.integer("peak", 0))));
    }
  }
  return out;
}

constexpr size_t kMaxMarkersPerKind = 200;

std::vector<Marker> markers(const Trace& trace, double job_start) {
  std::map<std::string, std::vector<Marker>> by_kind;
  for (const Attempt& a : trace.attempts) {
    if (a.index > 0) by_kind["restart"].push_back({a.start - job_start, a.index, "restart", "attempt " + std::to_string(a.index + 1) + " started", std::nullopt});
    for (const Event& e : a.events) {
      Marker m{e.t - job_start, a.index, "", "", std::nullopt};
      if (int rank = rank_of(e); rank >= 0) m.rank = rank;
      if (is_refusal(e)) {
        m.kind = "inject";
        std::string rule = e.text("rule", "cap");
        m.label = "fault '" + rule + "': " + format_bytes(static_cast<uint64_t>(std::max<int64_t>(0, e.integer("size", 0)))) +
                  " (" + e.text("entry", "alloc") + ")" + step_text(e.integer("step"));
      } else if (is_probe(e, events::kOom)) {
        m.kind = "oom";
        m.label = "OOM" + step_text(e.integer("step"));
        if (e.integer("batch_size") >= 0) m.label += " (batch " + std::to_string(e.integer("batch_size")) + ")";
        if (e.flag("caught")) m.label += ", caught";
      } else if (is_probe(e, events::kEmptyCache)) {
        m.kind = "empty_cache";
        m.label = "empty_cache";
        if (e.has("reserved_before") && e.has("reserved_after"))
          m.label += ": reserved " + format_bytes(static_cast<uint64_t>(std::max<int64_t>(0, e.integer("reserved_before")))) +
                     " -> " + format_bytes(static_cast<uint64_t>(std::max<int64_t>(0, e.integer("reserved_after"))));
      } else if (is_probe(e, events::kSave)) {
        m.kind = "checkpoint_save";
        m.label = "checkpoint saved" + step_text(e.integer("step"));
      } else if (is_probe(e, events::kLoad)) {
        m.kind = "checkpoint_load";
        m.label = "checkpoint loaded" + step_text(e.integer("step"));
      } else if (completes_a_step(e)) {
        m.kind = "step";
        m.label = "step " + std::to_string(step_of(e));
        if (e.integer("batch_size") >= 0) m.label += " (batch " + std::to_string(e.integer("batch_size")) + ")";
      } else {
        continue;
      }
      by_kind[m.kind].push_back(std::move(m));
    }
  }
  // A fault that lasts forever or a long training run would bury the chart: each kind keeps at most
  // kMaxMarkersPerKind markers, evenly spread, the first and the last included.
  std::vector<Marker> out;
  for (auto& [kind, list] : by_kind) {
    if (list.size() <= kMaxMarkersPerKind) {
      out.insert(out.end(), list.begin(), list.end());
      continue;
    }
    for (size_t i = 0; i < kMaxMarkersPerKind; ++i) out.push_back(list[i * (list.size() - 1) / (kMaxMarkersPerKind - 1)]);
  }
  std::stable_sort(out.begin(), out.end(), [](const Marker& x, const Marker& y) { return x.t < y.t; });
  return out;
}

std::string failure_sentence(const JobOutcome& outcome, const std::vector<Verdict>& verdicts, JobStatus status,
                             const StatusRules& rules) {
  if (rules.strict && status == JobStatus::failed) {
    StatusRules lenient = rules;
    lenient.strict = false;
    JobStatus plain = job_status(outcome, verdicts, lenient);
    if (plain == JobStatus::inconclusive)
      return "inconclusive, which --strict fails: " + failure_sentence(outcome, verdicts, plain, lenient);
  }
  if (status == JobStatus::error) return outcome.error;
  if (status == JobStatus::inconclusive && rules.inconclusive && status_from_verdicts(outcome, verdicts) == JobStatus::passed)
    return *rules.inconclusive;
  if (status == JobStatus::interrupted) {
    size_t n = outcome.trace.attempts.size();
    return "interrupted during attempt " + std::to_string(n == 0 ? 1 : n) + " (the run was stopped)";
  }
  for (const auto& v : verdicts) {
    if (!against_expectation(v)) continue;
    if (!v.must_fail) return v.reason;
    return v.policy + " must fail for this job (must_fail: true) but passed, so it did not catch what the job gets wrong: " +
           v.reason;
  }
  for (const auto& v : verdicts)
    if (v.status == VerdictStatus::inconclusive) return v.reason;
  if (status == JobStatus::failed && !outcome.trace.attempts.empty()) {
    const Attempt& last = outcome.trace.attempts.back();
    const AttemptOutcome o = attempt_outcome(last);
    std::string which = "attempt " + std::to_string(last.index + 1);
    if (o == AttemptOutcome::timeout) return which + " timed out";
    if (o == AttemptOutcome::signal && last.signal) return which + " was killed by signal " + std::to_string(*last.signal);
    if (o == AttemptOutcome::oom) return which + " died of an out-of-memory error";
    if (last.exit_code) return which + " exited with code " + std::to_string(*last.exit_code);
    return which + " failed (" + outcome_name(o) + ")";
  }
  return {};
}

}  // namespace

// Note [Recovery time]
// From the first OOM the training code saw (a probe `oom` event, or the end of an attempt that died of
// one) to the next completed step after it, possibly in a later attempt (checkpoint resume): how long
// training stood still because of the fault. Absent when no OOM was seen or training never went on.
// The breakdowns a report shows (Finding and breakdown fields: docs/diagnosis.md): every OOM's, up to
// kMaxBreakdowns in all, the last peak of each attempt, and its after-the-loop breakdown that left the most
// other tensors alive (Note [Kept after the loop] in policies/src/findings.cpp).
constexpr size_t kMaxBreakdowns = 16;

nlohmann::json breakdowns(const Trace& trace, double job_start) {
  nlohmann::json out = nlohmann::json::array();
  auto add = [&](const Attempt& a, const Event& e) {
    if (out.size() >= kMaxBreakdowns || !e.fields.is_object()) return;
    nlohmann::json b = e.fields;
    b["attempt"] = a.index;
    b["t"] = job_start > 0 && e.t >= job_start ? e.t - job_start : 0.0;
    out.push_back(std::move(b));
  };
  for (const Attempt& a : trace.attempts) {
    const Event* peak = nullptr;
    const Event* after_loop = nullptr;
    for (const Event& e : a.events) {
      if (!is_probe(e, events::kMemoryBreakdown)) continue;
      if (e.text("at") == "oom") add(a, e);
      else if (e.text("at") == "peak") peak = &e;
      else if (e.text("at") == "after_loop" &&
               (!after_loop || e.number("other") - e.number("inputs") >
                                   after_loop->number("other") - after_loop->number("inputs")))
        after_loop = &e;
    }
    if (peak) add(a, *peak);
    if (after_loop) add(a, *after_loop);
  }
  return out;
}

// Note [The cap, visible]
// Picking a cap was trial and error (issue 29): a job under 8 GiB fails, and only a report shows that the
// modelled cuBLAS workspaces or Adam's state had taken most of it before the first batch. So the results say,
// for a job with a cap, what the part no batch size changes took at its first step (the probe's breakdowns of
// that step: parameters, gradients, optimizer state, workspaces; the largest of them, since gradients and
// optimizer state appear only in the step's backward and optimizer phases) and what the cap left for the
// batch. The cap is the one the shim accepted (its shim_start event); a job without the probe's breakdowns
// says only the cap. The library handles the cap counts (cuBLAS's, 64 MiB a thread, outside the caching
// allocator) are part of the fixed part where the trace shows them (the virtual device's library_alloc
// events); on a GPU the probe does not see them, and the sentence does not name them.
std::optional<std::string> cap_use(const Trace& trace) {
  uint64_t cap = 0;
  const Event* best = nullptr;
  double best_fixed = -1;
  double handles = 0;
  int64_t first_step = INT64_MAX;
  for (const Attempt& a : trace.attempts) {
    handles = 0;
    for (const Event& e : a.events) {
      if (is_probe(e, events::kLibraryAlloc) && e.flag("counted", true)) handles += e.number("bytes");
      if (e.src == events::kSrcShim && e.kind == events::kShimStart && cap == 0 && e.integer("cap", 0) > 0)
        cap = static_cast<uint64_t>(e.integer("cap", 0));
      if (!is_probe(e, events::kMemoryBreakdown) || !e.has("step")) continue;
      const int64_t step = e.integer("step", INT64_MAX);
      double fixed = e.number("parameters") + e.number("gradients") + e.number("optimizer_state") + e.number("workspace");
      if (step < first_step || (step == first_step && fixed > best_fixed)) {
        first_step = step;
        best = &e;
        best_fixed = fixed;
      }
    }
    if (best) break;  // the first attempt that reached a step
  }
  if (cap == 0) return std::nullopt;
  std::string out = "cap " + format_bytes(cap);
  if (!best) return out + ": no memory breakdown was recorded (no probe, or no step began), so what it left for the batch is unknown";
  const auto bytes = [&](const char* key) { return format_bytes_figure(best->number(key)); };
  const double fixed = best_fixed + handles, room = static_cast<double>(cap);
  out += ": at step " + std::to_string(first_step) + " (counted from " + std::to_string(trace.step_base) + ") the fixed part took " + format_bytes_figure(fixed) +
         " (parameters " + bytes("parameters") + ", gradients " + bytes("gradients") + ", optimizer state " +
         bytes("optimizer_state") + ", workspaces " + bytes("workspace") +
         (handles > 0 ? ", cuBLAS handles " + format_bytes_figure(handles) : std::string()) + "), ";
  if (fixed >= room) return out + "more than the cap by " + format_bytes_figure(fixed - room) + ": nothing was left for the batch";
  return out + "leaving " + format_bytes_figure(room - fixed) + " for the batch (activations and the rest)";
}

std::optional<double> recovery_seconds(const Trace& trace) {
  std::optional<double> first_oom;
  for (const Attempt& a : trace.attempts) {
    for (const Event& e : a.events)
      if (is_probe(e, events::kOom) && (!first_oom || e.t < *first_oom)) first_oom = e.t;
    if (a.ended_by_oom() && (!first_oom || a.end < *first_oom)) first_oom = a.end;
  }
  if (!first_oom) return std::nullopt;
  std::optional<double> next_step;
  for (const Attempt& a : trace.attempts)
    for (const Event& e : a.events)
      if (completes_a_step(e) && e.t > *first_oom && (!next_step || e.t < *next_step)) next_step = e.t;
  if (!next_step) return std::nullopt;
  return *next_step - *first_oom;
}

JobResult build_job_result(const std::string& display_name, const JobOutcome& outcome, std::vector<Verdict> verdicts,
                           const StatusRules& rules) {
  const Trace& trace = outcome.trace;
  JobResult r;
  r.name = display_name;
  r.status = job_status(outcome, verdicts, rules);
  r.message = failure_sentence(outcome, verdicts, r.status, rules);
  double job_start = outcome.start;
  if (job_start <= 0 && !trace.attempts.empty()) job_start = trace.attempts.front().start;
  r.start = job_start;
  r.duration = outcome.end > job_start ? outcome.end - job_start : 0;
  r.command = outcome.argv;
  r.gpu = outcome.gpu;
  r.gpus = outcome.gpus;
  // Warnings in a job's results, the terminal and every report: a cut log or skipped event lines must not
  // be findable only in the trace. The same warning from many processes is said once.
  size_t more_warnings = 0;
  auto warn = [&](std::string w) {
    if (std::find(r.warnings.begin(), r.warnings.end(), w) != r.warnings.end()) return;
    if (r.warnings.size() + 1 < kMaxWarnings) r.warnings.push_back(std::move(w));
    else ++more_warnings;
  };
  for (const Attempt& a : trace.attempts) {
    AttemptResult ar;
    ar.index = a.index;
    ar.start = a.start - job_start;
    ar.duration = a.duration();
    ar.outcome = attempt_outcome(a);
    ar.exit_code = a.exit_code;
    ar.signal = a.signal;
    ar.faults_enabled = a.faults_enabled;
    for (const Event& e : a.events)
      if (completes_a_step(e)) ar.last_step = std::max(ar.last_step, step_of(e));
    ar.output_tail = fold_harness_frames(a.output_tail);  // Note [The user's traceback]
    ar.log_path = a.log_path;
    for (const RankEnd& re : a.ranks)
      ar.ranks.push_back({re.rank, end_outcome(re.end_kind, re.exit_code, re.ended_by_oom), re.exit_code, re.signal,
                          re.last_step, re.log_path, re.stacks});
    r.attempts.push_back(std::move(ar));
    for (const Event& e : a.events) {
      if (is_probe(e, events::kSnapshot) && e.has("path")) r.snapshot = e.text("path");
      // Note [Saying what was simulated]: the device says so itself when it starts, and names what it saw.
      if (is_probe(e, events::kVirtualDevice) && !r.virtual_device)
        r.virtual_device = e.has("description") ? e.text("description") : std::string("virtual CUDA device");
      if (is_probe(e, events::kDivergence) && e.has("kind") && r.divergences.size() < kMaxDivergences)
        r.divergences.try_emplace(e.text("kind"), e.text("detail"));
      if (e.kind == events::kWarning && e.has("message")) warn(attempt_name(a.index) + ": " + one_line(e.text("message")));
    }
  }
  if (more_warnings > 0) r.warnings.push_back(std::to_string(more_warnings) + " more warning(s) are in the attempts' event logs");
  r.verdicts = std::move(verdicts);
  // Policies cite trace events at their wall-clock time; like every other time in a result, evidence is
  // given in seconds since the job started.
  for (Verdict& v : r.verdicts)
    for (Evidence& e : v.evidence)
      if (job_start > 0 && e.t >= job_start) e.t -= job_start;
  r.faults = fault_records(trace, job_start);
  r.timeline = memory_timeline(trace, job_start);
  r.rank_timeline = rank_timeline(trace, job_start);
  r.peak = peaks(trace);
  r.markers = markers(trace, job_start);
  r.recovery_seconds = recovery_seconds(trace);
  r.findings = diagnose(trace);
  for (Finding& f : r.findings)
    if (job_start > 0 && f.t >= job_start) f.t -= job_start;
  r.breakdowns = breakdowns(trace, job_start);
  r.cap_use = cap_use(trace);
  r.step_base = trace.step_base;
  r.target_step = trace.target_step;
  return r;
}

ExitCode run_exit_code(const RunResult& run) {
  bool failed = false, interrupted = run.interrupted;
  for (const auto& suite : run.suites)
    for (const auto& job : suite.jobs) {
      if (job.status == JobStatus::interrupted) interrupted = true;
      if (job.status == JobStatus::failed || job.status == JobStatus::error) failed = true;
    }
  if (interrupted) return ExitCode::interrupted;
  if (failed) return ExitCode::tests_failed;
  return run.nothing_tested() ? ExitCode::nothing_tested : ExitCode::ok;
}

}  // namespace oomh
