// Every policy on hand-written traces: a pass, a fail and an inconclusive case at least, each checking the
// status and the phrase of the reason a user would act on.

#include <csignal>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "oomharness/policies/registry.h"
#include "check_policy.h"
#include "trace_builder.h"

namespace oomh {
namespace {

using ::testing::HasSubstr;
using testing::TraceBuilder;
using testing::check;

constexpr int64_t MiB = 1024 * 1024;
constexpr int64_t GiB = 1024 * MiB;


// Steps first..last at one batch size.
TraceBuilder& steps(TraceBuilder& b, int64_t first, int64_t last, int64_t batch = -1) {
  for (int64_t s = first; s <= last; ++s) b.step(s, batch);
  return b;
}

// ---- exit ----

TEST(Exit, Pass) { EXPECT_VERDICT(check("exit", TraceBuilder().attempt().step(1).exit(0).build()), pass, "exited with code 0 as expected"); }

TEST(Exit, FailWithOom) {
  Verdict v = check("exit", TraceBuilder().attempt().exit(0).attempt().inject_at(1).exit(1, true).build());
  EXPECT_VERDICT(v, fail, "the last attempt (attempt 2) exited with code 1, expected exit code 0, after an out-of-memory error");
  ASSERT_FALSE(v.evidence.empty());
  EXPECT_EQ(v.evidence[0].attempt, 1);
}

TEST(Exit, FailBySignal) {
  EXPECT_VERDICT(check("exit", TraceBuilder().attempt().killed(SIGKILL).build()), fail, "killed by signal 9 (SIGKILL)");
}

TEST(Exit, ScalarCode) { EXPECT_VERDICT(check("exit", TraceBuilder().attempt().exit(3).build(), 3), pass, "code 3"); }

TEST(Exit, InconclusiveWithoutAttempts) { EXPECT_VERDICT(check("exit", Trace{}), inconclusive, "never ran"); }

// ---- completes ----

TEST(Completes, Pass) {
  TraceBuilder b;
  steps(b.attempt(), 1, 10).exit(0);
  EXPECT_VERDICT(check("completes", b.build(), 10), pass, "reached step 10 (target 10)");
}

TEST(Completes, PassWithTraceTarget) {
  TraceBuilder b;
  steps(b.target(5).attempt(), 1, 5).exit(0);
  EXPECT_VERDICT(check("completes", b.build()), pass, "reached step 5");
}

TEST(Completes, Fail) {
  TraceBuilder b;
  steps(b.attempt(), 1, 7).exit(1, true);
  EXPECT_VERDICT(check("completes", b.build(), 10), fail, "training stopped at step 7 of 10: attempt 1 exited with code 1");
}

TEST(Completes, InconclusiveWithoutTarget) {
  TraceBuilder b;
  steps(b.attempt(), 1, 7).exit(0);
  EXPECT_VERDICT(check("completes", b.build()), inconclusive, "no step count to reach");
}

TEST(Completes, InconclusiveWithoutSteps) {
  EXPECT_VERDICT(check("completes", TraceBuilder().attempt().exit(0).build(), 10), inconclusive, "no step was reported");
}

// ---- oom_visible ----

TEST(OomVisible, Pass) {
  Trace t = TraceBuilder().attempt().step(4, 64).inject().inject().oom(5, 64).step(5, 32).exit(0).build();
  EXPECT_VERDICT(check("oom_visible", t), pass, "2 faults were injected, 2 reached the code, and it saw 1 out-of-memory error");
}

TEST(OomVisible, PassFromOomExitWithoutProbe) {
  Trace t = TraceBuilder().attempt().inject().inject().exit(1, true).build();
  EXPECT_VERDICT(check("oom_visible", t), pass, "2 reached the code, and it saw 1 out-of-memory error");
}

// Note [Visible faults]: an injected fault the allocator absorbed (a step completed after it) stays absorbed
// when the code later sees an OOM of its own making.
TEST(OomVisible, AnUnrelatedOomDoesNotMakeAnAbsorbedFaultVisible) {
  Trace t = TraceBuilder().attempt().step(4, 64).inject().step(5, 64).oom(6, 64).exit(1).build();
  Verdict v = check("oom_visible", t);
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("1 fault was injected but the code never saw an out-of-memory error"));
}

// Note [Visible faults]: the runner reads `step 4` from the job's output a moment after step 5's injections;
// that line says nothing about them (a false red seen on the H100).
TEST(OomVisible, AnEarlierStepReadLateDoesNotMakeTheFaultAbsorbed) {
  Trace t = TraceBuilder().attempt().step(3, 64).inject_at(5).inject_at(5)
                .observed_line("step", {{"step", "4"}}).oom(5, 64).step(5, 32).exit(0).build();
  EXPECT_VERDICT(check("oom_visible", t), pass, "2 faults were injected, 2 reached the code, and it saw 1 out-of-memory error");
  // The step the faults were injected in, completed before any OOM: absorbed.
  Trace absorbed = TraceBuilder().attempt().step(4, 64).inject_at(5).observed_line("step", {{"step", "5"}}).oom(6, 64).exit(1).build();
  EXPECT_EQ(check("oom_visible", absorbed).status, VerdictStatus::fail);
}

TEST(OomVisible, FailWhenAbsorbed) {
  Trace t = TraceBuilder().attempt().step(4, 64).inject().inject().step(5, 64).exit(0).build();
  Verdict v = check("oom_visible", t);
  EXPECT_EQ(v.status, VerdictStatus::fail);
  EXPECT_EQ(v.reason,
            "2 faults were injected but the code never saw an out-of-memory error: PyTorch's caching allocator retried "
            "and absorbed them; use a persistent fault (fail: {times: 2} or more) or a cap");
}

TEST(OomVisible, InconclusiveWithoutInjection) {
  EXPECT_VERDICT(check("oom_visible", TraceBuilder().attempt().step(1).exit(0).build()), inconclusive, "no fault was injected");
}

// ---- the absorption rule (every recovery policy) ----

TEST(Absorption, InjectedButAbsorbedIsInconclusive) {
  Trace t = TraceBuilder().attempt().step(4, 64).inject().step(5, 64).exit(0).build();
  for (const char* name : {"batch_halving", "empty_cache_retry", "checkpoint_resume", "graceful_exit"}) {
    Verdict v = check(name, t);
    EXPECT_EQ(v.status, VerdictStatus::inconclusive) << name;
    EXPECT_THAT(v.reason, HasSubstr("1 fault was injected but the code never saw an out-of-memory error")) << name;
    EXPECT_THAT(v.reason, HasSubstr("use a persistent fault")) << name;
  }
}

TEST(Absorption, NothingHappenedIsInconclusive) {
  Trace t = TraceBuilder().attempt().step(1, 64).step(2, 64).exit(0).build();
  for (const char* name : {"batch_halving", "empty_cache_retry", "checkpoint_resume", "graceful_exit"})
    EXPECT_VERDICT(check(name, t), inconclusive, "no out-of-memory error happened: nothing to recover from");
}

// ---- batch_halving ----

TEST(BatchHalving, Pass) {
  TraceBuilder b;
  steps(b.target(8).attempt(), 1, 4, 64).inject().inject().oom(5, 64);
  steps(b, 5, 8, 32).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build()), pass, "the OOM was followed by a smaller batch (64 -> 32) and training reached step 8");
}

TEST(BatchHalving, FailNoHalving) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().inject().oom(5, 64).step(6, 64).exit(0);
  Verdict v = check("batch_halving", b.build());
  EXPECT_EQ(v.status, VerdictStatus::fail);
  EXPECT_EQ(v.reason, "OOM at step 5 (batch 64) was caught, but step 6 ran at batch 64 again: no halving");
  EXPECT_GE(v.evidence.size(), 2u);
}

TEST(BatchHalving, FailNotSmallEnough) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).step(5, 48).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build()), fail, "step 5 ran at batch 48, more than 64 x 0.5 = 32");
}

TEST(BatchHalving, FailBelowFloor) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 32).inject().oom(5, 32).step(5, 8).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build(), {{"min", 16}}), fail, "ran at batch 8, below the floor of 16");
}

TEST(BatchHalving, FailTargetNotReached) {
  TraceBuilder b;
  steps(b.target(10).attempt(), 1, 4, 64).inject().oom(5, 64);
  steps(b, 5, 6, 32).exit(1);
  EXPECT_VERDICT(check("batch_halving", b.build()), fail, "(64 -> 32), but training stopped at step 6 of 10");
}

TEST(BatchHalving, FailSamplesDropped) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).samples(32).step(6, 32).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build(), {{"no_sample_loss", true}}), fail,
                 "the failed step's 64 samples were not processed again (step 5 never completed, 32 samples reported after the OOM)");
}

// A trainer that numbers steps by optimizer steps "completes" the failed step on half its batch: the
// sample counts show the other half was dropped.
TEST(BatchHalving, FailStepRedoneOnHalfTheSamples) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).samples(32).step(5, 32).step(6, 32).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build(), {{"no_sample_loss", true}}), fail,
                 "(step 5 completed again, but only 32 samples were reported after the OOM): samples were dropped");
}

TEST(BatchHalving, PassNoSampleLossBySamples) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).samples(32).samples(32).step(6, 32).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build(), {{"no_sample_loss", true}}), pass, "64 -> 32");
}

TEST(BatchHalving, PassNoSampleLossByRedoingTheStep) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).step(5, 32).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build(), {{"no_sample_loss", true}}), pass, "64 -> 32");
}

TEST(BatchHalving, PassAcrossARestart) {
  TraceBuilder b;
  steps(b.target(8).attempt(), 1, 4, 64).inject().oom(5, 64, false).exit(1, true).attempt();
  steps(b, 5, 8, 32).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build()), pass, "reached step 8");
}

TEST(BatchHalving, FailAcrossARestart) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).exit(1, true).attempt();
  steps(b, 5, 8, 64).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build()), fail,
                 "OOM at step 5 (batch 64) ended attempt 1, but attempt 2's step 5 ran at batch 64 again: no halving");
}

TEST(BatchHalving, PassFromObservedOutputWithoutProbe) {
  // No probe: steps and batch sizes come from the suite's `observe:` regexes on stdout.
  Trace t = TraceBuilder()
                .attempt()
                .observed_line("step 3 bs 64 loss 2.1", {{"step", "3"}, {"batch_size", "64"}, {"loss", "2.1"}})
                .observed_line("step 4 bs 64 loss 2.0", {{"step", "4"}, {"batch_size", "64"}, {"loss", "2.0"}})
                .inject()
                .inject()
                .observed_line("caught CUDA out of memory, halving", {{"oom", "1"}})
                .observed_line("batch size now 32", {{"batch_size", "32"}})
                .observed_line("step 5 loss 1.9", {{"step", "5"}, {"loss", "1.9"}})
                .exit(0, true)
                .build();
  EXPECT_VERDICT(check("batch_halving", t), pass, "(64 -> 32)");
}

TEST(BatchHalving, InconclusiveWithoutBatchSizes) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4).inject().oom(5, -1).step(5).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build()), inconclusive, "has no batch size");
}

// ---- empty_cache_retry ----

TEST(EmptyCacheRetry, Pass) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().inject().oom(5, 64).empty_cache(8 * GiB, 6 * GiB).step(5, 64).step(6, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), pass,
                 "the OOM was followed by an empty_cache that freed 2.00 GiB, and the same step then completed within 3 retries");
}

TEST(EmptyCacheRetry, PassBySamples) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).sample(8 * GiB).event("probe", "empty_cache").sample(5 * GiB);
  b.step(5, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), pass, "freed 3.00 GiB");
}

TEST(EmptyCacheRetry, FailCacheDidNotShrink) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).empty_cache(8 * GiB, 8 * GiB).step(5, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail,
                 "after the OOM at step 5 (batch 64) empty_cache freed nothing (reserved 8.00 GiB before, 8.00 GiB after)");
}

TEST(EmptyCacheRetry, FailNoEmptyCache) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).step(5, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail, "did not empty the cache before going on");
}

TEST(EmptyCacheRetry, FailStepSkipped) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).empty_cache(8 * GiB, 6 * GiB).step(6, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail,
                 "step 5 never completed; it went on with step 6: it skipped the step instead of retrying it");
}

TEST(EmptyCacheRetry, FailTooManyRetries) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject();
  for (int i = 0; i < 4; ++i) b.oom(5, 64).empty_cache(8 * GiB, 6 * GiB);
  b.step(5, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build(), {{"max_retries", 3}}), fail, "step 5 ran out of memory 4 times (max_retries 3)");
  EXPECT_VERDICT(check("empty_cache_retry", b.build(), {{"max_retries", 4}}), pass, "within 4 retries");
}

TEST(EmptyCacheRetry, FailUncaught) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).exit(1, true);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail, "the OOM at step 5 (batch 64) was not caught: attempt 1 exited with code 1");
}

TEST(EmptyCacheRetry, InconclusiveWithoutSizes) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).event("probe", "empty_cache").step(5, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), inconclusive, "cannot tell whether the cache shrank");
}

// Note [What empty_cache could free]: the probes say what the cache held free before each call.

TEST(EmptyCacheRetry, PassWhenTheCacheWasAlreadyEmpty) {
  // PyTorch's allocator gave its free blocks back before it raised: the code's empty_cache had nothing left.
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().inject().oom(5, 64).empty_cache(3 * GiB, 3 * GiB, 3 * GiB, 0).step(5, 64).exit(0);
  Verdict v = check("empty_cache_retry", b.build());
  EXPECT_VERDICT(v, pass,
                 "the OOM was followed by an empty_cache that found the cache already empty (no free blocks before it: "
                 "nothing was left to free), and the same step then completed within 3 retries");
  bool shown = false;
  for (const Evidence& e : v.evidence) shown = shown || e.what == "empty_cache: 3.00 GiB -> 3.00 GiB (0 B free in the cache before)";
  EXPECT_TRUE(shown) << "the evidence shows what the cache held free";
}

TEST(EmptyCacheRetry, TheSameTraceWithoutWhatWasFreeKeepsTheOldRule) {
  // A trace from a probe that did not record freeable_before: a call that freed nothing still fails.
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().inject().oom(5, 64).empty_cache(3 * GiB, 3 * GiB, 3 * GiB).step(5, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail,
                 "empty_cache freed nothing (reserved 3.00 GiB before, 3.00 GiB after): the failed step's tensors were still referenced");
}

TEST(EmptyCacheRetry, PassWhenTheSecondOomInARowFindsTheCacheTheFirstEmptied) {
  // The false red of `--fault step=5,times=2` over a trainer whose allocator does not retry by itself.
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).empty_cache(8 * GiB, 6 * GiB, 6 * GiB, 2 * GiB);
  b.inject().oom(5, 64).empty_cache(6 * GiB, 6 * GiB, 6 * GiB, 0).step(5, 64).step(6, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), pass,
                 "each of the 2 OOMs was followed by an empty_cache, which freed 2.00 GiB in all (the cache held no free "
                 "blocks before 1 of them: nothing was left to free), and the same step then completed within 3 retries");
}

TEST(EmptyCacheRetry, FailWhenTheCacheHeldFreeBlocksAndTheCallFreedNothing) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().inject().oom(5, 64).empty_cache(8 * GiB, 8 * GiB, 6 * GiB, 2 * GiB).step(5, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail,
                 "after the OOM at step 5 (batch 64) empty_cache freed nothing though 2.00 GiB of the cache was free before it "
                 "(reserved 8.00 GiB before, 8.00 GiB after): the failed step's tensors were still referenced");
}

TEST(EmptyCacheRetry, FailWhenTheCacheWasAlreadyEmptyButTheStepWasSkipped) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().inject().oom(5, 64).empty_cache(3 * GiB, 3 * GiB, 3 * GiB, 0).step(6, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail,
                 "step 5 never completed; it went on with step 6: it skipped the step instead of retrying it");
}

// A retry that holds the failed attempt's tensors: every call finds the cache empty, no retry finds room,
// and the code gives up. The fail sentence says how much more it held than after the last step.
TEST(EmptyCacheRetry, FailWhenTheCacheWasAlreadyEmptyButTheStepNeverCompleted) {
  TraceBuilder b;
  b.attempt();
  for (int s = 1; s <= 4; ++s) b.step(s, 64, NAN, 1 * GiB);
  b.inject().inject().oom(5, 64).empty_cache(3 * GiB, 3 * GiB, 3 * GiB, 0);
  b.inject().oom(5, 64).empty_cache(3 * GiB, 3 * GiB, 3 * GiB, 0).inject().oom(5, 64, false).exit(1, true);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail,
                 "after the OOM at step 5 (batch 64) the code emptied the cache but step 5 never completed: attempt 1 exited "
                 "with code 1; when it emptied the cache the code still held 2.00 GiB more than after step 4");

  // The same end for code that dropped the failed attempt's tensors (a fault that never lets up): no such note.
  TraceBuilder c;
  c.attempt();
  for (int s = 1; s <= 4; ++s) c.step(s, 64, NAN, 1 * GiB);
  c.inject().inject().oom(5, 64).empty_cache(3 * GiB, 1 * GiB, 1 * GiB, 2 * GiB);
  c.inject().oom(5, 64).empty_cache(1 * GiB, 1 * GiB, 1 * GiB, 0).inject().oom(5, 64, false).exit(1, true);
  Verdict v = check("empty_cache_retry", c.build());
  EXPECT_VERDICT(v, fail, "step 5 never completed: attempt 1 exited with code 1");
  EXPECT_THAT(v.reason, ::testing::Not(HasSubstr("still held")));
}

TEST(EmptyCacheRetry, TooManyRetriesSaysWhatTheCodeStillHeld) {
  TraceBuilder b;
  b.attempt();
  for (int s = 1; s <= 4; ++s) b.step(s, 64, NAN, 1 * GiB);
  b.inject();
  for (int i = 0; i < 4; ++i) b.oom(5, 64).empty_cache(3 * GiB, 3 * GiB, 3 * GiB, 0);
  b.step(5, 64).exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build(), {{"max_retries", 3}}), fail,
                 "step 5 ran out of memory 4 times (max_retries 3): emptying the cache and retrying did not make room; lower the "
                 "batch instead; when it emptied the cache the code still held 2.00 GiB more than after step 4");
  EXPECT_VERDICT(check("empty_cache_retry", b.build(), {{"max_retries", 4}}), pass, "found the cache already empty");
}

// ---- checkpoint_resume ----

// Attempt 1 saves at steps 2 and 4, reaches 6 and dies of an OOM at step 7.
TraceBuilder died_after_checkpoints(double loss_scale = 1.0) {
  TraceBuilder b;
  b.target(12).attempt();
  for (int64_t s = 1; s <= 6; ++s) {
    b.step(s, 32, loss_scale / static_cast<double>(s));
    if (s == 2) b.save("ck/step-2.pt", 2);
    if (s == 4) b.save("ck/step-4.pt", 4);
  }
  b.inject().oom(7, 32, false).exit(1, true);
  return b;
}

TraceBuilder& resumed(TraceBuilder& b, int64_t from, double loss_scale = 1.0) {
  for (int64_t s = from; s <= 12; ++s) b.step(s, 32, loss_scale / static_cast<double>(s));
  return b.exit(0);
}

TEST(CheckpointResume, Pass) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-4.pt", 4);
  resumed(b, 5);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), pass,
                 "attempt 2 resumed from ck/step-4.pt (step 4) at step 5 after the OOM ended attempt 1, lost 2 steps and reached step 12");
}

TEST(CheckpointResume, FailLoadedAnOlderCheckpoint) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-2.pt", 2);
  resumed(b, 3);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail,
                 "attempt 2 loaded ck/step-2.pt (step 2), not the newest checkpoint ck/step-4.pt (step 4) saved before the OOM");
}

TEST(CheckpointResume, FailStartedFromScratch) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt();
  resumed(b, 1);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail, "attempt 2 started from scratch: it loaded no checkpoint");
}

TEST(CheckpointResume, FailWrongFirstStep) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-4.pt", 4);
  resumed(b, 1);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail, "attempt 2 resumed at step 1, expected step 5");
}

TEST(CheckpointResume, FailStepCounterNotRestored) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-4.pt", 0);
  resumed(b, 5);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail, "the step counter was not restored");
}

TEST(CheckpointResume, FailTooManyStepsLost) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-4.pt", 4);
  resumed(b, 5);
  EXPECT_VERDICT(check("checkpoint_resume", b.build(), {{"max_lost_steps", 1}}), fail, "2 steps lost (limit 1)");
}

TEST(CheckpointResume, FailNotRestarted) {
  EXPECT_VERDICT(check("checkpoint_resume", died_after_checkpoints().build()), fail, "was not restarted");
}

TEST(CheckpointResume, InconclusiveWhenTheOomWasCaught) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 32).inject().oom(5, 32).step(5, 16).exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), inconclusive, "no attempt died of one");
}

TEST(CheckpointResume, InconclusiveWithoutAnyCheckpoint) {
  TraceBuilder b;
  steps(b.attempt(), 1, 2, 32).inject().oom(3, 32, false).exit(1, true).attempt();
  steps(b, 1, 4, 32).exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), inconclusive, "before any checkpoint was saved");
}

TEST(CheckpointResume, ReferencePass) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-4.pt", 4);
  resumed(b, 5).reference().attempt();
  resumed(b, 1);
  EXPECT_VERDICT(check("checkpoint_resume", b.build(), {{"reference", {{"metric", "loss"}}}}), pass,
                 "with loss matching the uninterrupted run at 12 steps");
}

TEST(CheckpointResume, ReferenceMismatch) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-4.pt", 4);
  resumed(b, 5, 1.1).reference().attempt();
  resumed(b, 1);
  EXPECT_VERDICT(check("checkpoint_resume", b.build(), {{"reference", true}}), fail,
                 "step 5's loss 0.22 differs from the uninterrupted run's 0.2 (rtol 1e-05, atol 0)");
  // Within a loose tolerance it passes.
  EXPECT_VERDICT(check("checkpoint_resume", b.build(), {{"reference", {{"rtol", 0.2}}}}), pass, "matching");
}

// Note [A reference run that resumed] (issue 42, class 11): a reference run that found the attempts' checkpoint
// (a path outside {workdir}) resumed instead of training from the start: its losses after the checkpoint match
// by construction, so it says which file, never "matching"; a file nobody in the job saved (pretrained
// weights, loaded by every run) is no resume.
TEST(CheckpointResume, AReferenceRunThatResumedIsNamed) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-4.pt", 4);
  resumed(b, 5).reference().attempt().load("ck/../ck/step-4.pt", 4);
  resumed(b, 5);
  EXPECT_VERDICT(check("checkpoint_resume", b.build(), {{"reference", true}}), inconclusive,
                 "the reference run was not an uninterrupted one: it loaded ck/../ck/step-4.pt, which attempt 1 saved at step 4");

  TraceBuilder p = died_after_checkpoints();
  p.attempt().load("ck/step-4.pt", 4);
  resumed(p, 5).reference().attempt().load("pretrained/base.pt", 0);
  resumed(p, 1);
  EXPECT_VERDICT(check("checkpoint_resume", p.build(), {{"reference", true}}), pass,
                 "with loss matching the uninterrupted run at 12 steps");
}

TEST(CheckpointResume, ReferenceMissing) {
  TraceBuilder b = died_after_checkpoints();
  b.attempt().load("ck/step-4.pt", 4);
  resumed(b, 5);
  EXPECT_VERDICT(check("checkpoint_resume", b.build(), {{"reference", true}}), inconclusive, "no reference run in the trace");
}

// ---- graceful_exit ----

TEST(GracefulExit, Pass) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).output("torch.OutOfMemoryError: CUDA out of memory.\n").exit(1);
  EXPECT_VERDICT(check("graceful_exit", b.build(), {{"within", "30s"}}), pass,
                 "attempt 1 exited with code 1 with an out-of-memory message 2s after the first injected failure (limit 30s)");
}

TEST(GracefulExit, FailExitedZero) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64).step(5, 64).exit(0);
  EXPECT_VERDICT(check("graceful_exit", b.build()), fail, "attempt 1 exited with code 0 after the OOM at step 5 (batch 64)");
}

TEST(GracefulExit, FailHung) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).wait(600).timed_out();
  EXPECT_VERDICT(check("graceful_exit", b.build()), fail, "attempt 1 hung after the OOM at step 5 (batch 64): it timed out after");
}

TEST(GracefulExit, FailTooSlow) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).wait(95).exit(1, true);
  EXPECT_VERDICT(check("graceful_exit", b.build(), {{"within", "30s"}}), fail,
                 "attempt 1 took 97s to exit after the first injected failure (limit 30s)");
}

// Note [The batch the code did not report] (probe/batches.py): batches the probe inferred are named in the verdict;
// batches the code reported are not.
TEST(BatchHalving, SaysWhenTheBatchWasInferred) {
  for (const std::string from : {"inputs", "loader", "code"}) {
    TraceBuilder b;
    b.attempt().inject().event("probe", "oom", {{"step", 1}, {"batch_size", 64}, {"batch_from", from}, {"phase", "forward"},
                                                {"message", "CUDA out of memory"}, {"caught", true}});
    b.event("probe", "step", {{"step", 1}, {"batch_size", 32}, {"batch_from", from}}).exit(0);
    Verdict v = check("batch_halving", b.build());
    EXPECT_EQ(v.status, VerdictStatus::pass) << from << ": " << v.reason;
    const bool said = v.reason.find("batch sizes inferred from") != std::string::npos;
    EXPECT_EQ(said, from != "code") << v.reason;
    if (from == "loader") {
      EXPECT_NE(v.reason.find("inferred from the DataLoader's batches"), std::string::npos) << v.reason;
    }
  }
  // Judged, not inconclusive, and it can fail: an inferred batch that did not halve.
  TraceBuilder b;
  b.attempt().inject().event("probe", "oom", {{"step", 1}, {"batch_size", 64}, {"batch_from", "inputs"}, {"phase", "forward"},
                                              {"message", "CUDA out of memory"}, {"caught", true}});
  b.event("probe", "step", {{"step", 1}, {"batch_size", 57}, {"batch_from", "inputs"}}).exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build()), fail,
                 "ran at batch 57, more than 64 x 0.5 = 32 (batch sizes inferred from the model's inputs: the code reported none)");
}

// Issue 42, class 12: the probe's record of the OOM and the exit code decide; a job that logs its OOM to a
// file and exits 1 exited gracefully. A `message` the user asks for is still looked for.
TEST(GracefulExit, TheProbesRecordDecidesWithoutAMessage) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).output("Traceback: logged to train.log\n").exit(1);
  EXPECT_VERDICT(check("graceful_exit", b.build()), pass,
                 "exited with code 1 (the probe recorded the OOM; the output did not mention it)");
  EXPECT_VERDICT(check("graceful_exit", b.build(), {{"message", "gave up"}}), fail, "printed no out-of-memory message (looked for /gave up/)");
  // Exit 0 after the recorded OOM is still no graceful exit.
  TraceBuilder c;
  steps(c.attempt(), 1, 4, 64).inject().oom(5, 64, false).exit(0);
  EXPECT_VERDICT(check("graceful_exit", c.build()), fail, "exited with code 0");
}

TEST(GracefulExit, CustomMessage) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).output("giving up: GPU full\n").exit(3);
  EXPECT_VERDICT(check("graceful_exit", b.build(), {{"message", "GPU full"}}), pass, "exited with code 3");
}

// issue 12: the pattern is RE2's, matched in linear time: a backtracking pattern over a long output tail
// answers at once (std::regex took exponential time here), and case does not matter.
TEST(GracefulExit, BacktrackingPatternOverALongTailIsLinear) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).output(std::string(30000, 'x') + "\nCUDA OUT OF MEMORY\n").exit(1);
  const Trace t = b.build();
  EXPECT_VERDICT(check("graceful_exit", t, {{"message", "(x+x+)+y"}}), fail, "looked for /(x+x+)+y/");
  EXPECT_VERDICT(check("graceful_exit", t), pass, "with an out-of-memory message");
  EXPECT_VERDICT(check("graceful_exit", t, {{"message", std::string(20000, '(') + "memory" + std::string(20000, ')')}}), pass,
                 "with an out-of-memory message");
}

TEST(GracefulExit, FailCrashed) {
  TraceBuilder b;
  steps(b.attempt(), 1, 4, 64).inject().oom(5, 64, false).killed(SIGSEGV);
  EXPECT_VERDICT(check("graceful_exit", b.build()), fail, "was killed by signal 11 (SIGSEGV) after the OOM at step 5");
}

// ---- memory_stable ----

TEST(MemoryStable, PassFlat) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 20; ++s) b.step(s, 32, NAN, GiB + (s % 2) * 1000);
  b.exit(0);
  EXPECT_VERDICT(check("memory_stable", b.build()), pass, "held memory did not grow over steps 3\xE2\x80\x93" "20");
}

TEST(MemoryStable, FailLeak) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 20; ++s) b.step(s, 32, NAN, GiB + s * 4 * MiB);
  b.exit(0);
  // The failure carries the kept_with_graph finding (docs/diagnosis.md); without breakdowns, no line.
  // Issue 26 (Note [A leak is a trend]): a growth through every third of the steps that adds 68.00 MiB by
  // step 20 to the 1.01 GiB held at step 3 (7%) is under the default share ...
  // ... with a horizon of the user's (steps: 20); without one, steady growth with no plateau is a leak (issue 42).
  EXPECT_VERDICT(check("memory_stable", b.build(), {{"steps", 20}}), pass, "held memory grew steadily by 4.00 MiB per step");
  EXPECT_VERDICT(check("memory_stable", b.build()), fail, "with no plateau");
  // ... and a leak with a share of 5%, or extrapolated to a training of 1000 steps.
  EXPECT_VERDICT(check("memory_stable", b.build(), {{"steps", 1000}}), fail, "by step 1000");
  Verdict v = check("memory_stable", b.build(), {{"share", 0.05}});
  EXPECT_EQ(v.status, VerdictStatus::fail);
  EXPECT_EQ(v.reason, "held memory grew by 4.00 MiB per step over steps 3\xE2\x80\x93" "20 and went on growing through every "
                      "third of them: 68.00 MiB by step 20, 7% of the 1.01 GiB held at step 3 (a leak: 5% or more by the "
                      "job's end): tensors stay alive "
                      "step after step (+4.00 MiB per step over steps 3-20) and no line is known (no step-end breakdowns "
                      "grew: the probe writes them on the virtual device): look for losses or outputs kept without detach() "
                      "(a list, a running total) and keep loss.item() or loss.detach() instead");
  // The user's absolute limit: a looser one lets it pass, a tighter one fails it.
  EXPECT_VERDICT(check("memory_stable", b.build(), {{"growth_per_step", "8MiB"}}), pass, "grew by 4.00 MiB per step");
  EXPECT_VERDICT(check("memory_stable", b.build(), {{"growth_per_step", "1MiB"}}), fail, "(limit 1.00 MiB)");
}

TEST(MemoryStable, FailLeakFromSamples) {
  // No `allocated` in the step events: the shim's samples nearest each step are used.
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 10; ++s) b.sample(static_cast<uint64_t>(64 * MiB + s * 3 * MiB)).step(s, 32);
  b.exit(0);
  EXPECT_VERDICT(check("memory_stable", b.build()), fail, "grew by 3.00 MiB per step over steps 3\xE2\x80\x93" "10");
}

TEST(MemoryStable, FailNotBackAfterRecovery) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 10; ++s) b.step(s, 32, NAN, GiB);
  b.inject().oom(11, 32);
  for (int64_t s = 11; s <= 14; ++s) b.step(s, 32, NAN, 2 * GiB);
  b.exit(0);
  EXPECT_VERDICT(check("memory_stable", b.build(), {{"growth_per_step", "200MiB"}}), fail,
                 "after the OOM at step 11 held memory stayed at 2.00 GiB or more for 3 steps (1.00 GiB before the fault)");
  // Without the recovery check only the trend counts.
  EXPECT_VERDICT(check("memory_stable", b.build(), {{"growth_per_step", "200MiB"}, {"after_recovery", false}}), pass, "limit 200.00 MiB");
}

// Note [The golden level]: a one-off leak of the recovery, flat afterwards, passes the slope and the
// return-to-level checks under their 1 MiB allowance; against a run without faults it fails.
TEST(MemoryStable, GoldenLevel) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 5; ++s) b.step(s, 32, NAN, GiB);
  b.inject().oom(6, 32);
  for (int64_t s = 6; s <= 10; ++s) b.step(s, 32, NAN, GiB + 512 * 1024);
  b.exit(0);
  const Trace t = b.build();
  EXPECT_VERDICT(check("memory_stable", t), pass, "returned to its pre-fault level");
  nlohmann::json golden = {{"9", GiB}, {"10", GiB}, {"11", 1}};  // step 11 never ran: step 10 is compared
  EXPECT_VERDICT(check("memory_stable", t, {{"golden", golden}}), fail,
                 "at step 10 the job held 512.00 KiB more than the same job without faults (1.00 GiB against 1.00 GiB, "
                 "tolerance 64.00 KiB): the recovery kept memory it should have freed");
  EXPECT_VERDICT(check("memory_stable", t, {{"golden", golden}, {"golden_tolerance", "1MiB"}}), pass,
                 "back to the level of the run without faults by step 10");
  // Below the golden level (a halved batch holds less) is fine; no common step compares nothing.
  EXPECT_VERDICT(check("memory_stable", t, {{"golden", {{"10", 2 * GiB}}}}), pass, "by step 10");
  Verdict none = check("memory_stable", t, {{"golden", {{"40", 1}}}});
  EXPECT_EQ(none.status, VerdictStatus::pass);
  EXPECT_EQ(none.reason.find("without faults"), std::string::npos) << none.reason;
}

TEST(MemoryStable, PassBackAfterRecovery) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 10; ++s) b.step(s, 32, NAN, GiB);
  b.inject().oom(11, 32);
  for (int64_t s = 11; s <= 14; ++s) b.step(s, 16, NAN, GiB - 100 * MiB);
  b.exit(0);
  EXPECT_VERDICT(check("memory_stable", b.build()), pass, "returned to its pre-fault level after the OOM at step 11");
}

TEST(MemoryStable, InconclusiveTooFewSteps) {
  Trace t = TraceBuilder().attempt().step(1, 32, NAN, GiB).step(2, 32, NAN, GiB).step(3, 32, NAN, GiB).exit(0).build();
  EXPECT_VERDICT(check("memory_stable", t), inconclusive, "too few steps with memory figures");
}

// ---- peak_below ----

TEST(PeakBelow, Pass) {
  Trace t = TraceBuilder().attempt().sample(2 * GiB, 3 * GiB).step(1).exit(0).build();
  EXPECT_VERDICT(check("peak_below", t, "8GiB"), pass, "peak memory held was 3.00 GiB, within the budget of 8.00 GiB");
}

TEST(PeakBelow, Fail) {
  Trace t = TraceBuilder().attempt().sample(2 * GiB).step(1, 32, NAN, 9 * GiB).exit(0).build();
  EXPECT_VERDICT(check("peak_below", t, "8GiB"), fail,
                 "peak memory held reached 9.00 GiB (attempt 1, allocated at step 1), above the budget of 8.00 GiB");
}

TEST(PeakBelow, FailFromShimExit) {
  Trace t = TraceBuilder().attempt().step(1).event("shim", "shim_exit", {{"device", 0}, {"peak", 10 * GiB}}).exit(0).build();
  EXPECT_VERDICT(check("peak_below", t, {{"bytes", "8GiB"}}), fail, "reached 10.00 GiB");
}

TEST(PeakBelow, InconclusiveWithoutFigures) {
  EXPECT_VERDICT(check("peak_below", TraceBuilder().attempt().step(1).exit(0).build(), "8GiB"), inconclusive, "no memory figures");
}

// ---- no_hang ----

TEST(NoHang, Pass) {
  TraceBuilder b;
  steps(b.attempt(), 1, 5).wait(300).exit(0);  // a long final save after the last step is fine
  EXPECT_VERDICT(check("no_hang", b.build()), pass, "no gap between steps was longer than 60s (longest 1s)");
}

// Issue 42, class 8: exit 0 excuses the time after the last step only when the target was reached.
TEST(NoHang, AnEarlyExitDoesNotExcuseTheFinalGap) {
  TraceBuilder b;
  b.target(6);
  steps(b.attempt(), 1, 2).inject().oom(3, 8).wait(6).exit(0);
  EXPECT_VERDICT(check("no_hang", b.build(), {{"stall", "2s"}}), fail, "no step after step 2 for");
  TraceBuilder c;
  c.target(5);
  steps(c.attempt(), 1, 5).wait(300).exit(0);
  EXPECT_VERDICT(check("no_hang", c.build()), pass, "no gap between steps was longer than 60s (longest 1s)");
  // With no target, the sentence says that completion was not checked.
  TraceBuilder d;
  steps(d.attempt(), 1, 2).wait(6).exit(0);
  EXPECT_VERDICT(check("no_hang", d.build(), {{"stall", "2s"}}), pass, "completion was not checked");
}

TEST(NoHang, FailStalledBetweenSteps) {
  TraceBuilder b;
  steps(b.attempt(), 1, 7).phase("backward").wait(93).step(8).exit(0);
  Verdict v = check("no_hang", b.build());
  EXPECT_EQ(v.status, VerdictStatus::fail);
  EXPECT_EQ(v.reason, "no step after step 7 for 95s (stall limit 60s): hung in phase backward");
}

TEST(NoHang, FailStalledUntilTimeout) {
  TraceBuilder b;
  steps(b.attempt(), 1, 3).inject().oom(4, 8).wait(120).timed_out();
  EXPECT_VERDICT(check("no_hang", b.build(), {{"stall", "90s"}}), fail,
                 "no step after step 3 for 123s (stall limit 90s) before it timed out after");
  EXPECT_VERDICT(check("no_hang", b.build(), {{"stall", "90s"}}), fail, "hung in phase forward");
}

TEST(NoHang, InconclusiveWithoutSteps) {
  EXPECT_VERDICT(check("no_hang", TraceBuilder().attempt().wait(30).exit(0).build()), inconclusive, "no step was reported");
}

}  // namespace
}  // namespace oomh
