#pragma once
// From what the job runner observed (a Trace, in a JobOutcome) and what the policies concluded (verdicts)
// to the result model the reports read (reports/result.h). Pure functions: tests feed them hand-made
// traces. runner/src/app/results_builder.cpp explains each rule where it is applied.

#include <optional>
#include <string>
#include <vector>

#include "oomharness/policies/trace.h"
#include "oomharness/policies/verdict.h"
#include "oomharness/reports/result.h"
#include "oomharness/runner/app.h"
#include "oomharness/runner/job_runner.h"

namespace oomh {

// What decides a status beside the trace and the verdicts.
struct StatusRules {
  // Note [Green means tested] (untested.h): why the job was not tested, when it would otherwise pass.
  std::optional<std::string> inconclusive;
  bool strict = false;  // --strict: an inconclusive job fails
};

// A job's status: runner error -> error; interrupted -> interrupted; any failing verdict -> failed; every
// verdict passed -> passed; no failure but an inconclusive verdict -> inconclusive. A job with no
// verdicts passes when its last attempt exited 0, and fails otherwise. A job that would pass but was not
// tested (rules.inconclusive) is inconclusive; under rules.strict an inconclusive job fails.
JobStatus job_status(const JobOutcome& outcome, const std::vector<Verdict>& verdicts, const StatusRules& rules = {});

// How the attempt ended (kAttemptOutcomes in oomharness/reports/result.h).
AttemptOutcome attempt_outcome(const Attempt& attempt);

// The fault records of a trace, with `visible` set by the rule in results_builder.cpp (Note [Visible faults]).
std::vector<FaultRecord> fault_records(const Trace& trace, double job_start);

// The memory timeline per device, at most `max_points` points per device, keeping every peak.
std::map<int, std::vector<TimelinePoint>> memory_timeline(const Trace& trace, double job_start,
                                                          size_t max_points = kTimelinePoints);

// A job with ranks: the memory timeline per rank (the rank's devices summed at each sample, its largest
// cap), at most `max_points` per rank; empty when no sample carries a rank.
std::map<int, std::vector<TimelinePoint>> rank_timeline(const Trace& trace, double job_start,
                                                        size_t max_points = kTimelinePoints);

// Seconds from the first OOM the training code saw to the next completed step, in any later attempt.
std::optional<double> recovery_seconds(const Trace& trace);

// The whole JobResult. `display_name` is the job's name in its suite.
JobResult build_job_result(const std::string& display_name, const JobOutcome& outcome, std::vector<Verdict> verdicts,
                           const StatusRules& rules = {});

// The run's exit code from its results, as pytest's: interrupted -> 2; a failed or errored job -> 1;
// nothing tested (no job, or no job passed or failed: every one inconclusive or skipped) -> 5; else 0
// (inconclusive and skipped jobs beside a passing one do not fail a run; --strict fails them).
ExitCode run_exit_code(const RunResult& run);

}  // namespace oomh
