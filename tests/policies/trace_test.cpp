// The trace model: event lines, JSON forms, and how an attempt is judged to have died of an OOM.

#include <csignal>

#include <gtest/gtest.h>

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
  // Exit 1 with the runner's OOM message.
  EXPECT_TRUE(TraceBuilder().attempt().exit(1, true).build().attempts[0].ended_by_oom());
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
