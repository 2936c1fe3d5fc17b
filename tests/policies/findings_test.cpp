// Findings (policies/include/oomharness/policies/findings.h) and the checks for the advice that is about
// habits (zero_grad, eval_no_grad, effective_batch), on hand-written traces of the probe's events: each
// rule fires on the trace built to show it, says the line, and stays quiet on a healthy trace.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <re2/re2.h>

#include "oomharness/policies/findings.h"
#include "oomharness/policies/oom_kinds.h"
#include "oomharness/policies/registry.h"
#include "check_policy.h"
#include "trace_builder.h"

namespace oomh {
namespace {

using ::testing::HasSubstr;
using testing::TraceBuilder;
using testing::check;

constexpr int64_t MiB = 1024 * 1024;


std::vector<std::string> rules(const Trace& trace) {
  std::vector<std::string> out;
  for (const Finding& f : diagnose(trace)) out.push_back(f.rule);
  return out;
}

const Finding* find(const std::vector<Finding>& all, const std::string& rule) {
  for (const Finding& f : all)
    if (f.rule == rule) return &f;
  return nullptr;
}

TraceBuilder& step(TraceBuilder& b, int64_t n, int64_t allocated, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json f = {{"step", n}, {"batch_size", 32}, {"allocated", allocated}};
  f.update(extra);
  return b.event("probe", "step", f);
}

nlohmann::json breakdown(const std::string& at, int64_t step, int64_t batch, int64_t allocated, int64_t other,
                         int64_t reserved, int64_t total, nlohmann::json sites = nlohmann::json::array()) {
  int64_t params = (allocated - other) / 2;
  return {{"at", at},          {"step", step},         {"phase", "forward"},  {"batch_size", batch},
          {"allocated", allocated}, {"reserved", reserved}, {"total", total},    {"parameters", params},
          {"gradients", allocated - other - params}, {"optimizer_state", 0}, {"workspace", 0}, {"other", other},
          {"cached_free", reserved - allocated}, {"exact", true},
          {"top", {{{"bytes", other / 4}, {"shape", "64x128x1024"}, {"dtype", "float32"}, {"site", "train.py:79 < train.py:119"}}}},
          {"sites", sites}};
}

// A healthy run: steps with flat memory, gradients cleared, evaluation under no_grad.
Trace healthy() {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 8; ++s) {
    b.samples(32);
    step(b, s, 100 * MiB, s > 1 ? nlohmann::json{{"grads_cleared", true}} : nlohmann::json::object());
  }
  b.event("probe", "eval_forward", {{"step", 5}, {"grad", false}, {"training", false}, {"site", "train.py:40"}});
  b.exit(0);
  return b.build();
}

TEST(Findings, NoneOnAHealthyRun) {
  EXPECT_TRUE(diagnose(healthy()).empty());
  EXPECT_EQ(check("zero_grad", healthy()).status, VerdictStatus::pass);
  EXPECT_EQ(check("eval_no_grad", healthy()).status, VerdictStatus::pass);
  EXPECT_EQ(check("memory_stable", healthy()).status, VerdictStatus::pass);
}

TEST(Findings, GradsNotClearedNamesTheStepLine) {
  TraceBuilder b;
  b.attempt();
  step(b, 1, 100 * MiB);
  for (int64_t s = 2; s <= 4; ++s) step(b, s, 100 * MiB, {{"grads_cleared", s == 2}, {"site", "train.py:265"}});
  b.exit(0);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "grads_not_cleared");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->site, "train.py:265");
  EXPECT_THAT(f->sentence, HasSubstr("train.py:265's optimizer.step() ran without the gradients being cleared"));
  EXPECT_THAT(f->sentence, HasSubstr("2 of 3 steps, first step 3"));
  Verdict v = check("zero_grad", b.build());
  EXPECT_EQ(v.status, VerdictStatus::fail);
  EXPECT_THAT(v.reason, HasSubstr("2 of 3 optimizer steps ran without"));
  EXPECT_THAT(v.reason, HasSubstr("zero_grad(set_to_none=True)"));
}

TEST(Findings, ZeroGradInconclusiveWithoutTheProbesAnswer) {
  TraceBuilder b;
  b.attempt().step(1).step(2).exit(0);
  EXPECT_EQ(check("zero_grad", b.build()).status, VerdictStatus::inconclusive);
}

TEST(Findings, KeptWithGraphNamesTheLineThatGrew) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 10; ++s) {
    step(b, s, 100 * MiB + s * 16 * MiB);
    if (s >= 2)
      b.event("probe", "memory_breakdown",
              breakdown("step", s, 32, 100 * MiB + s * 16 * MiB, s * 16 * MiB, 1024 * MiB, 4096 * MiB,
                        {{{"site", "train.py:79 < train.py:251"}, {"bytes", s * 16 * MiB}, {"count", s}},
                         {{"site", "train.py:60"}, {"bytes", 2 * MiB}, {"count", 1}}}));
  }
  b.exit(0);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "kept_with_graph");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->site, "train.py:79");
  EXPECT_THAT(f->sentence, HasSubstr("tensors made at train.py:79 < train.py:251 stay alive step after step (+16.00 MiB per step"));
  Verdict v = check("memory_stable", b.build());
  EXPECT_EQ(v.status, VerdictStatus::fail);
  EXPECT_THAT(v.reason, HasSubstr(f->sentence));
  // Under a looser limit than the growth, the finding does not fire either.
  EXPECT_TRUE(diagnose(b.build(), {32 * MiB}).empty());
}

// Issue 14 (B): where the probe found the variable that keeps the growing line's tensors, the finding names
// the line that appends them beside the line that made them.
TEST(Findings, KeptWithGraphNamesTheLineThatAppends) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 6; ++s) {
    step(b, s, 100 * MiB + s * 16 * MiB);
    nlohmann::json site = {{"site", "train.py:79 < train.py:251"}, {"bytes", s * 16 * MiB}, {"count", s}};
    site["kept_by"] = {{"name", "history"}, {"how", "appends to"}, {"site", "train.py:254"}, {"bytes", (s - 1) * 16 * MiB},
                       {"function", "run_leak"}};
    if (s >= 2)
      b.event("probe", "memory_breakdown",
              breakdown("step", s, 32, 100 * MiB + s * 16 * MiB, s * 16 * MiB, 1024 * MiB, 4096 * MiB, {site}));
  }
  b.exit(0);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "kept_with_graph");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->site, "train.py:79");  // the line that made them
  EXPECT_EQ(f->kept_at, "train.py:254");  // the line that keeps them
  EXPECT_THAT(f->sentence, HasSubstr("tensors made at train.py:79 < train.py:251 and appended to `history` at "
                                     "train.py:254 stay alive step after step (+16.00 MiB per step"));
}

nlohmann::json after_loop(int64_t completed, int64_t other, int64_t inputs, nlohmann::json sites) {
  nlohmann::json b = breakdown("after_loop", completed + 1, 32, 100 * MiB + other, other, 1024 * MiB, 4096 * MiB, sites);
  b["inputs"] = inputs;
  b["completed"] = completed;
  b["site"] = "train.py:120 < train.py:142";
  return b;
}

// Rule 5 (Note [Kept after the loop]): what was still alive, beside the evaluation's inputs, when an
// evaluation began after training.
TEST(Findings, KeptAfterLoopNamesTheLineAndTheVariable) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 4; ++s) step(b, s, 100 * MiB);
  nlohmann::json site = {{"site", "train.py:80 < train.py:291"}, {"bytes", 16 * MiB}, {"count", 1}};
  site["kept_by"] = {{"name", "out"}, {"how", "assigns"}, {"site", "train.py:291"}, {"bytes", 16 * MiB}};
  b.event("probe", "memory_breakdown", after_loop(4, 17 * MiB, MiB / 2, {site}));
  b.exit(0);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "kept_after_loop");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(rules(b.build()));
  EXPECT_EQ(f->site, "train.py:80");
  EXPECT_EQ(f->kept_at, "train.py:291");
  EXPECT_THAT(f->sentence, HasSubstr("after 4 training steps, when the evaluation at train.py:120 < train.py:142 began, "
                                     "16.50 MiB of tensors made before it were still alive beside its inputs, 16.00 MiB of "
                                     "them made at train.py:80 < train.py:291 and kept in `out` (assigned at train.py:291)"));
  EXPECT_THAT(f->sentence, HasSubstr("`del` them after the loop"));
  // The finding comes last, in the diagnosis' order.
  EXPECT_EQ(finding_rules().back(), "kept_after_loop");
}

TEST(Findings, KeptAfterLoopNotForTheEvaluationsOwnInputs) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 4; ++s) step(b, s, 100 * MiB);
  // 40 MiB of other live tensors, 39.5 of them the evaluation's own batch: nothing was left behind.
  b.event("probe", "memory_breakdown", after_loop(4, 40 * MiB, 79 * MiB / 2, nlohmann::json::array()));
  b.exit(0);
  EXPECT_TRUE(diagnose(b.build()).empty()) << ::testing::PrintToString(rules(b.build()));
  // Above the limit, without a line: the sentence says the bytes only.
  TraceBuilder c;
  c.attempt();
  step(c, 1, 100 * MiB);
  c.event("probe", "memory_breakdown", after_loop(1, 8 * MiB, 0, nlohmann::json::array()));
  c.exit(0);
  auto all = diagnose(c.build());
  const Finding* f = find(all, "kept_after_loop");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->site, "");
  EXPECT_THAT(f->sentence, HasSubstr("after 1 training step, when the evaluation at train.py:120 < train.py:142 began, "
                                     "8.00 MiB of tensors made before it were still alive beside its inputs: "));
  EXPECT_TRUE(diagnose(c.build(), {1024 * 1024, 16 * MiB}).empty());
}

TEST(Findings, BatchTooLargeGivesTheBatchThatFits) {
  TraceBuilder b;
  b.attempt();
  b.oom(1, 64, false);
  // 400 MiB of memory, 388 reserved, 360 allocated of which 300 activations: >= 4.69 MiB per sample, 60 fixed.
  b.event("probe", "memory_breakdown", breakdown("oom", 1, 64, 360 * MiB, 300 * MiB, 388 * MiB, 400 * MiB));
  b.exit(1, true);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "batch_too_large");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(rules(b.build()));
  // From the OOM's lower bound: (400 - 60) / 4.69 = 72, capped at half the failed batch.
  EXPECT_THAT(f->sentence, HasSubstr("at least 4.69 MiB per sample"));
  EXPECT_THAT(f->sentence, HasSubstr("a batch of 32 fits under the 400.00 MiB of memory: use it with 2 gradient-accumulation steps"));
  EXPECT_EQ(f->site, "train.py:79");
}

TEST(Findings, BatchTooLargeUsesAnEarlierPeak) {
  TraceBuilder b;
  b.attempt();
  step(b, 1, 100 * MiB);
  // Step 1's peak at batch 32: 320 MiB of activations, 10 MiB per sample, 40 fixed; memory 400 MiB.
  b.event("probe", "memory_breakdown", breakdown("peak", 1, 32, 360 * MiB, 320 * MiB, 390 * MiB, 400 * MiB));
  b.oom(2, 64, false);
  b.event("probe", "memory_breakdown", breakdown("oom", 2, 64, 380 * MiB, 340 * MiB, 396 * MiB, 400 * MiB));
  b.exit(1, true);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "batch_too_large");
  ASSERT_NE(f, nullptr);
  EXPECT_THAT(f->sentence, HasSubstr(": 10.00 MiB per sample"));
  EXPECT_THAT(f->sentence, HasSubstr("a batch of 36 fits"));  // (400 - 40) / 10
}

// A leak that runs out of memory: by the earlier peak's figures the failed batch itself fits, so the batch
// is not the cause (kept_with_graph explains it).
TEST(Findings, BatchTooLargeNotWhenTheFailedBatchFitsByAnEarlierPeak) {
  TraceBuilder b;
  b.attempt();
  step(b, 1, 100 * MiB);
  // step 1's peak: 100 MiB of activations for 32 samples, 60 fixed: (700 - 60) / 3.125 = 204 samples fit
  b.event("probe", "memory_breakdown", breakdown("peak", 1, 32, 160 * MiB, 100 * MiB, 180 * MiB, 700 * MiB));
  b.oom(14, 32, false);
  b.event("probe", "memory_breakdown", breakdown("oom", 14, 32, 650 * MiB, 590 * MiB, 690 * MiB, 700 * MiB));
  b.exit(1, true);
  EXPECT_EQ(find(diagnose(b.build()), "batch_too_large") == nullptr, true) << ::testing::PrintToString(rules(b.build()));
}

TEST(Findings, BatchTooLargeNotForAFaultWithRoomToSpare) {
  TraceBuilder b;
  b.attempt();
  b.oom(5, 32, true);
  // An injected fault: activations dominate, but 4 GiB of memory is barely used.
  b.event("probe", "memory_breakdown", breakdown("oom", 5, 32, 360 * MiB, 300 * MiB, 400 * MiB, 4096 * MiB));
  b.exit(0);
  EXPECT_TRUE(rules(b.build()).empty());
}

TEST(Findings, EvalWithGraph) {
  TraceBuilder b;
  b.attempt().step(1);
  b.event("probe", "eval_forward", {{"step", 2}, {"grad", true}, {"training", false}, {"site", "train.py:278"}});
  b.exit(0);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "eval_with_graph");
  ASSERT_NE(f, nullptr);
  EXPECT_THAT(f->sentence, HasSubstr("the evaluation at train.py:278 (step 2) ran with gradients enabled"));
  Verdict v = check("eval_no_grad", b.build());
  EXPECT_EQ(v.status, VerdictStatus::fail);
  EXPECT_THAT(v.reason, HasSubstr("torch.no_grad()"));
}

TEST(Findings, EvalInTrainMode) {
  TraceBuilder b;
  b.attempt().step(1);
  b.event("probe", "eval_forward", {{"step", 2}, {"grad", false}, {"training", true}});
  b.exit(0);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "eval_with_graph");
  ASSERT_NE(f, nullptr);
  EXPECT_THAT(f->sentence, HasSubstr("with the model in train mode"));
  // No graph was built: the check passes, the finding still says what to fix.
  EXPECT_EQ(check("eval_no_grad", b.build()).status, VerdictStatus::pass);
}

TEST(Findings, EvalNoGradInconclusiveWithoutEvaluation) {
  TraceBuilder b;
  b.attempt().step(1).exit(0);
  EXPECT_EQ(check("eval_no_grad", b.build()).status, VerdictStatus::inconclusive);
}

TraceBuilder halved(int64_t after) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 4; ++s) b.samples(32).step(s, 32);
  b.oom(5, 32, true);
  for (int64_t s = 5; s <= 7; ++s) b.samples(after).step(s, 16);
  b.exit(0);
  return b;
}

TEST(EffectiveBatch, FailWhenTheFailedBatchShrinks) {
  Verdict v = check("effective_batch", halved(16).build());
  EXPECT_EQ(v.status, VerdictStatus::fail);
  EXPECT_THAT(v.reason, HasSubstr("step 5 took 16 samples per optimizer step instead of 32"));
}

TEST(EffectiveBatch, PassWithAccumulation) {
  Verdict v = check("effective_batch", halved(32).build());
  EXPECT_EQ(v.status, VerdictStatus::pass) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("each of the 3 optimizer steps after the OOM took 32 samples"));
  EXPECT_EQ(check("effective_batch", halved(32).build(), {{"samples", 64}}).status, VerdictStatus::fail);
}

// Note [Distinct samples]: a step of 32 samples whose data the probe fingerprinted, `distinct` of them different.
TraceBuilder halved_with_data(int64_t distinct_after, int64_t distinct_before = 32) {
  auto data = [](int64_t distinct) {
    return nlohmann::json{{"samples", 32}, {"digest", "00000000000000aa"}, {"per_sample", true}, {"shape", {32, 8}},
                          {"dim", 0}, {"from", "guess"}, {"distinct", distinct}};
  };
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= 4; ++s)
    b.samples(32).event("probe", "step", {{"step", s}, {"batch_size", 32}, {"data", data(distinct_before)}});
  b.oom(5, 32, true);
  for (int64_t s = 5; s <= 7; ++s)
    b.samples(16).samples(16).event("probe", "step",
                                     {{"step", s}, {"batch_size", 16}, {"data", data(s == 5 ? distinct_after : 32)}});
  b.exit(0);
  return b;
}

TEST(EffectiveBatch, FailWhenTheRedoRepeatsSamples) {
  // Issue 42, class 3: the failed batch of 32 redone as two halves that are both its first half.
  Verdict v = check("effective_batch", halved_with_data(16).build());
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("step 5 took 32 samples but only 16 distinct ones"));
}

TEST(EffectiveBatch, PassWhenTheRedoTakesDistinctSamples) {
  Verdict v = check("effective_batch", halved_with_data(32).build());
  EXPECT_EQ(v.status, VerdictStatus::pass) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("32 or more of them distinct in content"));
  // Data with duplicates before the OOM sets the bar: 30 distinct of 32 is what every step took.
  EXPECT_EQ(check("effective_batch", halved_with_data(30, 30).build()).status, VerdictStatus::pass);
  // A malformed count (more distinct than samples) is no evidence, not a verdict.
  EXPECT_EQ(check("effective_batch", halved_with_data(40).build()).status, VerdictStatus::pass);
  // Without fingerprints the sentence says what was not checked.
  EXPECT_THAT(check("effective_batch", halved(32).build()).reason, HasSubstr("whether they were distinct is not known"));
}

TEST(EffectiveBatch, InconclusiveWithoutAnOom) {
  TraceBuilder b;
  b.attempt().samples(32).step(1, 32).exit(0);
  EXPECT_EQ(check("effective_batch", b.build()).status, VerdictStatus::inconclusive);
}

TEST(Findings, Json) {
  Finding f{"kept_with_graph", "a sentence", "train.py:79", 1, 2.5, {}};
  nlohmann::json j = f;
  EXPECT_EQ(j["site"], "train.py:79");
  Finding g = j.get<Finding>();
  EXPECT_EQ(g.rule, f.rule);
  EXPECT_EQ(g.sentence, f.sentence);
  EXPECT_EQ(g.attempt, 1);
  EXPECT_FALSE(j.contains("kept_at"));
  f.kept_at = "train.py:254";
  EXPECT_EQ(nlohmann::json(f).get<Finding>().kept_at, "train.py:254");
}

// Note [An OOM that is not called an OOM] (findings.cpp), issue 27: cuBLAS's handle refused under a cap
// reached the code as a RuntimeError; the finding says so and what to do. The same OOM as OutOfMemoryError,
// and an OOM of no known kind (an older probe), give none.
TEST(Findings, OomAsOtherErrorNamesTheLibraryAndTheFix) {
  TraceBuilder b;
  b.attempt().inject().event("probe", "oom", {{"step", 1}, {"batch_size", 64}, {"phase", "backward"}, {"oom_kind", "cublas"},
                                              {"exception", "RuntimeError"},
                                              {"message", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"}});
  b.exit(1);
  auto all = diagnose(b.build());
  const Finding* f = find(all, "oom_as_other_error");
  ASSERT_NE(f, nullptr);
  EXPECT_THAT(f->sentence, HasSubstr("the OOM at step 1 reached the code as RuntimeError, not torch.OutOfMemoryError "
                                     "(CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`; cuBLAS"));
  EXPECT_THAT(f->sentence, HasSubstr("it ended attempt 1, past any handler of OutOfMemoryError"));
  EXPECT_THAT(f->sentence, HasSubstr("run one forward and backward with a small batch before memory fills"));
  EXPECT_EQ(finding_rules().front(), "oom_as_other_error");

  for (const char* kind : {"allocator", "", "no_such_kind"}) {
    TraceBuilder ok;
    nlohmann::json fields = {{"step", 1}, {"batch_size", 64}, {"phase", "forward"}, {"exception", "OutOfMemoryError"},
                             {"message", "CUDA out of memory. Tried to allocate 2.00 GiB"}};
    if (*kind) fields["oom_kind"] = kind;
    ok.attempt().inject().event("probe", "oom", fields);
    ok.exit(1);
    EXPECT_EQ(find(diagnose(ok.build()), "oom_as_other_error"), nullptr) << kind;
  }
}

TEST(Findings, OomAsOtherErrorCaughtByABroaderHandler) {
  TraceBuilder b;
  b.attempt().inject().event("probe", "oom", {{"step", 3}, {"batch_size", 8}, {"phase", "forward"}, {"oom_kind", "cuda_runtime"},
                                              {"exception", "AcceleratorError"}, {"message", "CUDA error: out of memory\nmore"},
                                              {"caught", true}});
  b.step(3, 4).exit(0);
  const Finding* f = find(diagnose(b.build()), "oom_as_other_error");
  ASSERT_NE(f, nullptr);
  EXPECT_THAT(f->sentence, HasSubstr("as AcceleratorError, not torch.OutOfMemoryError (CUDA error: out of memory; the CUDA runtime"));
  EXPECT_THAT(f->sentence, HasSubstr("the code caught it, but code that catches only OutOfMemoryError would not"));
}

// The table's own rules (Note [Which errors are OOMs] in oom_kinds.h): words are lowercase (a message is
// lowercased before it is searched), and a row the code cannot catch as OutOfMemoryError says what to do.
TEST(OomKinds, RowsAreLowercaseAndAdviseWhereTheyCannotBeCaught) {
  for (const oom::OomKind& k : oom::kOomKinds) {
    EXPECT_TRUE(k.catchable || !k.advice.empty()) << k.name << ": a row the code cannot catch as OutOfMemoryError needs advice";
    for (std::string_view w : k.words)
      for (char c : w) EXPECT_FALSE(c >= 'A' && c <= 'Z') << k.name << ": '" << w << "' is not lowercase";
  }
}

TEST(OomKinds, ClassifyAndThePattern) {
  EXPECT_EQ(oom::classify("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")->name, "cublas");
  EXPECT_EQ(oom::classify("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB")->name, "allocator");
  EXPECT_EQ(oom::classify("CUDA error: out of memory")->name, "cuda_runtime");
  EXPECT_EQ(oom::classify("DataLoader worker ran out of memory"), nullptr);
  EXPECT_TRUE(oom::is_oom_message("DataLoader worker ran out of memory"));  // loose words: output support only
  EXPECT_TRUE(oom::is_oom_message("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"));
  EXPECT_FALSE(oom::is_oom_message("RuntimeError: CUDA error: device-side assert triggered"));
  RE2::Options o;
  o.set_case_sensitive(false);
  const RE2 re(oom::message_pattern(), o);
  ASSERT_TRUE(re.ok()) << re.error();
  EXPECT_TRUE(RE2::PartialMatch("NCCL error: unhandled cuda error ... Cuda failure 'out of memory'", re));
  EXPECT_TRUE(RE2::PartialMatch("RuntimeError: CUBLAS_STATUS_ALLOC_FAILED", re));
  EXPECT_FALSE(RE2::PartialMatch("RuntimeError: shape mismatch", re));
}

}  // namespace
}  // namespace oomh
