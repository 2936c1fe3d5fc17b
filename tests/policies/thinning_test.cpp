// Note [Thinned event logs] (policies/src/event_log_reader.cpp): a log read with a small budget, so that the reader thins
// its routine events, gives every check the verdict it gives on the whole log; and the reader's fast path
// (Note [Fast event lines]) counts and reads lines as the JSON parser does.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "check_policy.h"
#include "oomharness/policies/registry.h"
#include "oomharness/policies/trace.h"

namespace oomh {
namespace {

// A training of `steps` steps as the Python probe writes it: three phases, a `samples` and a `step` per
// step, a `memory` now and then; what goes wrong depends on `variant`.
struct Training {
  int variant = 0;
  int steps = 3000;
  bool garbage = false;  // lines that are not events, between the events
};

std::string line(double t, const char* src, const char* kind, const std::string& fields) {
  char head[128];
  std::snprintf(head, sizeof head, R"({"t":%.6f,"pid":7,"src":"%s","kind":"%s","fields":)", t, src, kind);
  return std::string(head) + fields + "}\n";
}

std::string training_log(const Training& tr) {
  std::string log;
  double t = 1000;
  int64_t batch = 64;
  auto add = [&](const char* src, const char* kind, const std::string& fields) {
    log += line(t, src, kind, fields);
    t += 0.01;
    if (tr.garbage && log.size() % 7 == 0) log += "{\"t\":1,\"kind\":\n";  // a line cut short
  };
  const int oom_at = tr.steps / 2;
  for (int s = 0; s < tr.steps; ++s) {
    for (const char* phase : {"forward", "backward", "optimizer"})
      add("probe", "phase", std::string(R"({"phase":")") + phase + R"(","step":)" + std::to_string(s) + "}");
    int64_t allocated = 1 << 30;
    if (tr.variant == 1) allocated += int64_t{s} * 3 * 1024 * 1024;  // a leak: 3 MiB a step
    if (tr.variant == 1 && s == tr.steps / 3) t += 120;              // a stall: two minutes without a step
    if (tr.variant == 2 && s % 40 == 7) {
      // A fault the allocator absorbs: the step completes after it.
      add("shim", "inject", R"({"entry":"cuMemAlloc_v2","size":1048576,"device":0,"reason":"rule","step":)" + std::to_string(s) + "}");
    }
    if (s == oom_at) {
      add("shim", "inject", R"({"entry":"cuMemAlloc_v2","size":1048576,"device":0,"reason":"rule","step":)" + std::to_string(s) + "}");
      add("probe", "oom", R"({"step":)" + std::to_string(s) + R"(,"batch_size":)" + std::to_string(batch) +
                              R"(,"phase":"forward","caught":true})");
      if (tr.variant == 3) add("probe", "empty_cache", R"({"reserved_before":2147483648,"reserved_after":1073741824})");
      if (tr.variant != 3) batch /= 2;  // halving (variant 3 retries the same step at the same batch)
    }
    if (s == tr.steps / 4) add("probe", "checkpoint_save", R"({"path":"ckpt.pt","step":)" + std::to_string(s) + "}");
    // Samples per optimizer step: variant 0 keeps the effective batch by accumulating, the others do not.
    const int64_t samples = tr.variant == 0 ? 64 : batch;
    add("probe", "samples", R"({"count":)" + std::to_string(samples) + "}");
    if (s % 500 == 250) add("probe", "memory", R"({"allocated":)" + std::to_string(allocated + 4096) + R"(,"reserved":)" +
                                                   std::to_string(allocated * 2) + "}");
    const bool cleared = !(tr.variant == 1 && s % 700 == 9);
    add("probe", "step", R"({"step":)" + std::to_string(s) + R"(,"batch_size":)" + std::to_string(batch) +
                             R"(,"loss":0.5,"allocated":)" + std::to_string(allocated) + R"(,"reserved":)" +
                             std::to_string(allocated + (1 << 20)) + R"(,"grads_cleared":)" + (cleared ? "true" : "false") + "}");
  }
  return log;
}

struct Read {
  Attempt attempt;
  size_t bad = 0;
  bool thinned = false;
  size_t kept = 0;
};

// The attempt as the runner builds it (job_runner_attempts.cpp's finish_attempt), the log fed in odd-sized chunks.
Read read_log(const std::string& log, EventLogLimits limits, size_t chunk = 4093) {
  EventLogReader r(limits);
  for (size_t at = 0; at < log.size(); at += chunk) r.feed(std::string_view(log).substr(at, chunk));
  r.finish();
  Read out;
  out.bad = r.bad_lines();
  out.thinned = r.thinned();
  out.kept = r.events().size();
  Attempt& a = out.attempt;
  a.end_kind = AttemptEnd::exited;
  a.exit_code = 0;
  a.events = std::move(r.events());
  for (Event& w : r.warnings("events.jsonl")) a.events.push_back(std::move(w));
  std::stable_sort(a.events.begin(), a.events.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
  a.start = a.events.empty() ? 0 : a.events.front().t - 1;
  a.end = a.events.empty() ? 0 : a.events.back().t + 1;
  if (r.thinned()) a.thinned = r.fold();
  return out;
}

EventLogLimits small_budget() {
  EventLogLimits l;
  l.max_routine = 200;
  l.max_pinned = 4096;
  return l;
}

EventLogLimits no_thinning() {
  EventLogLimits l;
  l.max_routine = 0;
  return l;
}

// Every check of the registry, with arguments that make it judge something.
std::vector<std::pair<std::string, nlohmann::json>> every_check() {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (const PolicyInfo& p : policies()) {
    if (p.name == "peak_below") {
      out.push_back({p.name, {{"bytes", "1GiB"}}});
      out.push_back({p.name, {{"bytes", "64GiB"}}});
    } else {
      out.push_back({p.name, nullptr});
    }
  }
  out.push_back({"no_hang", {{"stall", 30}}});
  out.push_back({"effective_batch", {{"samples", 32}}});
  return out;
}

TEST(ThinnedEventLog, EveryCheckGivesTheVerdictOfTheWholeLog) {
  for (int variant = 0; variant < 4; ++variant) {
    Training tr;
    tr.variant = variant;
    const std::string log = training_log(tr);
    Read whole = read_log(log, no_thinning());
    Read thin = read_log(log, small_budget());
    ASSERT_FALSE(whole.thinned) << variant;
    ASSERT_TRUE(thin.thinned) << variant;
    EXPECT_LT(thin.kept * 4, whole.kept) << variant;  // thinned for real
    Trace tw, tt;
    tw.job = tt.job = "thinning";
    tw.target_step = tt.target_step = tr.steps - 1;
    tw.attempts.push_back(whole.attempt);
    tt.attempts.push_back(thin.attempt);
    int judged = 0;
    for (const auto& [name, args] : every_check()) {
      Verdict vw = testing::check(name, tw, args);
      Verdict vt = testing::check(name, tt, args);
      EXPECT_EQ(to_string(vw.status), to_string(vt.status))
          << "variant " << variant << ", " << name << " " << args.dump() << "\n whole: " << vw.reason << "\n thinned: " << vt.reason;
      // The reasons too, but for effective_batch's count of the steps it saw (it says the log was thinned).
      if (name != "effective_batch") {
        EXPECT_EQ(vw.reason, vt.reason) << "variant " << variant << ", " << name;
      }
      judged += vw.status != VerdictStatus::inconclusive;
    }
    EXPECT_GE(judged, 6) << variant;  // the logs give the checks something to judge
  }
}

TEST(ThinnedEventLog, KeepsEverySignificantEventAndSaysWhatItThinned) {
  Training tr;
  tr.variant = 2;
  tr.steps = 20000;
  const std::string log = training_log(tr);
  EventLogLimits limits = small_budget();
  limits.max_pinned = 16384;  // the windows around 500 faults
  Read whole = read_log(log, no_thinning());
  Read thin = read_log(log, limits);
  auto count = [](const Attempt& a, const char* kind) {
    return std::count_if(a.events.begin(), a.events.end(), [&](const Event& e) { return e.kind == kind; });
  };
  for (const char* kind : {"inject", "oom", "checkpoint_save"}) EXPECT_EQ(count(whole.attempt, kind), count(thin.attempt, kind)) << kind;
  // The stride keeps at most max_routine routine events; the windows at most max_pinned; the rest is
  // the significant events, the tail and the extremes.
  const auto significant = count(whole.attempt, "inject") + count(whole.attempt, "oom") + count(whole.attempt, "checkpoint_save");
  ASSERT_TRUE(thin.attempt.thinned);
  EXPECT_EQ(thin.attempt.thinned->windows_missed, 0u);
  EXPECT_LE(thin.kept, limits.max_routine + limits.max_pinned + static_cast<size_t>(significant) + 16u);
  // The highest step and the largest figures are kept wherever the stride falls.
  EXPECT_EQ(thin.attempt.last_completed_step(), whole.attempt.last_completed_step());
  // Said by a warning, with the counts.
  const Event* w = nullptr;
  for (const Event& e : thin.attempt.events)
    if (e.kind == "warning" && e.has("routine_dropped")) w = &e;
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->integer("steps"), tr.steps);
  EXPECT_GT(w->integer("steps_dropped"), tr.steps / 2);
  EXPECT_NE(w->text("message").find("were thinned"), std::string::npos) << w->text("message");
  ASSERT_TRUE(thin.attempt.thinned);
  EXPECT_EQ(thin.attempt.thinned->steps, static_cast<uint64_t>(tr.steps));
  // The kept steps cover the run evenly: some in each tenth of it.
  std::vector<int> tenths(10);
  for (const Event& e : thin.attempt.events)
    if (e.kind == "step") ++tenths[static_cast<size_t>(std::min<int64_t>(9, e.integer("step") * 10 / tr.steps))];
  for (int n : tenths) EXPECT_GT(n, 3);
  // The verdicts of the faults: the same injects, equally visible.
  auto fw = whole.attempt.injected_faults(), ft = thin.attempt.injected_faults();
  ASSERT_EQ(fw.size(), ft.size());
  for (size_t i = 0; i < fw.size(); ++i) EXPECT_EQ(fw[i].visible, ft[i].visible) << i;
}

TEST(ThinnedEventLog, GarbageBetweenTheEventsIsCountedTheSameWay) {
  Training tr;
  tr.variant = 1;
  tr.garbage = true;
  const std::string log = training_log(tr);
  Training clean = tr;
  clean.garbage = false;
  Read whole = read_log(log, no_thinning(), 1);
  Read thin = read_log(log, small_budget(), 65536);
  EXPECT_GT(whole.bad, 100u);
  EXPECT_EQ(whole.bad, thin.bad);
  // Without the garbage the same events are read.
  Read plain = read_log(training_log(clean), no_thinning());
  EXPECT_EQ(plain.kept, whole.kept);
  Trace tw, tt;
  tw.target_step = tt.target_step = tr.steps - 1;
  tw.attempts.push_back(whole.attempt);
  tt.attempts.push_back(thin.attempt);
  for (const char* name : {"memory_stable", "no_hang", "zero_grad", "completes", "batch_halving"})
    EXPECT_EQ(to_string(testing::check(name, tw).status), to_string(testing::check(name, tt).status)) << name;
}

TEST(ThinnedEventLog, PastTheBudgetOfWindowsAPassBecomesInconclusive) {
  Training tr;
  tr.variant = 2;
  tr.steps = 8000;
  EventLogLimits tiny = small_budget();
  tiny.max_pinned = 8;  // the windows of the first few faults only
  Read thin = read_log(training_log(tr), tiny);
  ASSERT_TRUE(thin.attempt.thinned);
  EXPECT_GT(thin.attempt.thinned->windows_missed, 0u);
  Trace t;
  t.target_step = tr.steps - 1;
  t.attempts.push_back(thin.attempt);
  Verdict v = testing::check("completes", t);
  EXPECT_EQ(v.status, VerdictStatus::inconclusive) << v.reason;
  EXPECT_NE(v.reason.find("could not judge"), std::string::npos) << v.reason;
  EXPECT_EQ(testing::check("exit", t).status, VerdictStatus::pass);  // the exit code needs no event
}

TEST(ThinnedEventLog, MergedRanksDoNotJudgeWhatOneLogMeasured) {
  Training tr;
  tr.variant = 1;
  std::vector<Attempt> ranks;
  for (int k = 0; k < 2; ++k) ranks.push_back(read_log(training_log(tr), small_budget()).attempt);
  Trace t;
  t.target_step = tr.steps - 1;
  t.attempts.push_back(merge_ranks(std::move(ranks)));
  ASSERT_TRUE(t.attempts[0].thinned);
  EXPECT_TRUE(t.attempts[0].thinned->merged);
  EXPECT_EQ(testing::check("no_hang", t).status, VerdictStatus::inconclusive);
  // The memory growth: the leak is not judged from one rank's fit (what follows the OOM is: those steps
  // are kept), and the gradient counts add up.
  Verdict mem = testing::check("memory_stable", t, {{"after_recovery", false}});
  EXPECT_EQ(mem.status, VerdictStatus::inconclusive) << mem.reason;
  // A check that compares the ranks' steps around the OOM: each log kept the steps around its own events.
  Verdict halving = testing::check("batch_halving", t);
  EXPECT_EQ(halving.status, VerdictStatus::inconclusive) << halving.reason;
  EXPECT_NE(halving.reason.find("ranks were thinned"), std::string::npos) << halving.reason;
  Verdict grads = testing::check("zero_grad", t);
  EXPECT_EQ(grads.status, VerdictStatus::fail);
  EXPECT_NE(grads.reason.find(" of " + std::to_string(2 * tr.steps) + " optimizer steps"), std::string::npos) << grads.reason;
}

TEST(ThinnedEventLog, ALongStepKeepsItsSamplesSummed) {
  // 3,000 `samples` events and a phase per sample before each step: more than max_unit_events between two
  // steps, so the reader sums the samples into one event; each kept step still took 3,000 samples.
  std::string log;
  double t = 1;
  for (int s = 0; s < 40; ++s) {
    if (s == 20) log += line(t += 0.001, "probe", "oom", R"({"step":20,"batch_size":1,"caught":true})");
    for (int k = 0; k < 3000; ++k) {
      log += line(t += 0.001, "probe", "phase", R"({"phase":"forward"})");
      log += line(t += 0.001, "probe", "samples", R"({"count":1})");
    }
    log += line(t += 0.001, "probe", "step", R"({"step":)" + std::to_string(s) + R"(,"batch_size":1})");
  }
  Read thin = read_log(log, small_budget());
  ASSERT_TRUE(thin.thinned);
  int64_t pending = -1;
  int steps = 0;
  for (const Event& e : thin.attempt.events) {
    if (e.kind == "samples") pending = std::max<int64_t>(pending, 0) + e.integer("count");
    if (e.kind != "step") continue;
    if (pending >= 0) {
      EXPECT_EQ(pending, 3000) << e.integer("step");
      ++steps;
    }
    pending = -1;
  }
  EXPECT_GE(steps, 4);  // the three after the OOM (their windows count steps, not the parts between) and the last
  EXPECT_LT(thin.kept, 5000u);
}

// Note [Fast event lines]: what the fast path reads, it reads as the parser would, and what it does not
// accept goes to the parser.
TEST(FastEventLines, AcceptOnlyWhatTheParserAccepts) {
  const std::vector<std::pair<std::string, bool>> lines = {
      {R"({"t":1,"pid":7,"src":"probe","kind":"step","fields":{"step":1,"batch_size":8}})", true},
      {R"({"t":1.5e0,"pid":-7,"src":"probe","kind":"step","fields":{"step":2,"batch_size":null,"x":"y","ok":true}})", true},
      {R"({"t":1,"pid":7,"src":"probe","kind":"step","fields":{"step":01}})", false},        // a leading zero
      {R"({"t":1,"pid":7,"src":"probe","kind":"step","fields":{"step":1}}x)", false},        // text after it
      {R"({"t":1,"pid":7.5,"src":"probe","kind":"step","fields":{"step":1}})", false},       // pid not an integer
      {R"({"t":1,"pid":7,"src":"probe","kind":"","fields":{}})", false},                     // no kind
      {R"({"t":1,"pid":7,"src":"probe","kind":"step","fields":{"step":1,}})", false},        // a trailing comma
      {R"({"t":1,"pid":7,"src":"probe","kind":"step","fields":{"step":1})", false},          // cut short
      {R"({"t":1,"pid":7,"src":"probe","kind":"step","fields":{"step":1.0e400}})", false},   // out of range for a double
      {R"({"t":1,"pid":7,"src":"probe","kind":"phase","fields":{"phase":"f\u00e9"}})", true},  // escapes: the parser
      {"{\"t\":1,\"pid\":7,\"src\":\"probe\",\"kind\":\"phase\",\"fields\":{\"phase\":\"f\xff\"}}", false},  // not UTF-8
      {R"({"kind":"step","t":3,"fields":{"step":3.0}})", true},                              // another order, a float step
      {R"({"t":1,"pid":7,"src":"probe","kind":"step","fields":{"step":1,"step":5}})", true},  // a key twice
      {R"({"t":1,"pid":7,"src":"probe","kind":"step","fields":{"step":1}} )", true},         // trailing blanks
      {R"( { "t": 1, "pid": 7, "src": "probe", "kind": "step", "fields": { "step": 1 , "x" : [] } } )", true},  // json.dumps' blanks
      {R"({"t": 1, "pid": 7, "src": "probe", "kind": "step", "fields": {"step": 1 2}})", false},  // a blank inside a number
  };
  for (const auto& [text, valid] : lines) {
    EventLogReader r(no_thinning());
    r.feed(text + "\n");
    r.finish();
    EXPECT_EQ(r.bad_lines(), valid ? 0u : 1u) << text;
    EXPECT_EQ(r.events().size(), valid ? 1u : 0u) << text;
    EXPECT_EQ(parse_event_line(text).has_value(), valid) << text;
  }
  // The figures folded from a line are Event's readers' figures, whichever path read it.
  EventLogReader r(no_thinning());
  r.feed(R"({"kind":"step","t":3,"src":"probe","fields":{"step":3.0,"grads_cleared":false,"allocated":10}})" "\n");
  r.feed(R"({"t":4,"pid":7,"src":"probe","kind":"step","fields":{"step":4,"grads_cleared":false,"allocated":10}})" "\n");
  r.feed(R"({"t": 5, "pid": 7, "src": "probe", "kind": "step", "fields": {"step": 5, "grads_cleared": "no", "allocated": 10}})" "\n");
  r.finish();
  EXPECT_EQ(r.fold().steps, 3u);
  EXPECT_EQ(r.fold().grads_asked, 3u);
  EXPECT_EQ(r.fold().grads_uncleared, 2u);
  EXPECT_TRUE(r.fold().growth_complete);
  EXPECT_DOUBLE_EQ(r.fold().gap_to - r.fold().gap_from, 1.0);
}

}  // namespace
}  // namespace oomh
