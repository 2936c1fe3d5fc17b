// Issue 26: verdicts from evidence. Traces as the probe writes them with `data` (what each step and OOM
// trained on, Note [A step is its data]) and checkpoint digests (Note [A checkpoint is its content]): a
// step number completing again, a path or a step count proves nothing by itself.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "check_policy.h"
#include "oomharness/policies/registry.h"
#include "trace_builder.h"

namespace oomh {
namespace {

using ::testing::HasSubstr;
using testing::TraceBuilder;
using testing::check;

// A `data` field: `samples` samples whose digests add up to `digest`.
nlohmann::json data(int64_t samples, uint64_t digest, nlohmann::json shape = nullptr, const std::string& loader = "",
                    const std::string& from = "loader", int dim = 0) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  nlohmann::json d{{"samples", samples}, {"digest", hex}, {"per_sample", true}, {"from", from}, {"dim", dim}};
  d["shape"] = shape.is_null() ? nlohmann::json::array({samples, 64}) : shape;
  if (!loader.empty()) d["loader"] = loader;
  return d;
}

// Batch k's digest (any distinct numbers do: the policies only add and compare them).
uint64_t batch(int k) { return 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(k + 1); }

TraceBuilder& step(TraceBuilder& b, int64_t n, int64_t bs, nlohmann::json d) {
  return b.event("probe", "step", {{"step", n}, {"batch_size", bs}, {"data", std::move(d)}});
}
TraceBuilder& oom(TraceBuilder& b, int64_t n, int64_t bs, nlohmann::json d, bool caught = true) {
  return b.event("probe", "oom", {{"step", n}, {"batch_size", bs}, {"phase", "backward"}, {"message", "CUDA out of memory"},
                                  {"caught", caught}, {"data", std::move(d)}});
}
std::string loader(int k) { return std::to_string(32 * k) + "-" + std::to_string(32 * k + 31); }

// ---- empty_cache_retry: the retried step is the failed batch ----

TEST(EvidenceRetry, ADroppedBatchFailsAndIsNamed) {
  TraceBuilder b;
  b.target(6).attempt();
  for (int k = 0; k < 4; ++k) step(b, k + 1, 32, data(32, batch(k), nullptr, loader(k)));
  b.inject().inject();
  oom(b, 5, 32, data(32, batch(4), nullptr, loader(4)));
  b.empty_cache(8 << 20, 6 << 20);
  // The probe counts optimizer steps: the next batch completes "step 5".
  step(b, 5, 32, data(32, batch(5), nullptr, loader(5)));
  step(b, 6, 32, data(32, batch(6), nullptr, loader(6)));
  b.exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), fail,
                 "the next step that completed (step 5) trained on the batch of samples 160-191, so the batch of samples 128-159 was "
                 "dropped instead of retried");
}

TEST(EvidenceRetry, TheSameBatchRetriedPasses) {
  TraceBuilder b;
  b.target(6).attempt();
  for (int k = 0; k < 4; ++k) step(b, k + 1, 32, data(32, batch(k)));
  b.inject().inject();
  oom(b, 5, 32, data(32, batch(4)));
  b.empty_cache(8 << 20, 6 << 20);
  step(b, 5, 32, data(32, batch(4)));
  step(b, 6, 32, data(32, batch(5)));
  b.exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), pass, "the same step then completed on the same data");
}

TEST(EvidenceRetry, AStepOfSeveralForwardsRedoneWholePasses) {
  // Gradient accumulation: the OOM hit the second of four micro-batches; the retry redid all four.
  TraceBuilder b;
  b.target(2).attempt();
  nlohmann::json failed = data(16, batch(0) + batch(1));
  failed["parts"] = {"9e3779b97f4a7c15", "3c6ef372fe94f82a"};
  oom(b, 1, 8, failed);
  b.empty_cache(8 << 20, 6 << 20);
  nlohmann::json whole = data(32, batch(0) + batch(1) + batch(2) + batch(3));
  whole["parts"] = {"9e3779b97f4a7c15", "3c6ef372fe94f82a", "daa66d2c7ddf743f", "78dde6e5fd29f054"};
  step(b, 1, 8, whole);
  step(b, 2, 8, data(32, batch(9)));
  b.exit(0);
  EXPECT_VERDICT(check("empty_cache_retry", b.build()), pass, "on the same data");
}

// ---- batch_halving: no_sample_loss from the data, the batch dimension from the shapes ----

TEST(EvidenceHalving, TheFailedBatchRedoneInHalvesPasses) {
  TraceBuilder b;
  b.target(4).attempt();
  step(b, 1, 32, data(32, batch(0)));
  b.inject().inject();
  oom(b, 2, 32, data(32, batch(1)));
  step(b, 2, 16, data(16, 7));
  step(b, 3, 16, data(16, batch(1) - 7));
  step(b, 4, 16, data(32, batch(2)));
  b.exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build(), {{"no_sample_loss", true}}), pass, "(32 -> 16)");
}

std::string hex(uint64_t d) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(d));
  return text;
}

TEST(EvidenceHalving, HalvingTwiceWithinAStepPasses) {
  // 32 fails; its first half (16) fails again; the step is then redone as four pieces of 8.
  const uint64_t a1 = 11, a2 = 22, b1 = 33, b2 = 44;
  TraceBuilder b;
  b.target(3).attempt();
  step(b, 1, 32, data(32, batch(0)));
  b.inject().inject();
  oom(b, 2, 32, data(32, a1 + a2 + b1 + b2));
  b.inject().inject();
  oom(b, 2, 16, data(16, a1 + a2, nlohmann::json::array({16, 64})));
  nlohmann::json redone = data(32, a1 + a2 + b1 + b2, nlohmann::json::array({8, 64}));
  redone["parts"] = {hex(a1), hex(a2), hex(b1), hex(b2)};
  step(b, 2, 8, redone);
  step(b, 3, 8, data(32, batch(2)));
  b.exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build(), {{"no_sample_loss", true}}), pass, "(32 -> 8 -> 8)");
}

TEST(EvidenceHalving, OtherSamplesOfTheRightCountFail) {
  // 32 samples after the OOM, as many as failed: the count alone passed; they were the next batch's.
  TraceBuilder b;
  b.target(4).attempt();
  step(b, 1, 32, data(32, batch(0)));
  b.inject().inject();
  oom(b, 2, 32, data(32, batch(1)));
  b.samples(32);
  step(b, 2, 16, data(32, batch(2)));
  step(b, 3, 16, data(32, batch(3)));
  step(b, 4, 16, data(32, batch(4)));
  b.exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build(), {{"no_sample_loss", true}}), fail,
                 "was never trained on again: the steps after the OOM trained on other samples, so 32 samples were dropped");
}

TEST(EvidenceHalving, ASequenceFirstBatchIsReadFromItsDimension) {
  // A sequence-first model (nn.LSTM or nn.Transformer without batch_first): the probe reads dimension 1.
  TraceBuilder b;
  b.target(3).attempt();
  step(b, 1, 32, data(32, batch(0), {12, 32, 16}, "", "sequence_first", 1));
  b.inject().inject();
  oom(b, 2, 32, data(32, batch(1), {12, 32, 16}, "", "sequence_first", 1));
  step(b, 2, 16, data(32, batch(1), {12, 16, 16}, "", "sequence_first", 1));
  step(b, 3, 16, data(16, batch(2), {12, 16, 16}, "", "sequence_first", 1));
  b.exit(0);
  EXPECT_VERDICT(check("batch_halving", b.build()), pass, "(32 -> 16)");
}

TEST(EvidenceHalving, HalvingTheSequenceIsNotHalvingTheBatch) {
  // Issue 42, class 4: the code halved its sequence length (256 -> 128) and kept its batch of 64. The dimension
  // that changed is no evidence of the batch (Note [Which dimension is the batch] in probe/evidence.py): 64 -> 64.
  TraceBuilder b;
  b.target(3).attempt();
  step(b, 1, 64, data(64, batch(0), {64, 256}, "", "first", 0));
  b.inject().inject();
  oom(b, 2, 64, data(64, batch(1), {64, 256}, "", "first", 0));
  step(b, 2, 64, data(64, batch(5), {64, 128}, "", "first", 0));
  step(b, 3, 64, data(64, batch(6), {64, 128}, "", "first", 0));
  b.exit(0);
  const Verdict v = check("batch_halving", b.build());
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("64")) << v.reason;
  EXPECT_THAT(v.reason, ::testing::Not(HasSubstr("256 -> 128"))) << v.reason;
}

// ---- checkpoint_resume: what was written and what was loaded ----

nlohmann::json saved(const std::string& path, int64_t step, const std::string& digest, int64_t completed) {
  return {{"path", path}, {"step", step}, {"digest", digest}, {"completed", completed}, {"tensors", 8}};
}
nlohmann::json model_state(std::vector<std::pair<std::vector<std::string>, int>> from, int unmatched = 0) {
  nlohmann::json groups = nlohmann::json::array();
  int total = unmatched;
  for (auto& [digests, n] : from) {
    groups.push_back({{"digests", digests}, {"tensors", n}});
    total += n;
  }
  return {{"step", 7}, {"model", "Sequential"}, {"tensors", total}, {"unmatched", unmatched}, {"from", groups}};
}

// Attempt 1 saves atomically (last.pt.tmp renamed to last.pt) at steps 2, 4 and 6, and dies at step 7; with
// `init`, it saved a pretrained init.pt first and loads it at every start.
TraceBuilder died_after_atomic_saves(bool init = false) {
  TraceBuilder b;
  b.target(10).attempt();
  if (init) b.event("probe", "checkpoint_save", saved("init.pt", 0, "1111", 0));
  for (int k = 0; k < 6; ++k) {
    step(b, k + 1, 16, data(16, batch(k)));
    if ((k + 1) % 2 == 0) b.event("probe", "checkpoint_save", saved("ckpt/last.pt.tmp", k + 1, "c" + std::to_string(k + 1), k + 1));
  }
  b.inject();
  oom(b, 7, 16, data(16, batch(6)), false);
  return b.exit(1, true);
}

TEST(EvidenceResume, AnAtomicSaveResumedPasses) {
  TraceBuilder b = died_after_atomic_saves();
  b.attempt().event("probe", "checkpoint_load", {{"path", "/run/ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
  b.event("probe", "model_state", model_state({{{"c6"}, 4}}));
  for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), pass,
                 "attempt 2 resumed from /run/ckpt/last.pt (the state saved at step 6 as ckpt/last.pt.tmp, which its model held) on the "
                 "batch that followed it after the OOM ended attempt 1");
}

// Note [What a resume restored]: attempt 1's optimizer held state when it saved (Adam's moments); attempt 2
// restored `restored` before its first step.
Trace resumed_restoring(const nlohmann::json& restored, bool optimizer_state = true) {
  TraceBuilder b;
  b.target(10).attempt();
  for (int k = 0; k < 6; ++k) {
    step(b, k + 1, 16, data(16, batch(k)));
    if ((k + 1) % 2 == 0) {
      nlohmann::json f = saved("ckpt.pt", k + 1, "c" + std::to_string(k + 1), k + 1);
      f["optimizer_state"] = optimizer_state;
      b.event("probe", "checkpoint_save", f);
    }
  }
  b.inject();
  oom(b, 7, 16, data(16, batch(6)), false);
  b.exit(1, true);
  b.attempt().event("probe", "checkpoint_load", {{"path", "ckpt.pt"}, {"digest", "c6"}});
  nlohmann::json state = model_state({{{"c6"}, 4}});
  state["restored"] = restored;
  b.event("probe", "model_state", state);
  for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
  return b.exit(0).build();
}

TEST(EvidenceResume, AResumeThatForgetsTheOptimizerFails) {
  // Issue 42, class 5: model and counter saved, no optimizer state: Adam restarts from zero moments.
  EXPECT_VERDICT(check("checkpoint_resume", resumed_restoring(nlohmann::json::array())), fail,
                 "did not restore the optimizer's state");
  EXPECT_VERDICT(check("checkpoint_resume", resumed_restoring({"scheduler", "rng"})), fail,
                 "did not restore the optimizer's state");
}

TEST(EvidenceResume, TheVerdictSaysWhichPartsWereRestored) {
  EXPECT_VERDICT(check("checkpoint_resume", resumed_restoring({"optimizer", "scheduler", "scaler", "rng"})), pass,
                 "it restored: model, optimizer, LR scheduler, GradScaler, RNG state");
  // A stateless optimizer (SGD without momentum) has nothing to restore.
  EXPECT_VERDICT(check("checkpoint_resume", resumed_restoring(nlohmann::json::array(), false)), pass,
                 "it restored: model (the optimizer held no state)");
  // Malformed `restored` (not a list of names): no evidence either way, the other checks decide.
  EXPECT_VERDICT(check("checkpoint_resume", resumed_restoring({1, nullptr})), fail, "did not restore the optimizer");
  EXPECT_VERDICT(check("checkpoint_resume", resumed_restoring("optimizer")), pass, "on the batch that followed it");
}

TEST(EvidenceResume, APretrainedInitLoadedFirstPasses) {
  TraceBuilder b = died_after_atomic_saves(true);
  b.attempt().event("probe", "checkpoint_load", {{"path", "init.pt"}, {"digest", "1111"}});
  b.event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
  b.event("probe", "model_state", model_state({{{"c6"}, 3}, {{"1111", "c6"}, 1}}));
  for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), pass, "on the batch that followed it");
}

TEST(EvidenceResume, ALoopRestartedAtStepOneFails) {
  // Weights and step counter restored (the probe numbers from the checkpoint's step), data from the start.
  TraceBuilder b = died_after_atomic_saves();
  b.attempt().event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
  b.event("probe", "model_state", model_state({{{"c6"}, 4}}));
  for (int k = 0; k < 4; ++k) step(b, k + 7, 16, data(16, batch(k)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail,
                 "its first step trained on the batch that attempt 1 trained on at its step 1, not the one that followed the checkpoint "
                 "(attempt 1's step 7): its loop went back");
}

// A module run in training mode before the first step (Ultralytics' Detect head, run once to find the strides
// of the model it builds again on resume, before the loaded state is put in) is not the model that trained:
// the model_state of the attempt's first step is the one judged.
TEST(EvidenceResume, AForwardBeforeTheFirstStepIsNotTheModelThatTrained) {
  for (bool trained_model_holds_it : {true, false}) {
    TraceBuilder b = died_after_atomic_saves();
    b.attempt().event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
    nlohmann::json head = model_state({}, 4);
    head["step"] = -1;
    head["model"] = "Detect";
    head["restored"] = nlohmann::json::array();  // nothing yet: the optimizer's state is loaded after it
    b.event("probe", "model_state", head);
    nlohmann::json trained = trained_model_holds_it ? model_state({{{"c6"}, 4}}) : model_state({}, 4);
    trained["restored"] = {"optimizer"};
    b.event("probe", "model_state", trained);
    for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
    b.exit(0);
    if (trained_model_holds_it)
      EXPECT_VERDICT(check("checkpoint_resume", b.build()), pass, "which its model held) on the batch that followed it after the OOM "
                                                                  "ended attempt 1; it restored: model, optimizer");
    else
      EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail, "4 of its model's 4 tensors at its first step match no loaded checkpoint");
  }
}

TEST(EvidenceResume, AStateLoadedButNotUsedFails) {
  TraceBuilder b = died_after_atomic_saves();
  b.attempt().event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
  b.event("probe", "model_state", model_state({}, 4));
  for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail, "4 of its model's 4 tensors at its first step match no loaded checkpoint");
}

// The probe's groups are a job's output: a group that is not an object is skipped, and a count written
// 1e30 is not cast (Note [Whole numbers from JSON]); the state is still judged from its digests.
TEST(EvidenceResume, HostileGroupsOfTheModelStateAreReadSafely) {
  TraceBuilder b = died_after_atomic_saves(true);
  b.attempt().event("probe", "checkpoint_load", {{"path", "init.pt"}, {"digest", "1111"}});
  b.event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
  nlohmann::json state = model_state({});
  state["tensors"] = 4;
  state["from"] = {5, "x", {{"digests", {"1111"}}, {"tensors", 1e30}}};
  b.event("probe", "model_state", state);
  for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail,
                 "but 0 of its model's 4 tensors at its first step are those of");
}

TEST(EvidenceResume, WeightsLoadedByOtherMeansAreNotJudged) {
  // Hugging Face's Trainer: the weights from model.safetensors, optimizer.pt through torch.load.
  TraceBuilder b = died_after_atomic_saves();
  b.attempt().event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
  nlohmann::json state = model_state({});
  state["tensors"] = 4;
  state["unseen"] = 4;
  b.event("probe", "model_state", state);
  for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), pass, "(the state saved at step 6 as ckpt/last.pt.tmp) on the batch");
}

TEST(EvidenceResume, APretrainedInitPutOverTheCheckpointFails) {
  TraceBuilder b = died_after_atomic_saves(true);
  b.attempt().event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
  b.event("probe", "checkpoint_load", {{"path", "init.pt"}, {"digest", "1111"}});
  b.event("probe", "model_state", model_state({{{"1111"}, 4}}));
  for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail, "4 of its model's 4 tensors at its first step are those of init.pt");
}

TEST(EvidenceResume, AnOlderStateFailsAndOnlyAnUnknownOneFails) {
  TraceBuilder b = died_after_atomic_saves();
  b.attempt().event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 4}, {"digest", "c4"}});
  for (int k = 4; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), fail, "which holds the state saved at step 4");
  TraceBuilder c = died_after_atomic_saves();
  c.attempt().event("probe", "checkpoint_load", {{"path", "pretrained.pt"}, {"digest", "9999"}});
  for (int k = 0; k < 10; ++k) step(c, k + 1, 16, data(16, batch(k)));
  c.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", c.build()), fail, "which holds no state this job saved (a pretrained init?)");
}

TEST(EvidenceResume, ABatchNoAttemptTrainedOnIsInconclusive) {
  TraceBuilder b = died_after_atomic_saves();
  b.attempt().event("probe", "checkpoint_load", {{"path", "ckpt/last.pt"}, {"step", 6}, {"digest", "c6"}});
  for (int k = 6; k < 10; ++k) step(b, k + 1, 16, data(16, batch(k + 50)));
  b.exit(0);
  EXPECT_VERDICT(check("checkpoint_resume", b.build()), inconclusive, "is the data order seeded?");
}

}  // namespace
}  // namespace oomh
