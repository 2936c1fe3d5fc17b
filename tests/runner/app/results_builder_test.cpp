// Results building from hand-made traces: statuses, attempt outcomes, visible faults, timeline, markers,
// peaks, recovery time, exit codes.

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>

#include "oomharness/control_block.h"
#include "oomharness/events.h"
#include "oomharness/runner/results_builder.h"
#include "oomharness/runner/untested.h"

namespace oomh {
namespace {

constexpr double kT0 = 1000.0;  // the job's start, wall clock

Event ev(double t, const char* src, const char* kind, nlohmann::json fields = nlohmann::json::object()) {
  Event e;
  e.t = kT0 + t;
  e.pid = 42;
  e.src = src;
  e.kind = kind;
  e.fields = std::move(fields);
  return e;
}
Event step(double t, int64_t s, int64_t batch = 32) { return ev(t, "probe", "step", {{"step", s}, {"batch_size", batch}}); }
Event inject(double t, int64_t s, const char* rule = "oom-at-3") {
  return ev(t, "shim", "inject", {{"entry", "cuMemAlloc_v2"}, {"size", 1 << 20}, {"device", 0}, {"rule", rule}, {"reason", "rule"}, {"step", s}, {"phase", "forward"}});
}
Event oom(double t, int64_t s, bool caught) {
  return ev(t, "probe", "oom", {{"step", s}, {"batch_size", 32}, {"message", "CUDA out of memory"}, {"caught", caught}});
}

Attempt attempt(int index, double start, double end, std::optional<int> code, std::vector<Event> events) {
  Attempt a;
  a.index = index;
  a.start = kT0 + start;
  a.end = kT0 + end;
  a.end_kind = AttemptEnd::exited;
  a.exit_code = code;
  a.events = std::move(events);
  std::stable_sort(a.events.begin(), a.events.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
  return a;
}

JobOutcome outcome(std::vector<Attempt> attempts) {
  JobOutcome o;
  o.trace.job = "s::j";
  o.trace.attempts = std::move(attempts);
  o.start = kT0;
  o.end = o.trace.attempts.empty() ? kT0 : o.trace.attempts.back().end;
  o.argv = {"trainer", "--steps", "5"};
  return o;
}

Verdict verdict(VerdictStatus s, const std::string& reason, const char* policy = "batch_halving") {
  Verdict v;
  v.policy = policy;
  v.status = s;
  v.reason = reason;
  return v;
}

TEST(JobStatusTest, FromVerdicts) {
  JobOutcome o = outcome({attempt(0, 0, 1, 0, {})});
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::pass, "ok"), verdict(VerdictStatus::pass, "ok")}), JobStatus::passed);
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::pass, "ok"), verdict(VerdictStatus::fail, "no")}), JobStatus::failed);
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::inconclusive, "?"), verdict(VerdictStatus::pass, "ok")}), JobStatus::inconclusive);
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::inconclusive, "?"), verdict(VerdictStatus::fail, "no")}), JobStatus::failed);
}

// A broken trainer kept to show a check catches it: the check failing is the expected outcome.
TEST(JobStatusTest, MustFailChecksAreInverted) {
  JobOutcome o = outcome({attempt(0, 0, 1, 0, {})});
  Verdict caught = verdict(VerdictStatus::fail, "samples were dropped");
  caught.must_fail = true;
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::pass, "ok", "oom_visible"), caught}), JobStatus::passed);
  Verdict missed = verdict(VerdictStatus::pass, "the OOM was followed by a smaller batch (64 -> 32)");
  missed.must_fail = true;
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::pass, "ok", "oom_visible"), missed}), JobStatus::failed);
  JobResult r = build_job_result("broken", o, {missed});
  EXPECT_EQ(r.message, "batch_halving must fail for this job (must_fail: true) but passed, so it did not catch what the "
                       "job gets wrong: the OOM was followed by a smaller batch (64 -> 32)");
  Verdict unsure = verdict(VerdictStatus::inconclusive, "absorbed");
  unsure.must_fail = true;
  EXPECT_EQ(job_status(o, {unsure}), JobStatus::inconclusive);
}

TEST(JobStatusTest, ErrorAndInterruptionWin) {
  JobOutcome o = outcome({attempt(0, 0, 1, 0, {})});
  o.error = "could not start 'trainer': No such file or directory";
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::pass, "ok")}), JobStatus::error);
  JobOutcome i = outcome({attempt(0, 0, 1, 0, {})});
  i.interrupted = true;
  EXPECT_EQ(job_status(i, {verdict(VerdictStatus::pass, "ok")}), JobStatus::interrupted);
}

TEST(JobStatusTest, WithoutVerdictsTheLastExitDecides) {
  EXPECT_EQ(job_status(outcome({attempt(0, 0, 1, 1, {}), attempt(1, 1, 2, 0, {})}), {}), JobStatus::passed);
  EXPECT_EQ(job_status(outcome({attempt(0, 0, 1, 0, {}), attempt(1, 1, 2, 3, {})}), {}), JobStatus::failed);
  EXPECT_EQ(job_status(outcome({}), {}), JobStatus::error);
}

TEST(AttemptOutcome, Strings) {
  Attempt a = attempt(0, 0, 1, 0, {});
  EXPECT_EQ(outcome_name(attempt_outcome(a)), "ok");
  a.exit_code = 1;
  EXPECT_EQ(outcome_name(attempt_outcome(a)), "nonzero");
  a.oom_message = true;  // issue 26: a message alone is no OOM the trace records (Note [An OOM is an event])
  EXPECT_EQ(outcome_name(attempt_outcome(a)), "nonzero");
  a.events = {inject(0.5, 3)};  // beside a refusal of the shim that no step got past, it is
  EXPECT_EQ(outcome_name(attempt_outcome(a)), "oom");
  Attempt s = attempt(0, 0, 1, std::nullopt, {});
  s.end_kind = AttemptEnd::signalled;
  s.signal = SIGSEGV;
  EXPECT_EQ(outcome_name(attempt_outcome(s)), "signal");
  s.signal = SIGABRT;
  s.events = {oom(0.5, 3, false)};  // an uncaught c10::OutOfMemoryError aborts
  EXPECT_EQ(outcome_name(attempt_outcome(s)), "oom");
  s.end_kind = AttemptEnd::timed_out;
  EXPECT_EQ(outcome_name(attempt_outcome(s)), "timeout");
  s.end_kind = AttemptEnd::interrupted;
  EXPECT_EQ(outcome_name(attempt_outcome(s)), "interrupted");
  s.end_kind = AttemptEnd::failed_to_start;
  EXPECT_EQ(outcome_name(attempt_outcome(s)), "failed_to_start");
}

TEST(FaultRecords, VisibleWhenAnOomFollowsBeforeTheNextStep) {
  // Two injects at step 3 (PyTorch absorbs the first, raises on the second), then the probe's OOM.
  Trace t = outcome({attempt(0, 0, 5, 0,
                             {step(1, 2), inject(1.1, 3), inject(1.2, 3), oom(1.3, 3, true), step(1.5, 3, 16)})}).trace;
  auto faults = fault_records(t, kT0);
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_TRUE(faults[0].visible);
  EXPECT_TRUE(faults[1].visible);
  EXPECT_EQ(faults[0].rule, "oom-at-3");
  EXPECT_EQ(faults[0].entry, "cuMemAlloc_v2");
  EXPECT_EQ(faults[0].size, 1u << 20);
  EXPECT_EQ(faults[0].step, 3);
  EXPECT_EQ(faults[0].phase, "forward");
  EXPECT_NEAR(faults[0].t, 1.1, 1e-9);
}

TEST(FaultRecords, AbsorbedWhenAStepCompletesFirst) {
  Trace t = outcome({attempt(0, 0, 5, 0, {inject(1.0, 3), step(1.2, 3), oom(2.0, 4, true), step(2.5, 4)})}).trace;
  auto faults = fault_records(t, kT0);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_FALSE(faults[0].visible);
}

TEST(FaultRecords, VisibleWhenTheAttemptDiesOfTheOom) {
  Attempt died = attempt(0, 0, 2, 1, {step(1, 2), inject(1.5, 3)});
  died.oom_message = true;  // the runner saw "CUDA out of memory" in its output
  Attempt next = attempt(1, 2, 4, 0, {step(3, 3)});
  auto faults = fault_records(outcome({died, next}).trace, kT0);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_TRUE(faults[0].visible);
  EXPECT_EQ(faults[0].attempt, 0);
}

TEST(FaultRecords, NotVisibleWhenTheAttemptEndsOtherwise) {
  // The attempt exits 0 after the inject with no step and no OOM: nothing reached the code.
  auto faults = fault_records(outcome({attempt(0, 0, 2, 0, {inject(1.5, 3)})}).trace, kT0);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_FALSE(faults[0].visible);
}

TEST(RecoverySeconds, FromFirstVisibleOomToNextStep) {
  Trace t = outcome({attempt(0, 0, 5, 0, {step(1, 2), inject(1.1, 3), oom(1.25, 3, true), step(2.0, 3, 16)})}).trace;
  auto r = recovery_seconds(t);
  ASSERT_TRUE(r);
  EXPECT_NEAR(*r, 0.75, 1e-6);
}

TEST(RecoverySeconds, AcrossARestart) {
  Attempt died = attempt(0, 0, 2, 1, {step(1, 2), inject(1.5, 3)});
  died.oom_message = true;
  Attempt next = attempt(1, 2.5, 6, 0, {step(5, 3)});
  auto r = recovery_seconds(outcome({died, next}).trace);
  ASSERT_TRUE(r);
  EXPECT_NEAR(*r, 3.0, 1e-6);  // the death at t=2, the next step at t=5
}

TEST(RecoverySeconds, AbsentWithoutOomOrWithoutRecovery) {
  EXPECT_FALSE(recovery_seconds(outcome({attempt(0, 0, 5, 0, {step(1, 1), step(2, 2)})}).trace));
  EXPECT_FALSE(recovery_seconds(outcome({attempt(0, 0, 5, 1, {step(1, 1), oom(2, 2, false)})}).trace));
}

TEST(Timeline, DownsampledKeepingThePeakPerDevice) {
  Attempt a = attempt(0, 0, 100, 0, {});
  for (int i = 0; i < 5000; ++i) {
    MemorySample s;
    s.t = kT0 + i * 0.01;
    s.device = i % 2;
    s.held = static_cast<uint64_t>(i % 100) * 1000;
    if (i == 3001) s.held = 99'999'999;  // one short spike on device 1
    s.cap = 123;
    s.step = i / 100;
    a.samples.push_back(s);
  }
  auto timeline = memory_timeline(outcome({a}).trace, kT0, 100);
  ASSERT_EQ(timeline.size(), 2u);
  for (const auto& [device, points] : timeline) {
    EXPECT_LE(points.size(), 100u);
    EXPECT_GE(points.size(), 50u);
    for (size_t i = 1; i < points.size(); ++i) EXPECT_LE(points[i - 1].t, points[i].t);
  }
  uint64_t max1 = 0;
  for (const auto& p : timeline[1]) max1 = std::max(max1, p.held);
  EXPECT_EQ(max1, 99'999'999u);
  EXPECT_EQ(timeline[0].front().cap, 123u);
  EXPECT_NEAR(timeline[0].front().t, 0.0, 1e-9);
}

// Issue 15: one line per rank; a rank's devices read at one tick are summed; samples without a rank
// (a job without ranks) give none.
TEST(Timeline, PerRankSumsARanksDevicesAtEachTick) {
  Attempt a = attempt(0, 0, 100, 0, {});
  auto sample = [&](double t, int rank, int device, uint64_t held, uint64_t cap) {
    MemorySample s;
    s.t = kT0 + t;
    s.rank = rank;
    s.device = device;
    s.held = held;
    s.cap = cap;
    a.samples.push_back(s);
  };
  sample(1, 0, 0, 100, 1000);
  sample(1, 0, 1, 50, 2000);  // the same tick of rank 0, another device
  sample(1.5, 1, 0, 300, 1000);
  sample(2, 0, 0, 120, 1000);
  auto lanes = rank_timeline(outcome({a}).trace, kT0);
  ASSERT_EQ(lanes.size(), 2u);
  ASSERT_EQ(lanes[0].size(), 2u);
  EXPECT_EQ(lanes[0][0].held, 150u);
  EXPECT_EQ(lanes[0][0].cap, 2000u);
  EXPECT_NEAR(lanes[0][0].t, 1.0, 1e-9);
  ASSERT_EQ(lanes[1].size(), 1u);
  EXPECT_EQ(lanes[1][0].held, 300u);
  for (MemorySample& s : a.samples) s.rank = -1;
  EXPECT_TRUE(rank_timeline(outcome({a}).trace, kT0).empty());
}

TEST(BuildJobResult, WholeResult) {
  Attempt died = attempt(0, 0, 2, 1, {step(1, 1), step(1.2, 2), inject(1.5, 3), oom(1.6, 3, false),
                                      ev(1.0, "probe", "checkpoint_save", {{"path", "/tmp/c"}, {"step", 2}}),
                                      ev(1.7, "shim", "shim_exit", {{"device", 0}, {"peak", 5000}})});
  died.output_tail = "CUDA out of memory";
  died.log_path = "/tmp/log0";
  MemorySample s;
  s.t = kT0 + 1.4;
  s.held = 4000;
  s.peak = 4500;
  died.samples.push_back(s);
  Attempt next = attempt(1, 2.5, 6, 0, {ev(2.6, "probe", "checkpoint_load", {{"path", "/tmp/c"}, {"step", 2}}), step(3, 3), step(4, 4)});
  JobOutcome o = outcome({died, next});
  o.gpu = 1;
  Verdict resumed = verdict(VerdictStatus::pass, "resumed", "checkpoint_resume");
  resumed.evidence.push_back({1, kT0 + 2.6, "attempt 2 loaded /tmp/c (step 2)"});  // policies cite wall-clock times
  JobResult r = build_job_result("resume", o, {resumed, verdict(VerdictStatus::fail, "peak over budget", "peak_below")});
  ASSERT_EQ(r.verdicts[0].evidence.size(), 1u);
  EXPECT_NEAR(r.verdicts[0].evidence[0].t, 2.6, 1e-9);  // results give seconds since the job started
  EXPECT_EQ(r.name, "resume");
  EXPECT_EQ(r.status, JobStatus::failed);
  EXPECT_EQ(r.message, "peak over budget");
  EXPECT_EQ(r.command, o.argv);
  EXPECT_EQ(r.gpu, 1);
  EXPECT_NEAR(r.duration, 6.0, 1e-9);
  ASSERT_EQ(r.attempts.size(), 2u);
  EXPECT_EQ(outcome_name(r.attempts[0].outcome), "oom");
  EXPECT_EQ(r.attempts[0].last_step, 2);
  EXPECT_EQ(r.attempts[0].output_tail, "CUDA out of memory");
  EXPECT_EQ(r.attempts[0].log_path, "/tmp/log0");
  EXPECT_EQ(outcome_name(r.attempts[1].outcome), "ok");
  EXPECT_EQ(r.attempts[1].last_step, 4);
  EXPECT_NEAR(r.attempts[1].start, 2.5, 1e-9);
  ASSERT_EQ(r.faults.size(), 1u);
  EXPECT_TRUE(r.faults[0].visible);
  EXPECT_EQ(r.peak.at(0), 5000u);  // the shim's exact count beats the 50 ms samples
  ASSERT_TRUE(r.recovery_seconds);
  EXPECT_NEAR(*r.recovery_seconds, 1.4, 1e-6);  // OOM at 1.6, next step at 3.0
  std::map<std::string, int> kinds;
  for (const auto& m : r.markers) ++kinds[m.kind];
  EXPECT_EQ(kinds["inject"], 1);
  EXPECT_EQ(kinds["oom"], 1);
  EXPECT_EQ(kinds["checkpoint_save"], 1);
  EXPECT_EQ(kinds["checkpoint_load"], 1);
  EXPECT_EQ(kinds["restart"], 1);
  EXPECT_EQ(kinds["step"], 4);
  for (size_t i = 1; i < r.markers.size(); ++i) EXPECT_LE(r.markers[i - 1].t, r.markers[i].t);
}

TEST(BuildJobResult, MessagesWithoutVerdicts) {
  JobOutcome o = outcome({attempt(0, 0, 1, 7, {})});
  EXPECT_EQ(build_job_result("j", o, {}).message, "attempt 1 exited with code 7");
  o.error = "could not start";
  EXPECT_EQ(build_job_result("j", o, {}).message, "could not start");
  JobOutcome i = outcome({attempt(0, 0, 1, std::nullopt, {})});
  i.interrupted = true;
  JobResult ir = build_job_result("j", i, {});
  EXPECT_EQ(ir.status, JobStatus::interrupted);
  EXPECT_NE(ir.message.find("interrupted"), std::string::npos);
}

TEST(BuildJobResult, ManyMarkersAreThinned) {
  std::vector<Event> events;
  for (int i = 0; i < 1000; ++i) events.push_back(step(i * 0.01, i));
  JobResult r = build_job_result("j", outcome({attempt(0, 0, 11, 0, events)}), {});
  EXPECT_EQ(r.markers.size(), 200u);
  EXPECT_EQ(r.markers.front().label, "step 0 (batch 32)");
  EXPECT_EQ(r.markers.back().label, "step 999 (batch 32)");
}

TEST(BuildJobResult, WarningsOncePerTextSafeAndBounded) {
  std::vector<Event> first = {step(0.1, 0),
                              ev(0.2, "runner", "warning", {{"message", "the output log a.log was cut: 5 bytes"}}),
                              ev(0.3, "shim", "warning", {{"message", "the output log a.log was cut: 5 bytes"}}),
                              ev(0.4, "shim", "warning", {{"message", "red \x1b[31mtext\x1b[0m\nsecond line"}}),
                              ev(0.5, "shim", "warning", {{"note", "no message field"}})};
  JobResult r = build_job_result("j", outcome({attempt(0, 0, 1, 0, first)}), {});
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_EQ(r.warnings[0], "attempt 1: the output log a.log was cut: 5 bytes");
  EXPECT_EQ(r.warnings[1], "attempt 1: red text second line");  // no escape reaches a terminal
  std::vector<Event> many;
  for (int i = 0; i < 100; ++i) many.push_back(ev(0.01 * i, "shim", "warning", {{"message", "w" + std::to_string(i)}}));
  JobResult m = build_job_result("j", outcome({attempt(0, 0, 1, 0, first), attempt(1, 1, 2, 0, many)}), {});
  ASSERT_EQ(m.warnings.size(), kMaxWarnings);
  EXPECT_EQ(m.warnings[2], "attempt 2: w0");
  EXPECT_EQ(m.warnings.back(), "83 more warning(s) are in the attempts' event logs");
  // Into results.json and back.
  nlohmann::json j = m;
  EXPECT_EQ(j.at("warnings").size(), kMaxWarnings);
  EXPECT_EQ(j.get<JobResult>().warnings, m.warnings);
  EXPECT_FALSE(nlohmann::json(build_job_result("j", outcome({attempt(0, 0, 1, 0, {})}), {})).contains("warnings"));
}

RunResult run_with(std::vector<JobStatus> statuses, bool interrupted = false) {
  RunResult run;
  run.interrupted = interrupted;
  run.suites.emplace_back();
  for (auto s : statuses) {
    JobResult j;
    j.status = s;
    run.suites.back().jobs.push_back(j);
  }
  return run;
}

TEST(ExitCodes, AsPytest) {
  EXPECT_EQ(run_exit_code(run_with({JobStatus::passed, JobStatus::passed})), ExitCode::ok);
  EXPECT_EQ(run_exit_code(run_with({JobStatus::passed, JobStatus::inconclusive, JobStatus::skipped})), ExitCode::ok);
  EXPECT_EQ(run_exit_code(run_with({JobStatus::passed, JobStatus::failed})), ExitCode::tests_failed);
  EXPECT_EQ(run_exit_code(run_with({JobStatus::passed, JobStatus::error})), ExitCode::tests_failed);
  EXPECT_EQ(run_exit_code(run_with({JobStatus::failed, JobStatus::interrupted})), ExitCode::interrupted);
  EXPECT_EQ(run_exit_code(run_with({JobStatus::passed}, true)), ExitCode::interrupted);
  EXPECT_EQ(to_int(ExitCode::internal_error), 3);
  EXPECT_EQ(to_int(ExitCode::usage_error), 4);
  // Nothing tested: no job, or no job passed or failed.
  EXPECT_EQ(run_exit_code(run_with({})), ExitCode::nothing_tested);
  EXPECT_EQ(run_exit_code(run_with({JobStatus::inconclusive, JobStatus::skipped})), ExitCode::nothing_tested);
  EXPECT_EQ(run_exit_code(run_with({JobStatus::inconclusive, JobStatus::error})), ExitCode::tests_failed);
  EXPECT_EQ(to_int(ExitCode::nothing_tested), 5);
}

TEST(JobStatusTest, StrictFailsInconclusiveJobs) {
  JobOutcome o = outcome({attempt(0, 0, 1, 0, {})});
  StatusRules strict;
  strict.strict = true;
  std::vector<Verdict> unsure = {verdict(VerdictStatus::inconclusive, "the fault was absorbed"), verdict(VerdictStatus::pass, "ok")};
  EXPECT_EQ(job_status(o, unsure), JobStatus::inconclusive);
  EXPECT_EQ(job_status(o, unsure, strict), JobStatus::failed);
  EXPECT_EQ(build_job_result("j", o, unsure, strict).message, "inconclusive, which --strict fails: the fault was absorbed");
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::pass, "ok")}, strict), JobStatus::passed);
  // Untested (Note [Green means tested]): a job that would pass is inconclusive, and fails under --strict.
  StatusRules untested;
  untested.inconclusive = "no fault fired";
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::pass, "ok", "exit")}, untested), JobStatus::inconclusive);
  EXPECT_EQ(build_job_result("j", o, {verdict(VerdictStatus::pass, "ok", "exit")}, untested).message, "no fault fired");
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::fail, "no", "exit")}, untested), JobStatus::failed);
  untested.strict = true;
  EXPECT_EQ(job_status(o, {verdict(VerdictStatus::pass, "ok", "exit")}, untested), JobStatus::failed);
}

// Note [Green means tested]: each way a job can go untested, from hand-made traces.
JobSpec faulted_job() {
  JobSpec job;
  job.name = "j";
  job.argv = {"trainer"};
  FaultSpec f;
  f.name = "oom-at-3";
  f.rule = {{"name", "oom-at-3"}, {"when", {{"step", 3}}}, {"fail", {{"times", 2}}}};
  job.faults.push_back(f);
  return job;
}

ShimRecord armed() {
  ShimRecord r;
  r.processes = r.armed = 1;
  r.driver_called = true;
  r.allocations = 12;
  r.ways_in = kWayExport;
  return r;
}

Attempt with_shim(Attempt a, std::optional<ShimRecord> shim) {
  a.shim = shim;
  return a;
}

TEST(Untested, ATestedJobIsNotAsked) {
  Trace t = outcome({with_shim(attempt(0, 0, 5, 0, {step(1, 2), inject(1.1, 3), oom(1.2, 3, true), step(1.5, 3)}), armed())}).trace;
  EXPECT_FALSE(why_untested(faulted_job(), t));
}

TEST(Untested, TheShimNeverStartedOrRejectedThePlan) {
  Trace never = outcome({with_shim(attempt(0, 0, 5, 0, {step(1, 2)}), ShimRecord{})}).trace;
  auto u = why_untested(faulted_job(), never);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, JobStatus::error);
  EXPECT_NE(u->message.find("attempt 1: the shim never started"), std::string::npos) << u->message;
  ShimRecord rejected = armed();
  rejected.armed = 0;
  rejected.rejected = 1;
  Event start = ev(0.1, "shim", "shim_start", {{"plan", "rejected"}, {"plan_error", "OOMH_PLAN: rules: must be a list"}});
  Trace r = outcome({with_shim(attempt(0, 0, 5, 0, {start, step(1, 2)}), rejected)}).trace;
  u = why_untested(faulted_job(), r);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->message, "attempt 1: the shim rejected the fault plan, so no fault or cap was applied: OOMH_PLAN: rules: must be a list");
  // A job with neither rules nor caps does not need the shim armed.
  JobSpec plain;
  plain.argv = {"trainer"};
  EXPECT_FALSE(why_untested(plain, outcome({with_shim(attempt(0, 0, 5, 0, {step(1, 2)}), ShimRecord{})}).trace));
}

// Note [A call the virtual device cannot run] (virtual_device/unsupported.py): an attempt that died of a call the
// virtual device cannot run is an error naming it, even after a fault fired (a must_fail `exit: 0` would
// otherwise take that death for the expected one); a divergence of another kind is no such death.
TEST(Untested, ADeathOfAnUnsupportedCallIsAnErrorNamingIt) {
  const std::string said = "oomharness: the virtual CUDA device cannot run torch.cuda.graphs.CUDAGraph, called at train.py:40";
  Event div = ev(1.4, "probe", "divergence", {{"kind", "unsupported"}, {"detail", said}});
  Trace t = outcome({with_shim(attempt(0, 0, 5, 1, {step(1, 2), inject(1.1, 3), oom(1.2, 3, true), step(1.3, 3), div}), armed())}).trace;
  auto u = why_untested(faulted_job(), t);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, JobStatus::error);
  EXPECT_EQ(u->message, "attempt 1 died of a call the virtual CUDA device cannot run, not of anything its checks test, so its "
                        "verdicts cannot be believed: " + said);
  Event other = ev(1.4, "probe", "divergence", {{"kind", "nccl"}, {"detail", "NCCL ran as gloo"}});
  EXPECT_FALSE(why_untested(faulted_job(), outcome({with_shim(attempt(0, 0, 5, 0, {step(1, 2), inject(1.1, 3), oom(1.2, 3, true),
                                                                                   step(1.3, 3), other}), armed())}).trace));
}

// Note [Processes outside the shim] (runner/src/exec/escapes.h): a process of the job that held device memory
// without the shim, said by its probe or found by the runner in NVML's list, makes a tested job an error that
// names it; in the reference run too.
TEST(Untested, AProcessOutsideTheShimIsAnErrorNamingIt) {
  const auto tested = [](std::vector<Event> more) {
    std::vector<Event> events = {step(1, 2), inject(1.1, 3), oom(1.2, 3, true), step(1.5, 3)};
    events.insert(events.end(), more.begin(), more.end());
    return with_shim(attempt(0, 0, 5, 0, events), armed());
  };
  Event by_probe = ev(1.3, "probe", "outside_shim",
                      {{"shim", "absent"}, {"command", "python train.py"}, {"allocated", 4096}, {"reserved", 134217728},
                       {"via", "probe"}});
  by_probe.pid = 42;
  auto u = why_untested(faulted_job(), outcome({tested({by_probe})}).trace);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, JobStatus::error);
  EXPECT_EQ(u->message, "attempt 1: process 42 (python train.py) used device memory outside the shim (it held 128.00 MiB): "
                        "its probe found no shim in it; no fault or cap applied to it (was it started with LD_PRELOAD "
                        "cleared, or through a static or setuid program?), so the job's verdicts cannot be believed");
  Event by_nvml = ev(1.25, "runner", "outside_shim", {{"shim", "inactive"}, {"command", "sleep 9"}, {"used", 0}, {"via", "nvml"}});
  by_nvml.pid = 777;
  u = why_untested(faulted_job(), outcome({tested({by_nvml, by_probe})}).trace);
  ASSERT_TRUE(u);
  EXPECT_NE(u->message.find("process 777 (sleep 9) used device memory outside the shim: the driver (NVML) lists it using the "
                            "GPU, and 1 more process(es) did the same;"),
            std::string::npos) << u->message;
  // Only the probe and the runner say so: the same kind from anywhere else is not believed to name a process.
  Event other = by_probe;
  other.src = "shim";
  EXPECT_FALSE(why_untested(faulted_job(), outcome({tested({other})}).trace));
  // Without the probe's word: a probe that reports device memory in a pid where no shim ever started.
  Event shim_start = ev(0.5, "shim", "shim_start", {{"plan", "accepted"}});
  Event elsewhere = ev(1.6, "probe", "step", {{"step", 4}, {"batch_size", 3}, {"allocated", 1 << 20}});
  elsewhere.pid = 43;
  u = why_untested(faulted_job(), outcome({tested({shim_start, elsewhere})}).trace);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->message, "attempt 1: process 43 used device memory outside the shim (its probe reported 1.00 MiB held): no shim "
                        "started in that process; no fault or cap applied to it (was it started with LD_PRELOAD cleared, or "
                        "through a static or setuid program?), so the job's verdicts cannot be believed");
  // ... and none where the shim started in every process that holds memory, or where no shim wrote its start.
  elsewhere.pid = 42;
  EXPECT_FALSE(why_untested(faulted_job(), outcome({tested({shim_start, elsewhere})}).trace));
  elsewhere.pid = 43;
  EXPECT_FALSE(why_untested(faulted_job(), outcome({tested({elsewhere})}).trace));
  Event cpu_only = elsewhere;
  cpu_only.fields = {{"step", 4}, {"batch_size", 3}, {"allocated", 0}};
  EXPECT_FALSE(why_untested(faulted_job(), outcome({tested({shim_start, cpu_only})}).trace));
  // The reference run counts too.
  JobOutcome with_reference = outcome({tested({})});
  with_reference.trace.reference.push_back(tested({by_probe}));
  u = why_untested(faulted_job(), with_reference.trace);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->message.rfind("the reference run: process 42 (python train.py)", 0), 0u) << u->message;
}

TEST(Untested, NoDriverCallIsAnError) {
  ShimRecord idle = armed();
  idle.driver_called = false;
  idle.allocations = 0;
  JobSpec capped;
  capped.argv = {"python3", "train.py"};
  capped.memory.limit = 1ull << 30;
  auto u = why_untested(capped, outcome({with_shim(attempt(0, 0, 5, 0, {step(1, 1)}), idle)}).trace);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, JobStatus::error);
  EXPECT_EQ(u->message, "attempt 1: the shim saw no CUDA allocation: this job did not use the GPU; a CPU-only torch? "
                        "the wrong interpreter? work done in a process the shim was not preloaded into?");
  // Asking the device's size is not using it (PyTorch does on a GPU machine with the training on the CPU).
  ShimRecord asked = idle;
  asked.driver_called = true;
  u = why_untested(capped, outcome({with_shim(attempt(0, 0, 5, 0, {step(1, 1)}), asked)}).trace);
  ASSERT_TRUE(u);
  EXPECT_NE(u->message.find("saw no CUDA allocation: this job did not use the GPU (it only asked the driver about the device)"),
            std::string::npos) << u->message;
}

TEST(Untested, NoGpuOnTheMachineSaysSoAndPointsToSimulate) {
  ShimRecord idle = armed();
  idle.allocations = 0;
  JobSpec capped;
  capped.argv = {"python3", "train.py"};
  capped.memory.limit = 1ull << 30;
  capped.device = DeviceChoice::gpu;
  Attempt a = with_shim(attempt(0, 0, 5, 0, {step(1, 1)}), idle);
  Event start;
  start.src = events::kSrcProbe;
  start.kind = events::kProbeStart;
  start.fields = {{"framework", "torch"}, {"version", "2.14.1+cu130"}};
  a.events.insert(a.events.begin(), start);
  auto u = why_untested(capped, outcome({a}).trace, /*gpu_found=*/false);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, JobStatus::error);
  EXPECT_EQ(u->message, "attempt 1: the shim saw no CUDA allocation, and this machine has no GPU (no NVIDIA driver was "
                        "found): the job's torch 2.14.1+cu130 had no GPU to use; add --simulate (suite: device: virtual) "
                        "to run it on the virtual CUDA device, or run it on a machine with a GPU");
  // Where a GPU was found, the same job is told it did not use it.
  u = why_untested(capped, outcome({a}).trace, /*gpu_found=*/true);
  ASSERT_TRUE(u);
  EXPECT_NE(u->message.find("this job did not use the GPU"), std::string::npos) << u->message;
  // Under --simulate there is no GPU by design: the message is about the job, not the machine.
  JobOutcome simulated = outcome({a});
  simulated.trace.simulated_device = true;
  u = why_untested(capped, simulated.trace, /*gpu_found=*/false);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->message.find("this machine has no GPU"), std::string::npos) << u->message;
}

TEST(Untested, DyingBeforeAnyFaultFiredIsAnError) {
  Attempt crashed = with_shim(attempt(0, 0, 1, 1, {}), armed());
  crashed.output_tail = "Traceback (most recent call last):\n  File \"train.py\", line 1\nModuleNotFoundError: No module named 'x'\n";
  auto u = why_untested(faulted_job(), outcome({crashed}).trace);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->message, "attempt 1 exited with code 1 before any fault fired: nothing was tested (it printed: "
                        "ModuleNotFoundError: No module named 'x')");
  // Killed by a signal counts too; dying after a fault fired does not (that is the test).
  Attempt killed = with_shim(attempt(0, 0, 1, std::nullopt, {step(0.5, 1)}), armed());
  killed.end_kind = AttemptEnd::signalled;
  killed.signal = SIGSEGV;
  u = why_untested(faulted_job(), outcome({killed}).trace);
  ASSERT_TRUE(u);
  EXPECT_NE(u->message.find("was killed by signal 11 (SIGSEGV) before any fault fired"), std::string::npos) << u->message;
  EXPECT_FALSE(why_untested(faulted_job(), outcome({with_shim(attempt(0, 0, 1, 1, {step(0.5, 2), inject(0.6, 3)}), armed())}).trace));
  // A later attempt may die without a fault of its own: a fault fired earlier in the job.
  Attempt first = with_shim(attempt(0, 0, 1, 1, {step(0.5, 2), inject(0.6, 3)}), armed());
  first.oom_message = true;
  Attempt second = with_shim(attempt(1, 1, 2, 2, {}), armed());
  second.faults_enabled = false;
  EXPECT_FALSE(why_untested(faulted_job(), outcome({first, second}).trace));
  // With nothing to fire, the first training step is the line.
  JobSpec plain;
  plain.argv = {"trainer"};
  u = why_untested(plain, outcome({attempt(0, 0, 1, 3, {})}).trace);
  ASSERT_TRUE(u);
  EXPECT_NE(u->message.find("exited with code 3 before its first training step"), std::string::npos);
  EXPECT_FALSE(why_untested(plain, outcome({attempt(0, 0, 1, 3, {step(0.5, 1)})}).trace));
}

// Issue 26 (Note [An OOM is an event]): a job under a cap it never reached that died of an unrelated error
// whose text mentions memory tested nothing; beside a reservation, real allocations fail without a refusal
// of the shim, so there the output still counts as a fault that fired.
TEST(Untested, AnOomMessageAloneIsNoFault) {
  JobSpec capped;
  capped.argv = {"python3", "train.py"};
  capped.memory.limit = 6ull << 30;
  Attempt died = with_shim(attempt(0, 0, 5, 1, {step(1, 1), step(2, 2)}), armed());
  died.oom_message = true;
  died.output_tail = "RuntimeError: DataLoader worker (pid 4242) ran out of memory reading shard 7\n";
  auto u = why_untested(capped, outcome({died}).trace);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, JobStatus::error);
  EXPECT_NE(u->message.find("exited with code 1 before any fault fired"), std::string::npos) << u->message;
  // The cap reached: the shim refused an allocation the job never got past.
  Attempt refused = died;
  refused.events.push_back(inject(3, 3));
  EXPECT_FALSE(why_untested(capped, outcome({refused}).trace));
  // Beside a reservation.
  JobSpec reserved = capped;
  reserved.memory.reserve = 1ull << 30;
  EXPECT_FALSE(why_untested(reserved, outcome({died}).trace));
}

TEST(Untested, NoFaultFiredIsInconclusive) {
  auto u = why_untested(faulted_job(), outcome({with_shim(attempt(0, 0, 5, 0, {step(1, 1), step(2, 2)}), armed())}).trace);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->status, JobStatus::inconclusive);
  EXPECT_NE(u->message.find("no fault fired"), std::string::npos);
}

}  // namespace
}  // namespace oomh
