// Issue 26: verdicts from evidence, not coincidence. For each class, a trace the verdict must not pass (or
// must fail) and a correct program written another way that must pass.
//   - an OOM is an event (Note [An OOM is an event] in policies/src/trace.cpp);
//   - a leak is a trend (Note [A leak is a trend] in policies/src/checks_memory.cpp);
//   - explanations that are true (Note [When nothing fits] in policies/src/checks_recovery.cpp, the
//     batch_too_large finding, messages for a job with a cap and no fault rules).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "check_policy.h"
#include "oomharness/policies/findings.h"
#include "oomharness/policies/registry.h"
#include "trace_builder.h"

namespace oomh {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::check;
using testing::TraceBuilder;

constexpr int64_t MiB = 1024 * 1024;
constexpr int64_t GiB = 1024 * MiB;

// What the shim writes as it starts: its rules and the cap on device 0.
TraceBuilder& shim_start(TraceBuilder& b, int rules, int64_t cap) {
  return b.event("shim", "shim_start", {{"rules", rules}, {"cap", cap}, {"plan", "accepted"}});
}

// ---- an OOM is an event ------------------------------------------------------------------------------

// A job under a cap it never reached, dying of an unrelated error whose message mentions memory (the
// runner's detector matches "out of memory"): nothing recorded an OOM.
Trace unrelated_death_under_a_cap() {
  TraceBuilder b;
  shim_start(b.attempt(), 0, 6 * GiB);
  for (int64_t s = 1; s <= 4; ++s) b.step(s, 64);
  b.output("RuntimeError: DataLoader worker (pid 4242) ran out of memory reading shard 7\n").exit(1, true);
  return b.build();
}

TEST(OomIsAnEvent, GracefulExitDoesNotPassOnOutputAlone) {
  const Trace t = unrelated_death_under_a_cap();
  EXPECT_FALSE(t.attempts[0].ended_by_oom());
  Verdict v = check("graceful_exit", t);
  EXPECT_EQ(v.status, VerdictStatus::inconclusive) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("no out-of-memory error happened"));
  EXPECT_THAT(v.reason, HasSubstr("never reached its cap of 6.00 GiB"));
  EXPECT_THAT(v.reason, HasSubstr("output mentions an out-of-memory error, but neither the shim nor the probe recorded one"));
  // The other checks that need an OOM do not pass on it either.
  for (const char* name : {"batch_halving", "empty_cache_retry", "checkpoint_resume", "effective_batch"})
    EXPECT_NE(check(name, t).status, VerdictStatus::pass) << name;
  // `exit` says the message is not an OOM the trace vouches for.
  EXPECT_VERDICT(check("exit", t), fail, "neither the shim nor the probe recorded");
}

// A job that caught its OOM, went on, then ended with an error that is not an OOM (a library's abort at exit,
// torch 2.13's gloo worker taking the GIL during finalisation): `exit` fails, and says the OOM was met and
// caught, not that nothing recorded it.
TEST(OomIsAnEvent, ExitAfterACaughtOomSaysItWasCaught) {
  TraceBuilder b;
  b.attempt().step(1, 64).inject_at(2).inject_at(2).oom(2, 64, true);
  for (int64_t s = 2; s <= 4; ++s) b.step(s, 32);
  b.output("rank 1: out of memory at step 2, halving to 32\nterminate called without an active exception\n").exit(1, true);
  const Trace t = b.build();
  EXPECT_FALSE(t.attempts[0].ended_by_oom());
  Verdict v = check("exit", t);
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("were caught and it went on past them"));
  EXPECT_THAT(v.reason, Not(HasSubstr("neither the shim nor the probe")));
  EXPECT_THAT(v.reason, Not(HasSubstr("completed its last step")));  // no target: nothing to say about it
  // With a target the job reached, the failure came after training.
  b.target(4);
  Verdict after = check("exit", b.build());
  EXPECT_VERDICT(after, fail, "it had completed its last step (step 4 of 4), so it failed in what runs after training");
  // One that stopped short of it failed in training: no such words.
  b.target(5);
  EXPECT_THAT(check("exit", b.build()).reason, Not(HasSubstr("completed its last step")));
}

// The same program without a probe, written another way: the cap was reached (the shim refused an
// allocation it never got past) and it died printing PyTorch's message: a graceful exit.
TEST(OomIsAnEvent, GracefulExitPassesOnTheShimsRefusalWithoutAProbe) {
  TraceBuilder b;
  shim_start(b.attempt(), 0, 6 * GiB);
  for (int64_t s = 1; s <= 4; ++s) b.step(s, 64);
  b.inject_at(5).inject_at(5).output("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n").exit(1, true);
  const Trace t = b.build();
  EXPECT_TRUE(t.attempts[0].ended_by_oom());
  EXPECT_VERDICT(check("graceful_exit", t), pass, "exited with code 1 with an out-of-memory message");
}

// ... and with the probe, whose uncaught `oom` is the record, whatever the output says.
TEST(OomIsAnEvent, GracefulExitPassesOnTheProbesRecord) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 4; ++s) b.step(s, 64);
  b.oom(5, 64, false).output("torch.OutOfMemoryError: CUDA out of memory.\n").exit(1, true);
  EXPECT_VERDICT(check("graceful_exit", b.build()), pass, "with an out-of-memory message");
}

// A refusal the allocator absorbed (a step completed after it), then a death printing an OOM-like message:
// the death is not that refusal's.
TEST(OomIsAnEvent, AnAbsorbedRefusalDoesNotMakeALaterDeathAnOom) {
  TraceBuilder b;
  b.attempt().step(1, 64).inject_at(2).step(2, 64).step(3, 64).output("host out of memory\n").exit(1, true);
  const Trace t = b.build();
  EXPECT_FALSE(t.attempts[0].ended_by_oom());
  EXPECT_NE(check("graceful_exit", t).status, VerdictStatus::pass);
  EXPECT_EQ(check("oom_visible", t).status, VerdictStatus::fail);
}

// checkpoint_resume: an attempt that died of something else and was restarted did not "die of the OOM".
TEST(OomIsAnEvent, CheckpointResumeNeedsARecordedDeath) {
  TraceBuilder b;
  b.attempt().step(1).step(2).save("ckpt.pt", 2).step(3).output("CUDA error: an illegal memory access (out of memory?)\n").exit(1, true);
  b.attempt().load("ckpt.pt", 2).step(3).step(4).exit(0);
  EXPECT_NE(check("checkpoint_resume", b.build()).status, VerdictStatus::pass);
  // The same resume after a death the shim recorded passes.
  TraceBuilder ok;
  ok.attempt().step(1).step(2).save("ckpt.pt", 2).step(3).inject_at(4).inject_at(4).exit(1, true);
  ok.attempt().load("ckpt.pt", 2).step(3).step(4).exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", ok.build()), pass, "attempt 2 resumed from ckpt.pt (step 2) at step 3");
}

// A halving trainer without a probe (its steps, batch and caught OOM read from its output): the shim's
// refusal is the record, the printed message says the code saw it. Without the refusal, the same output is
// no OOM.
Trace halving_without_probe(bool refused) {
  TraceBuilder b;
  b.attempt()
      .observed_line("step 3 bs 64", {{"step", "3"}, {"batch_size", "64"}})
      .observed_line("step 4 bs 64", {{"step", "4"}, {"batch_size", "64"}});
  if (refused) b.inject().inject();
  b.observed_line("caught CUDA out of memory, halving", {{"oom", "1"}})
      .observed_line("batch size now 32", {{"batch_size", "32"}})
      .observed_line("step 5", {{"step", "5"}})
      .exit(0, true);
  return b.build();
}

TEST(OomIsAnEvent, CaughtWithoutAProbeNeedsARefusal) {
  EXPECT_VERDICT(check("batch_halving", halving_without_probe(true)), pass, "(64 -> 32)");
  EXPECT_VERDICT(check("oom_visible", halving_without_probe(true)), pass, "2 reached the code");
  EXPECT_VERDICT(check("batch_halving", halving_without_probe(false)), inconclusive, "no out-of-memory error happened");
}

// ---- a leak is a trend -------------------------------------------------------------------------------

// A CI-sized model (16 MiB held at a step's end) that keeps its loss with the graph: 0.62 MiB per step.
Trace small_model(double leak_per_step, int64_t steps = 20, int64_t base = 16 * MiB) {
  TraceBuilder b;
  b.target(steps).attempt();
  for (int64_t s = 1; s <= steps; ++s)
    b.step(s, 32, NAN, base + static_cast<int64_t>(leak_per_step * static_cast<double>(s)) + (s % 3) * 512);
  b.exit(0);
  return b.build();
}

TEST(LeakIsATrend, SmallModelsLeakIsFound) {
  Verdict v = check("memory_stable", small_model(0.62 * MiB));
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("held memory grew by 0.62 MiB per step over steps 3\xE2\x80\x93" "20"));
  EXPECT_THAT(v.reason, HasSubstr("went on growing through every third of them"));
  // The same leak in a model 1000 times larger is found the same way when it adds the same share.
  EXPECT_EQ(check("memory_stable", small_model(620 * MiB, 20, 16000 * MiB)).status, VerdictStatus::fail);
  // The kept_with_graph finding reads the same rule.
  bool found = false;
  for (const Finding& f : diagnose(small_model(0.62 * MiB))) found = found || f.rule == "kept_with_graph";
  EXPECT_TRUE(found);
}

TEST(LeakIsATrend, FlatMemoryWithRoundingPasses) {
  // PyTorch's 512-byte rounding and a step whose end holds a block more now and then: no trend.
  EXPECT_VERDICT(check("memory_stable", small_model(0)), pass, "held memory did not grow");
}

// The allocator caching its working set: reserved (the shim's samples, no `allocated`) grows by 2 MiB and
// 20 MiB segments over the first steps, then stays. Not a leak, though the slope is well above zero.
TEST(LeakIsATrend, CachingWarmUpIsNotALeak) {
  TraceBuilder b;
  b.target(20).attempt();
  const int64_t reserved[] = {20, 42, 62, 84, 86, 106, 108, 108, 108, 108, 108, 108, 108, 108, 108, 108, 108, 108, 108, 108};
  for (int64_t s = 1; s <= 20; ++s) b.sample(static_cast<uint64_t>(reserved[s - 1] * MiB)).step(s, 32);
  b.exit(0);
  Verdict v = check("memory_stable", b.build());
  EXPECT_EQ(v.status, VerdictStatus::pass) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("but not steadily"));
  // The old absolute rule called this a leak (about 2.5 MiB per step over steps 3-20).
  EXPECT_EQ(check("memory_stable", b.build(), {{"growth_per_step", "1MiB"}}).status, VerdictStatus::fail);
}

// A leak seen through the samples' segments: a staircase, growing in every third.
TEST(LeakIsATrend, SegmentStaircaseLeakIsFound) {
  TraceBuilder b;
  b.target(24).attempt();
  for (int64_t s = 1; s <= 24; ++s) b.sample(static_cast<uint64_t>((100 + 20 * (s / 4)) * MiB)).step(s, 32);
  b.exit(0);
  EXPECT_VERDICT(check("memory_stable", b.build()), fail, "went on growing through every third of them");
}

// A steady growth too small to matter over the job's length passes, and fails once the user says how long
// the real training is, or when it would reach the job's cap within the job.
TEST(LeakIsATrend, ExtrapolatedToTheJobsLengthOrCap) {
  const Trace t = small_model(16 * 1024);  // 16 KiB per step on 16 MiB: 2% by step 20
  // Issue 42, class 7: with no plateau, steady growth is a leak in the training the run stands for ...
  EXPECT_VERDICT(check("memory_stable", t), fail, "with no plateau");
  // ... unless the user says how long that training is: 2% by step 20 is under the share.
  EXPECT_VERDICT(check("memory_stable", t, {{"steps", 20}}), pass, "grew steadily by 0.02 MiB per step");
  EXPECT_VERDICT(check("memory_stable", t, {{"steps", 100000}}), fail, "by step 100000");
  // 160 KiB per step on 64 MiB: 2.66 MiB (4%) by step 20, a leak once the share asked for is 1%.
  const Trace larger = small_model(160 * 1024, 20, 64 * MiB);
  EXPECT_VERDICT(check("memory_stable", larger, {{"steps", 20}}), pass, "under the 10% that makes a leak");
  EXPECT_VERDICT(check("memory_stable", larger), fail, "with no plateau");
  EXPECT_VERDICT(check("memory_stable", larger, {{"share", 0.01}}), fail, "went on growing");
  // Under a cap just above what it holds, at 4 MiB per step over a 100-step job.
  TraceBuilder b;
  shim_start(b.target(100).attempt(), 0, 1100 * MiB);
  for (int64_t s = 1; s <= 20; ++s) b.step(s, 32, NAN, GiB + s * 4 * MiB);
  b.exit(0);
  EXPECT_VERDICT(check("memory_stable", b.build(), {{"share", 10.0}}), fail, "reaches the job's cap of 1.07 GiB by step");
}

// A job that holds 76 KiB and grows 2 KiB a step (an emulated trainer's run without faults, a false red once):
// 16% by its end, but less than one of the allocator's 2 MiB segments: no leak.
TEST(LeakIsATrend, GrowthUnderOneSegmentIsNoLeak) {
  TraceBuilder b;
  b.target(6).attempt();
  for (int64_t s = 1; s <= 6; ++s) b.step(s, 8, NAN, 70 * 1024 + s * 2048);
  b.exit(0);
  EXPECT_VERDICT(check("memory_stable", b.build()), pass, "less than one of the allocator's 2 MiB segments");
  EXPECT_EQ(check("memory_stable", b.build(), {{"steps", 100000}}).status, VerdictStatus::fail);
}

// Issue 42, class 7: a loss kept with its graph grows 5 MiB a step over a 6-step job, 3% of what it holds. Steady
// growth with no plateau never passes: too few steps to tell it from warm-up is inconclusive, and says how many.
TEST(LeakIsATrend, SteadyGrowthInAShortRunIsNeverAPass) {
  TraceBuilder b;
  b.target(6).attempt();
  for (int64_t s = 1; s <= 6; ++s) b.step(s, 32, NAN, 800 * MiB + s * 5 * MiB);
  b.exit(0);
  EXPECT_VERDICT(check("memory_stable", b.build()), inconclusive, "too few steps to tell growth from warm-up: run 10 steps");
  // The same growth over 12 steps fails; a horizon of the user's judges it by share.
  TraceBuilder c;
  c.target(12).attempt();
  for (int64_t s = 1; s <= 12; ++s) c.step(s, 32, NAN, 800 * MiB + s * 5 * MiB);
  c.exit(0);
  EXPECT_VERDICT(check("memory_stable", c.build()), fail, "the training this run stands for is longer");
  EXPECT_VERDICT(check("memory_stable", c.build(), {{"steps", 12}}), pass, "under the 10% that makes a leak");
  // A warm-up that levels off is no leak (CachingWarmUpIsNotALeak), nor is flat memory.
  TraceBuilder d;
  d.target(6).attempt();
  for (int64_t s = 1; s <= 6; ++s) d.step(s, 32, NAN, 800 * MiB);
  d.exit(0);
  EXPECT_VERDICT(check("memory_stable", d.build()), pass, "did not grow");
}

// A user's absolute limit stays: given, it alone decides.
TEST(LeakIsATrend, AbsoluteLimitIsAnOption) {
  EXPECT_VERDICT(check("memory_stable", small_model(0.62 * MiB), {{"growth_per_step", "1MiB"}}), pass, "(limit 1.00 MiB)");
  EXPECT_VERDICT(check("memory_stable", small_model(0.62 * MiB), {{"growth_per_step", "512KiB"}}), fail, "(limit 0.50 MiB)");
}

// ---- explanations that are true ----------------------------------------------------------------------

nlohmann::json oom_breakdown(int64_t step, int64_t batch, int64_t params, int64_t grads, int64_t state, int64_t other,
                             int64_t total) {
  return {{"at", "oom"}, {"step", step}, {"phase", "optimizer"}, {"batch_size", batch},
          {"allocated", params + grads + state + other}, {"reserved", params + grads + state + other},
          {"total", total}, {"parameters", params}, {"gradients", grads}, {"optimizer_state", state},
          {"workspace", 0}, {"other", other}, {"exact", true}};
}

// A correct halving trainer under a cap its fixed memory fills: every retry runs out, down to batch 1.
TEST(TrueExplanations, NothingFitsIsInconclusiveAndSaysWhy) {
  TraceBuilder b;
  shim_start(b.attempt(), 0, 64 * MiB);
  for (int64_t batch = 64; batch >= 1; batch /= 2) {
    b.inject_at(1).oom(1, batch, batch > 1);
    if (batch == 1) b.event("probe", "memory_breakdown", oom_breakdown(1, 1, 20 * MiB, 20 * MiB, 40 * MiB, 0, 64 * MiB));
  }
  b.exit(1, true);
  Verdict v = check("batch_halving", b.build());
  EXPECT_EQ(v.status, VerdictStatus::inconclusive) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("nothing fits under the job's cap of 64.00 MiB"));
  EXPECT_THAT(v.reason, HasSubstr("64 -> 32 -> 16 -> 8 -> 4 -> 2 -> 1, down to the floor of 1"));
  EXPECT_THAT(v.reason, HasSubstr("optimizer state 40.00 MiB"));
  EXPECT_THAT(v.reason, Not(HasSubstr("a batch of")));
}

// The same job that does not halve its retries fails, as before.
TEST(TrueExplanations, NoHalvingAndNoStepStillFails) {
  TraceBuilder b;
  shim_start(b.attempt(), 0, 64 * MiB);
  for (int k = 0; k < 4; ++k) b.inject_at(1).oom(1, 64, k < 3);
  b.exit(1, true);
  EXPECT_VERDICT(check("batch_halving", b.build()), fail, "OOM at step 1 (batch 64) was caught, but no step completed afterwards");
}

// The breakdown alone can say it: the memory no batch size changes fills the device.
TEST(TrueExplanations, FixedMemoryFillingTheCapIsInconclusive) {
  TraceBuilder b;
  b.attempt().inject_at(1).oom(1, 8, false);
  b.event("probe", "memory_breakdown", oom_breakdown(1, 8, 30 * MiB, 30 * MiB, 60 * MiB, 0, 100 * MiB));
  b.exit(1, true);
  EXPECT_VERDICT(check("batch_halving", b.build()), inconclusive, "the memory no batch size changes fills it alone");
  // ... and no finding promises a batch that fits.
  for (const Finding& f : diagnose(b.build())) EXPECT_THAT(f.sentence, Not(HasSubstr("fits under"))) << f.rule;
}

// An OOM before the first backward: no gradients or optimizer state yet, so no batch is promised to fit.
TEST(TrueExplanations, NoBatchPromisedBeforeTheStateExists) {
  TraceBuilder b;
  b.attempt().inject_at(1).oom(1, 4096, false);
  b.event("probe", "memory_breakdown", oom_breakdown(1, 4096, 30 * MiB, 0, 0, 50 * MiB, 100 * MiB));
  b.exit(1, true);
  bool said = false;
  for (const Finding& f : diagnose(b.build()))
    if (f.rule == "batch_too_large") {
      said = true;
      EXPECT_THAT(f.sentence, Not(HasSubstr("a batch of")));
      EXPECT_THAT(f.sentence, HasSubstr("at most 2048 samples could fit"));
      EXPECT_THAT(f.sentence, HasSubstr("it ran out before they existed"));
    }
  EXPECT_TRUE(said);
}

// A job with a cap and no fault rules is told about its cap, not about a fault plan it does not have.
TEST(TrueExplanations, CapOnlyJobsAreToldAboutTheCap) {
  TraceBuilder b;
  shim_start(b.attempt(), 0, 8 * GiB);
  b.sample(3 * GiB).step(1, 32).step(2, 32).exit(0);
  Verdict v = check("oom_visible", b.build());
  EXPECT_EQ(v.status, VerdictStatus::inconclusive);
  EXPECT_THAT(v.reason, HasSubstr("no fault rules and never reached its cap of 8.00 GiB (it held 3.00 GiB at most)"));
  EXPECT_THAT(v.reason, Not(HasSubstr("fault plan")));
  EXPECT_VERDICT(check("batch_halving", b.build()), inconclusive, "never reached its cap of 8.00 GiB");
  // With fault rules, the plan is what never matched.
  TraceBuilder r;
  shim_start(r.attempt(), 2, 0);
  r.step(1, 32).exit(0);
  EXPECT_VERDICT(check("oom_visible", r.build()), inconclusive, "the fault plan never matched an allocation");
}

}  // namespace
}  // namespace oomh
