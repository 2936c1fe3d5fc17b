// The trace model: event lines, JSON forms, and how an attempt is judged to have died of an OOM.

#include <chrono>
#include <csignal>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "oomharness/policies/fit.h"
#include "oomharness/policies/trace.h"
#include "oomharness/policies/verdict.h"
#include "trace_builder.h"

namespace oomh {
namespace {

using testing::TraceBuilder;

TEST(ParseEventLine, ReadsAValidLine) {
  auto e = parse_event_line(
      R"({"t":1763780000.123456,"pid":4242,"src":"shim","kind":"inject","fields":{"entry":"cuMemAlloc_v2","size":1048576,"step":5,"phase":"forward"}})"
      "\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_DOUBLE_EQ(e->t, 1763780000.123456);
  EXPECT_EQ(e->pid, 4242);
  EXPECT_EQ(e->src, "shim");
  EXPECT_EQ(e->kind, "inject");
  EXPECT_EQ(e->integer("size"), 1048576);
  EXPECT_EQ(e->text("phase"), "forward");
  EXPECT_EQ(e->integer("missing", 7), 7);
  EXPECT_EQ(e->text("size", "fallback"), "fallback");  // a number is not text
  EXPECT_TRUE(e->has("entry"));
  EXPECT_FALSE(e->has("rule"));
}

TEST(ParseEventLine, FieldsAreOptional) {
  auto e = parse_event_line(R"({"t":1.5,"pid":1,"src":"probe","kind":"probe_exit"})");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->fields.is_object());
  EXPECT_TRUE(e->fields.empty());
}

TEST(ParseEventLine, RejectsInvalidLines) {
  EXPECT_FALSE(parse_event_line(""));
  EXPECT_FALSE(parse_event_line("not json"));
  EXPECT_FALSE(parse_event_line(R"({"t":1,"pid":1,"src":"shim","kind":"inject","fields":{"entry":)"));  // torn line
  EXPECT_FALSE(parse_event_line(R"([1,2,3])"));
  EXPECT_FALSE(parse_event_line(R"({"pid":1,"src":"shim","kind":"inject"})"));           // no t
  EXPECT_FALSE(parse_event_line(R"({"t":"now","pid":1,"src":"shim","kind":"inject"})"));  // t not a number
  EXPECT_FALSE(parse_event_line(R"({"t":1,"pid":1,"src":"shim"})"));                     // no kind
  EXPECT_FALSE(parse_event_line(R"({"t":1,"pid":1,"src":"shim","kind":""})"));           // empty kind
  EXPECT_FALSE(parse_event_line(R"({"t":1,"pid":1,"src":"shim","kind":"inject","fields":[1]})"));
  EXPECT_FALSE(parse_event_line(R"({"t":1,"pid":"x","src":"shim","kind":"inject"})"));
}

TEST(EventJson, RoundTrips) {
  Event e;
  e.t = 12.25;
  e.pid = 9;
  e.src = "probe";
  e.kind = "step";
  e.fields = {{"step", 3}, {"loss", 0.5}};
  nlohmann::json j = e;
  EXPECT_EQ(j["kind"], "step");
  Event back = j.get<Event>();
  EXPECT_EQ(back.t, e.t);
  EXPECT_EQ(back.pid, 9);
  EXPECT_EQ(back.src, "probe");
  EXPECT_EQ(back.integer("step"), 3);
  EXPECT_DOUBLE_EQ(back.number("loss"), 0.5);
  auto parsed = parse_event_line(j.dump());
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->fields, e.fields);
}

TEST(VerdictJson, RoundTrips) {
  Verdict v;
  v.policy = "batch_halving";
  v.args = {{"factor", 0.5}};
  v.status = VerdictStatus::fail;
  v.reason = "no halving";
  v.evidence = {{1, 2.5, "OOM at step 5 (batch 64)"}};
  nlohmann::json j = v;
  EXPECT_EQ(j["status"], "fail");
  Verdict back = j.get<Verdict>();
  EXPECT_EQ(back.policy, "batch_halving");
  EXPECT_EQ(back.status, VerdictStatus::fail);
  EXPECT_EQ(back.reason, "no halving");
  ASSERT_EQ(back.evidence.size(), 1u);
  EXPECT_EQ(back.evidence[0].attempt, 1);
  EXPECT_EQ(back.evidence[0].what, "OOM at step 5 (batch 64)");
  j["status"] = "maybe";
  EXPECT_ANY_THROW(j.get<Verdict>());
}

TEST(Attempt, EndedByOom) {
  // Exit 1 with the runner's OOM message after a refusal of the shim it did not get past.
  EXPECT_TRUE(TraceBuilder().attempt().step(4).inject_at(5).exit(1, true).build().attempts[0].ended_by_oom());
  // Issue 26: the message alone is not an OOM (Note [An OOM is an event]): a job whose cap was never
  // reached, dying of an unrelated error that mentions memory.
  EXPECT_FALSE(TraceBuilder().attempt().step(4).exit(1, true).build().attempts[0].ended_by_oom());
  // ... nor is it beside a refusal the code got past (step 5 completed after it).
  EXPECT_FALSE(TraceBuilder().attempt().inject_at(5).step(5).step(6).exit(1, true).build().attempts[0].ended_by_oom());
  // A refusal the code did not get past, without the message: not known to be an OOM either.
  EXPECT_FALSE(TraceBuilder().attempt().step(4).inject_at(5).exit(1).build().attempts[0].ended_by_oom());
  // Exit 1 with an uncaught probe OOM and no message.
  EXPECT_TRUE(TraceBuilder().attempt().oom(5, 64, false).exit(1).build().attempts[0].ended_by_oom());
  // An uncaught C++ OOM aborts.
  EXPECT_TRUE(TraceBuilder().attempt().oom(5, 64, false).killed(SIGABRT).build().attempts[0].ended_by_oom());
  // A caught OOM, then a failure for another reason.
  EXPECT_FALSE(TraceBuilder().attempt().oom(5, 64, true).exit(1).build().attempts[0].ended_by_oom());
  // Exit 0 even with a message: it did not end the attempt.
  EXPECT_FALSE(TraceBuilder().attempt().exit(0, true).build().attempts[0].ended_by_oom());
  // Killed by SIGKILL: not an OOM the code saw.
  EXPECT_FALSE(TraceBuilder().attempt().oom(5, 64, false).killed(SIGKILL).build().attempts[0].ended_by_oom());
}

TEST(Trace, AllEventsInOrderWithAttempt) {
  Trace t = TraceBuilder().attempt().step(1).step(2).exit(1).attempt().step(3).exit(0).build();
  auto all = t.all_events();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].first, 0);
  EXPECT_EQ(all[2].first, 1);
  EXPECT_EQ(all[2].second->integer("step"), 3);
  EXPECT_LT(all[1].second->t, all[2].second->t);
}

}  // namespace
}  // namespace oomh

// ---------------------------------------------------------------------------------------------------
// Hostile numbers and linear classification (issue 12).

namespace oomh {
namespace {

// Note [A job's integers]: clamped to +-2^53, so that `step + 1` on the largest cannot overflow.
TEST(EventInteger, ClampsNumbersToTheJobLimit) {
  auto e = parse_event_line(
      R"({"t":1,"kind":"inject","fields":{"big":1e30,"small":-1e30,"huge":18446744073709551615,"edge":9223372036854775808.0,)"
      R"("frac":-2.7,"int":9223372036854775807,"neg":-9223372036854775808,"at":9007199254740992,"below":9007199254740991}})");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(kJobIntegerLimit, 9007199254740992);
  EXPECT_EQ(e->integer("big"), kJobIntegerLimit);
  EXPECT_EQ(e->integer("small"), -kJobIntegerLimit);
  EXPECT_EQ(e->integer("huge"), kJobIntegerLimit);
  EXPECT_EQ(e->integer("edge"), kJobIntegerLimit);
  EXPECT_EQ(e->integer("int"), kJobIntegerLimit);
  EXPECT_EQ(e->integer("neg"), -kJobIntegerLimit);
  EXPECT_EQ(e->integer("at"), kJobIntegerLimit);
  EXPECT_EQ(e->integer("below"), kJobIntegerLimit - 1);
  EXPECT_EQ(e->integer("frac"), -2);
  EXPECT_EQ(job_integer(std::nan(""), 5), 5);
  EXPECT_EQ(job_integer(-1e300), -kJobIntegerLimit);
  EXPECT_EQ(job_integer(nlohmann::json("12"), -1), -1);
  Event nan_event;
  nan_event.fields = {{"x", std::nan("")}};
  EXPECT_EQ(nan_event.integer("x", 7), 7);
}

// The definitions before issue 12, kept here as the specification the linear ones must equal.
bool old_ended_by_oom(const Attempt& a) {
  bool failed = (a.end_kind == AttemptEnd::exited && a.exit_code && *a.exit_code != 0) ||
                (a.end_kind == AttemptEnd::signalled && a.signal && *a.signal == SIGABRT);
  if (!failed) return false;
  const auto& events = a.events;
  // Note [An OOM is an event]: the message counts beside a refusal that no later step at or after it got past.
  if (a.oom_message)
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].src != "shim" || events[i].kind != "inject") continue;
      const int64_t at = events[i].integer("step");
      bool got_past = false;
      for (size_t j = i + 1; j < events.size() && !got_past; ++j)
        got_past = completes_a_step(events[j]) && (at < 0 || completed_step(events[j]) >= at);
      if (!got_past) return true;
    }
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.src != "probe" || e.kind != "oom" || e.flag("caught", false)) continue;
    bool caught_later = false;
    for (size_t j = i + 1; j < events.size() && !caught_later; ++j)
      caught_later = events[j].kind == "oom_caught" &&
                     (!events[j].has("step") || events[j].integer("step") == e.integer("step"));
    if (!caught_later) return true;
  }
  return false;
}

std::vector<bool> old_visible(const Attempt& a) {
  auto is_probe = [](const Event& e, const char* kind) { return e.src == "probe" && e.kind == kind; };
  std::vector<bool> out;
  const bool died_of_oom = old_ended_by_oom(a);
  for (size_t i = 0; i < a.events.size(); ++i) {
    if (a.events[i].src != "shim" || a.events[i].kind != "inject") continue;
    bool visible = died_of_oom;
    const int64_t at = a.events[i].integer("step");
    for (size_t j = i + 1; j < a.events.size(); ++j) {
      if (is_probe(a.events[j], "oom") || is_probe(a.events[j], "oom_caught") ||
          (a.events[j].kind == "observed" && a.events[j].text("key") == "oom")) { visible = true; break; }
      if (completes_a_step(a.events[j]) && (at < 0 || completed_step(a.events[j]) >= at)) { visible = false; break; }
    }
    out.push_back(visible);
  }
  return out;
}

TEST(InjectedFaults, LinearPassEqualsTheForwardScanOnRandomTraces) {
  std::mt19937 rng(12);
  for (int round = 0; round < 3000; ++round) {
    TraceBuilder b;
    b.attempt();
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      const int64_t step = static_cast<int64_t>(rng() % 4);
      switch (rng() % 9) {
        case 0: b.inject(); break;
        case 1: case 2: b.inject_at(static_cast<int64_t>(rng() % 4)); break;
        case 3: b.oom(step, 8, rng() % 2 == 0); break;
        case 4: b.step(step); break;
        case 5: b.event("probe", "oom_caught", rng() % 2 ? nlohmann::json{{"step", step}} : nlohmann::json::object()); break;
        case 6:
          if (rng() % 3 == 0) b.observed_line("caught an OOM", {{"oom", "1"}});
          else b.observed_line("step", {{"step", std::to_string(step)}});
          break;
        case 7: b.event("runner", "oom_caught", {{"step", step}}); break;
        default: b.phase("forward"); break;
      }
    }
    switch (rng() % 4) {
      case 0: b.exit(0); break;
      case 1: b.exit(1, rng() % 2 == 0); break;
      case 2: b.killed(SIGABRT); break;
      default: b.killed(SIGKILL); break;
    }
    Trace t = b.build();
    const Attempt& a = t.attempts[0];
    ASSERT_EQ(a.ended_by_oom(), old_ended_by_oom(a)) << "round " << round;
    std::vector<bool> got;
    for (const InjectedFault& f : a.injected_faults()) got.push_back(f.visible);
    ASSERT_EQ(got, old_visible(a)) << "round " << round;
    // The faults come in the order of their events, each pointing at its own inject event.
    size_t k = 0;
    for (const Event& e : a.events)
      if (e.src == "shim" && e.kind == "inject") {
        ASSERT_EQ(a.injected_faults()[k++].event, &e);
      }
  }
}

TEST(InjectedFaults, HundredThousandInjectionsAreClassifiedQuickly) {
  TraceBuilder b;
  b.attempt();
  for (int i = 0; i < 100000; ++i) {
    b.inject();
    if (i % 1000 == 500) b.oom(i, 8, true);
  }
  b.exit(0);
  Trace t = b.build();
  const auto start = std::chrono::steady_clock::now();
  auto faults = t.attempts[0].injected_faults();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(faults.size(), 100000u);
  EXPECT_TRUE(faults.front().visible);
  EXPECT_FALSE(faults.back().visible);  // after the last OOM: the attempt went on and exited 0
  EXPECT_LT(seconds, 2.0);
}

}  // namespace
}  // namespace oomh

// ---------------------------------------------------------------------------------------------------
// Note [Event log limits]: the streamed reader.

namespace oomh {
namespace {

std::string event_line(const char* src, const char* kind, double t, const std::string& fields = "{}") {
  return std::string(R"({"t":)") + std::to_string(t) + R"(,"pid":1,"src":")" + src + R"(","kind":")" + kind +
         R"(","fields":)" + fields + "}\n";
}

TEST(EventLogReader, ChunkBoundariesDoNotMatter) {
  std::string log = event_line("probe", "step", 1, R"({"step":1})") + "garbage\n\n" +
                    event_line("shim", "inject", 2, R"({"size":10})") + event_line("probe", "oom", 3);
  log.pop_back();  // no final newline: the last line still counts
  EventLogReader whole;
  whole.feed(log);
  whole.finish();
  ASSERT_EQ(whole.events().size(), 3u);
  EXPECT_EQ(whole.bad_lines(), 1u);
  for (size_t chunk = 1; chunk < 40; ++chunk) {
    EventLogReader r;
    for (size_t at = 0; at < log.size(); at += chunk) r.feed(std::string_view(log).substr(at, chunk));
    r.finish();
    ASSERT_EQ(r.events().size(), 3u) << chunk;
    EXPECT_EQ(r.events()[1].integer("size"), 10);
    EXPECT_EQ(r.bad_lines(), 1u);
  }
}

TEST(EventLogReader, SkipsLinesOverTheLimitWithoutHoldingThem) {
  EventLogReader r(EventLogLimits{1024, 64, 10});
  r.feed(event_line("probe", "step", 1, R"({"step":1})"));
  const std::string big(4096, 'x');
  r.feed(R"({"t":2,"kind":"step","fields":{"pad":")");
  for (int i = 0; i < 100; ++i) r.feed(big);  // 400 KB, fed in pieces: skipped as it comes
  r.feed("\"}}\n");
  r.feed(event_line("probe", "step", 3, R"({"step":2})"));
  r.feed(std::string(2000, 'y'));  // a long last line without a newline
  r.finish();
  ASSERT_EQ(r.events().size(), 2u);
  EXPECT_EQ(r.long_lines(), 2u);
  EXPECT_EQ(r.bad_lines(), 0u);
  auto w = r.warnings("events.jsonl");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].kind, "warning");
  EXPECT_EQ(w[0].src, "runner");
  EXPECT_EQ(w[0].text("message"), "2 line(s) of events.jsonl over 1024 bytes were skipped");
  EXPECT_EQ(w[0].t, 3);
}

TEST(EventLogReader, DeepNestingIsCountedNotParsed) {
  std::string deep = R"({"t":1,"kind":"x","fields":{"a":)" + std::string(300000, '[') + std::string(300000, ']') + "}}";
  EXPECT_FALSE(parse_event_line(deep).has_value());  // no recursion 300,000 deep
  EventLogReader r;
  r.feed(deep + "\n");
  // Brackets inside strings are not nesting.
  r.feed(event_line("probe", "step", 2, R"({"text":")" + std::string(500, '[') + R"(\"[["})"));
  r.finish();
  ASSERT_EQ(r.events().size(), 1u);
  EXPECT_EQ(r.deep_lines(), 1u);
  auto w = r.warnings("log");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].integer("deep_lines"), 1);
  EXPECT_TRUE(nests_deeper_than("[[[]]]", 2));
  EXPECT_FALSE(nests_deeper_than("[[[]]]", 3));
  EXPECT_FALSE(nests_deeper_than(R"(["[[[[", "\"[[[["])", 1));
}

TEST(EventLogReader, KeepsTheFirstInjectsAndCountsTheRest) {
  EventLogReader r(EventLogLimits{kMaxEventLineBytes, kMaxEventDepth, 5});
  for (int i = 0; i < 12; ++i) r.feed(event_line("shim", "inject", i));
  r.feed(event_line("probe", "oom", 20));
  r.finish();
  ASSERT_EQ(r.events().size(), 6u);  // 5 injects and the oom
  EXPECT_EQ(r.injects_dropped(), 7u);
  auto w = r.warnings("log");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].integer("injects"), 12);
  EXPECT_EQ(w[0].integer("injects_dropped"), 7);
  EXPECT_EQ(w[0].t, 20);
}

}  // namespace
}  // namespace oomh

// Note [Fits means no OOM] (oomharness/policies/fit.h): what `budget` and `predict` ask of each run.
namespace oomh {
namespace {

TEST(FirstOomMet, ACaughtOomAndTheBatchTheRunWentOnAt) {
  Trace t = testing::TraceBuilder().attempt().inject().oom(1, 4096, true).step(1, 2048).step(2, 2048).exit(0).build();
  std::optional<OomMet> o = first_oom_met(t);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->step, 1);
  EXPECT_EQ(o->batch, 4096);
  EXPECT_TRUE(o->caught);
  EXPECT_EQ(o->steps_after, 2);
  EXPECT_EQ(o->last_batch, 2048);
  EXPECT_EQ(oom_met_text(*o), "out of memory at step 1 (batch 4096, forward), caught");
  EXPECT_EQ(recovered_text(*o), "recovered at batch 2048");
}

TEST(FirstOomMet, AnUncaughtOneAndALaterAttempt) {
  Trace t = testing::TraceBuilder().attempt().step(1, 64).inject_at(2).oom(2, 64, false).exit(1, true)
                .attempt().step(2, 32).exit(0).build();
  std::optional<OomMet> o = first_oom_met(t);
  ASSERT_TRUE(o.has_value());
  EXPECT_FALSE(o->caught);
  EXPECT_EQ(o->attempt, 0);
  EXPECT_EQ(o->steps_after, 1);  // the next attempt's step
  EXPECT_EQ(o->last_batch, 32);
  EXPECT_NE(oom_met_text(*o).find("not caught"), std::string::npos);
}

TEST(FirstOomMet, AnAbsorbedRefusalIsNoOom) {
  // The allocator's own free-and-retry got past the refusal: the code saw nothing, and the run fits.
  Trace t = testing::TraceBuilder().attempt().step(1, 64).inject().step(2, 64).exit(0).build();
  EXPECT_FALSE(first_oom_met(t).has_value());
  EXPECT_FALSE(first_oom_met(testing::TraceBuilder().attempt().step(1).exit(0).build()).has_value());
}

}  // namespace
}  // namespace oomh
