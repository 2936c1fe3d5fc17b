#pragma once
// Views of a trace in the words the checks use: the steps each attempt completed, the out-of-memory
// errors the training code saw, the faults the shim injected. Every check reads the trace through these,
// so that the two ways a job reports steps and the three ways an OOM shows up are merged in one place.
//
// Note [Two sources of steps]
// A job reports its steps either through a probe (`step` events, src "probe") or, without a probe, through
// the suite's `observe:` regexes (src "runner", kind "observed", key "step"/"batch_size"/"loss"/...).
// Observed values of one output line arrive as several events sharing that line; they are grouped back
// into one step. When an attempt has probe steps they win, and observed values only fill fields the probe
// left out for the same step number.
//
// Note [OOMs the code saw]
// An OOM counts as seen by the training code when a probe reported it (`oom`, caught or not), or when the
// attempt ended by it (Attempt::ended_by_oom, e.g. a job without a probe that died printing
// "CUDA out of memory" after a refusal of the shim it never got past), or when its output carried an OOM
// message, read by an `observe:` key `oom`, after a refusal of the shim and before the refused step completed
// (a job without a probe that caught it and said so). Output alone never counts
// (Note [An OOM is an event] in trace.cpp): a job whose cap was never reached and that died of an unrelated
// error mentioning memory saw no OOM. Shim `inject` events alone do not count either: PyTorch's caching
// allocator retries a failed allocation once after freeing its cache, so one injected failure is usually
// absorbed before the code sees anything.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/policies/trace.h"

namespace oomh::view {

// Note [A step is its data] (python/oomharness/probe/digests.py): what the training forwards of a step (or, at
// an OOM, those since the last step) trained on, as the probe fingerprinted it: the samples, a digest that
// is the sum of one hash per sample (so that pieces add up to the whole) or, on a GPU, of the batch as a
// whole, and the first input's shape with its batch dimension and how that was found.
struct BatchData {
  int64_t samples = -1;          // -1: not reported
  uint64_t digest = 0;
  bool per_sample = false;       // the digests of a batch's pieces add up to the batch's
  std::vector<int64_t> shape;    // the first input's shape
  int dim = -1;                  // its batch dimension
  std::string from;              // how the dimension was found: loader, rnn, change, guess
  std::string loader;            // the DataLoader's indices: "160-191"
  std::vector<uint64_t> parts;   // each training forward's digest, when there were several (accumulation)
  // Note [Distinct samples] (python/oomharness/probe/batches.py): how many of `samples` differ in content,
  // -1: not reported (older probes, a GPU batch read as a whole).
  int64_t distinct = -1;
  bool whole = true;             // every value of each sample was hashed (Note [A sample is all its values])
  bool known() const { return samples > 0; }
  bool same(const BatchData& o) const { return known() && o.known() && samples == o.samples && digest == o.digest; }
  // "the batch of samples 160-191" / "a batch of 32 samples (fingerprint 1a2b3c4d)"
  std::string text() const;
};
BatchData batch_data(const Event& e);  // the event's `data` field

struct StepPoint {
  int attempt = 0;
  double t = 0;
  int64_t step = 0;
  int64_t batch = -1;        // -1: not reported
  std::string batch_from;    // the probe's `batch_from`: "inputs", "loader" (inferred), "code"; empty: unknown
  int64_t allocated = -1;    // bytes, -1: not reported
  int64_t reserved = -1;
  std::map<std::string, double> metrics;  // "loss" and any other numeric value reported with the step
  BatchData data;            // what it trained on (probe steps only)
};

struct OomPoint {
  int attempt = 0;
  double t = 0;
  int64_t step = -1;         // the step in progress, -1: unknown
  int64_t batch = -1;        // its batch size, -1: unknown
  std::string batch_from;    // as StepPoint::batch_from
  bool caught = false;       // the code caught it and went on
  bool from_probe = false;   // a probe `oom` event (else deduced from the attempt's end or output)
  std::string phase;         // empty: unknown
  BatchData data;            // what the failed step was training on (probe OOMs only)
  std::string kind;          // its row of the OOM table (oom_kinds.h), from the probe; empty: unknown
  std::string exception;     // the type it reached the code as ("OutOfMemoryError", "RuntimeError")
  std::string message;       // the probe's message
  // Note [Which errors are OOMs]: an OOM that reached the code as another error than OutOfMemoryError (a
  // cuBLAS handle, CUDA's code inside AcceleratorError); unknown kinds count as OutOfMemoryError.
  bool as_other_error() const;
};
// Whether a batch size was inferred by the probe rather than reported by the code (Note [The batch the code
// did not report] in python/oomharness/probe/batches.py).
inline bool batch_inferred(const std::string& from) { return from == "inputs" || from == "loader"; }

// Whether the steps `after` (in order, each completed after an OOM) trained on `failed` again: the first
// one's data equals it or holds each of its forwards, alone or as the sum of a run of the step's forwards (a
// step of several forwards redone whole, a piece that failed redone in smaller pieces), or, with per-sample digests, the data of the first k steps add up to it (a batch
// redone in pieces). The number of steps that did; 0 when they did not (the samples reached the failed
// count without adding up, or the steps ran out first); nullopt when the data cannot tell (the OOM or a
// step has no data).
std::optional<size_t> redone_by(const BatchData& failed, const std::vector<const StepPoint*>& after);

// The steps an attempt completed, in time order.
std::vector<StepPoint> steps_of(const Attempt& attempt);
// The steps one rank of a distributed attempt completed (Note [Ranks] in trace.h), in time order.
std::vector<StepPoint> steps_of_rank(const Attempt& attempt, int rank);
// The OOMs the code saw in an attempt, in time order (Note [OOMs the code saw]).
std::vector<OomPoint> ooms_of(const Attempt& attempt);
std::vector<OomPoint> ooms_of(const Trace& trace);
// The shim's `inject` events of an attempt / of the whole trace.
std::vector<const Event*> injections_of(const Attempt& attempt);
size_t injection_count(const Trace& trace);

// The highest step an attempt reached; nullopt when it reported none.
std::optional<int64_t> highest_step(const std::vector<StepPoint>& steps);
// The last step completed at or before `t`; nullptr when none.
const StepPoint* step_before(const std::vector<StepPoint>& steps, double t);
// The first step completed after `t`; nullptr when none.
const StepPoint* step_after(const std::vector<StepPoint>& steps, double t);

// Held bytes at each step: the step's `allocated`, else the control-block samples nearest in time
// (summed over devices, within a second; Attempt::samples must be in time order). -1 when neither is known.
int64_t held_at(const Attempt& attempt, const StepPoint& step);

// Note [Measuring a leak] (checks_memory.cpp): the least-squares slope of held bytes against the step
// number, leaving out the first two steps; nullopt with fewer than three points left. Beside the slope, the
// lowest held bytes in each third of the fitted steps: whether the growth persists (Note [A leak is a trend]).
struct Growth {
  int attempt = 0;
  double slope = 0;          // bytes per step
  int64_t from = 0, to = 0;  // the steps fitted
  double t = 0;              // the last one's time
  double base = 0;           // the fitted held bytes at `from`: what the steps held at the fit's start
  bool thirds = false;       // the lows below are known (three or more fitted steps were kept)
  double low[3] = {0, 0, 0}; // the lowest held bytes in the first, middle and last third of the fitted steps
};
inline constexpr size_t kGrowthWarmUpSteps = 2;
inline constexpr size_t kGrowthMinSteps = kGrowthWarmUpSteps + 3;
// For an attempt whose event log was thinned, the fit folded from every step (Note [Thinned event logs] in
// event_log_reader.cpp); nullopt too when that fold cannot give it (growth_unjudged).
std::optional<Growth> held_growth(const Attempt& attempt);

// Note [A leak is a trend] (checks_memory.cpp): whether a Growth is a leak, judged by its persistence and
// its share of the memory the steps hold, extrapolated to the job's length or to its cap; or, when the user
// gave one, by an absolute limit per step. memory_stable and the kept_with_graph finding read this one rule.
inline constexpr double kLeakShare = 0.1;        // growth by the horizon, as a share of the held bytes: a leak
inline constexpr double kLeakGranule = 512;      // PyTorch rounds blocks to 512 bytes: less is no growth
// Growth that does not add up to one of PyTorch's 2 MiB segments by the horizon cannot run a device out of
// memory: a job that holds 76 KiB and grows 12 KiB is no leak, whatever its share (an emulated trainer's
// golden run was one, a false red).
inline constexpr double kLeakFloor = 2.0 * 1024 * 1024;
struct LeakRule {
  std::optional<double> limit;  // a user's absolute limit in bytes per step (growth_per_step); unset: the trend
  double share = kLeakShare;
  int64_t horizon = -1;         // the step to extrapolate to (the job's length); -1: the fitted steps' last
  uint64_t cap = 0;             // the job's cap on device 0; 0: none
};
struct LeakJudgement {
  bool leak = false;
  bool steady = false;          // growth in every third of the fitted steps, not slowing to half (persistence)
  double base = 0;              // held at the fit's start: the first third's lowest
  int64_t horizon = 0;          // the step extrapolated to
  double grown = 0;             // growth from the fit's first step to `horizon` at the fitted rate
  int64_t cap_step = -1;        // the step at which the cap would be reached by `horizon`; -1: not by then
};
LeakJudgement judge_leak(const Growth& growth, const LeakRule& rule);
// The rule for a trace: its cap (plan_seen) and, unless `steps` is given, the job's target step as the horizon.
LeakRule leak_rule(const Trace& trace, std::optional<double> limit, double share = kLeakShare, int64_t steps = -1);

// What the reader folded from every line when it dropped some of the attempt's steps; nullptr otherwise.
const LogFold* steps_thinned(const Attempt& attempt);
// Whether the attempt's growth cannot be judged: steps were thinned and some had no `allocated` (their held
// bytes come from samples the fold did not see), or the attempt merges several ranks' logs.
bool growth_unjudged(const Attempt& attempt);
// The probe's `memory_breakdown` events of an attempt taken `at` "oom" or "peak", in time order.
std::vector<const Event*> breakdowns_of(const Attempt& attempt, const std::string& at);

// The last training phase known at or before `t`: from `phase`, `oom` and `inject` events.
std::string phase_at(const Attempt& attempt, double t);

// Messages: "95s", "250ms", "1.5s".
std::string seconds_text(double seconds);
// "attempt 2" (1-based, as users count): the trace model's words (trace.h).
using oomh::attempt_name;
// "step 5" or "an unknown step".
std::string step_text(int64_t step);

// Did the attempt end normally (exited by itself with code 0)?
bool ended_normally(const Attempt& attempt);
// "exited with code 1", "was killed by signal 9 (SIGKILL)", "timed out", ...
std::string end_text(const Attempt& attempt);

}  // namespace oomh::view

namespace oomh::view {
// Note [Absorbed faults]: the sentence for a trace whose injected faults never reached the code.
std::string absorbed_reason(size_t injected);

// What the job's shims were given, from their `shim_start` events (rules, cap on device 0) and the
// control-block samples (cap, peak): so that a message about a job with only a cap speaks of the cap, not
// of a fault plan it never had.
struct PlanSeen {
  bool known = false;   // some shim said what it was given
  uint64_t rules = 0;   // the most fault rules a shim was given
  uint64_t cap = 0;     // the cap on device 0 (the lowest seen, 0: none)
  uint64_t peak = 0;    // the highest held (peak) the samples saw, 0: none sampled
};
PlanSeen plan_seen(const Trace& trace);
// "the job has no fault rules and never reached its cap of 8.00 GiB (it held 3.00 GiB at most): lower the cap,
// or add a fault rule": what a job with only a cap is told when nothing was refused.
std::string cap_never_reached(const PlanSeen& plan);
// What each step rule met in its window, from the shims' `rule_seen` events summed over the job's processes
// and attempts (Note [Where a step fault fires] in injector/engine/fault_plan.h), in the order they came.
struct RuleSeen {
  std::string rule;
  std::string layer;        // where the rule was asked: driver, allocator, probe
  int64_t triggers = 0;
  int64_t driver_calls = 0;
  int64_t requests = 0;
};
std::vector<RuleSeen> rules_seen(const Trace& trace);
// Why no fault was injected though the plan has rules: what the step rules that never fired met in their
// window, the last step the job reached, and what would make them fire; "" when the trace cannot tell.
std::string unfired_reason(const Trace& trace);
// The sentence for a trace with no OOM recorded and no fault injected (Note [An OOM is an event] in
// trace.cpp): "no out-of-memory error happened: nothing to recover from", and why, when the trace tells.
std::string nothing_happened_reason(const Trace& trace);
}  // namespace oomh::view
