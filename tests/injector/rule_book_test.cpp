// Trigger and duration semantics of the rule book (Note [Rule semantics] in injector/engine/rule_book.h).
#include "engine/rule_book.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace oomh::inject;
using oomh::Phase;

namespace {

RuleBook book(const std::string& json) {
  auto r = parse_fault_plan(json);
  EXPECT_TRUE(r) << r.error();
  return RuleBook(r->rules, r->seed);
}

CallFacts call(uint64_t size = 1 << 20) {
  CallFacts f;
  f.size = size;
  return f;
}

// Which of `n` identical calls fail ('x') or pass ('.').
std::string run(RuleBook& b, int n, CallFacts f = call()) {
  std::string out;
  for (int i = 0; i < n; ++i) out += b.decide(f) >= 0 ? 'x' : '.';
  return out;
}

}  // namespace

TEST(RuleBook, NoTriggerKeyFailsTheFirstMatchOnce) {
  RuleBook b = book(R"({"rules":[{}]})");
  EXPECT_EQ(run(b, 5), "x....");
}

TEST(RuleBook, NthFailsTheNthMatchingCall) {
  RuleBook b = book(R"({"rules":[{"when":{"nth":3}}]})");
  EXPECT_EQ(run(b, 8), "..x.....");
}

TEST(RuleBook, NthWithRepeatCountsAgainAfterEachTrigger) {
  RuleBook b = book(R"({"rules":[{"when":{"nth":3,"repeat":2},"fail":{"times":2}}]})");
  EXPECT_EQ(run(b, 12), "..xx..xx....");
}

TEST(RuleBook, EveryKthUnlimitedByDefault) {
  RuleBook b = book(R"({"rules":[{"when":{"every":4}}]})");
  EXPECT_EQ(run(b, 12), "...x...x...x");
  RuleBook limited = book(R"({"rules":[{"when":{"every":2,"repeat":2}}]})");
  EXPECT_EQ(run(limited, 10), ".x.x......");
}

TEST(RuleBook, TimesFailsConsecutiveTargetCalls) {
  RuleBook b = book(R"({"rules":[{"when":{"nth":2},"fail":{"times":4}}]})");
  EXPECT_EQ(run(b, 8), ".xxxx...");
}

TEST(RuleBook, OnlyMatchingCallsCountTowardsNth) {
  RuleBook b = book(R"({"rules":[{"when":{"nth":2,"min_size":"1MiB"}}]})");
  CallFacts small = call(4096), big = call(1 << 20);
  EXPECT_LT(b.decide(small), 0);
  EXPECT_LT(b.decide(big), 0);
  EXPECT_LT(b.decide(small), 0);
  EXPECT_EQ(b.decide(big), 0);
}

TEST(RuleBook, TargetFilters) {
  RuleBook b = book(R"({"rules":[{"when":{"entry":["vmm"],"device":1,"rank":2,"local_rank":0,"max_size":"2MiB"},"fail":{"forever":true}}]})");
  CallFacts f = call();
  f.entry = Entry::mem_create;
  f.device = 1;
  f.rank = 2;
  CallFacts other_entry = f, other_device = f, other_rank = f, too_big = f, other_local = f;
  other_entry.entry = Entry::mem_alloc;
  other_device.device = 0;
  other_rank.rank = 0;
  too_big.size = 3 << 20;
  other_local.local_rank = 1;
  for (const CallFacts& no : {other_entry, other_device, other_rank, too_big, other_local}) EXPECT_LT(b.decide(no), 0);
  EXPECT_EQ(b.decide(f), 0);
}

TEST(RuleBook, StepWindowAndTheDurationOutlivesIt) {
  RuleBook b = book(R"({"rules":[{"when":{"step":5},"fail":{"times":3}}]})");
  CallFacts f = call();
  f.step = oomh::kUnknownStep;
  EXPECT_EQ(run(b, 2, f), "..");  // no step known yet: a step window never matches
  f.step = 4;
  EXPECT_EQ(run(b, 2, f), "..");
  f.step = 5;
  EXPECT_EQ(run(b, 1, f), "x");
  f.step = 6;  // the step moved on, the fault runs its course
  EXPECT_EQ(run(b, 3, f), "xx.");
  f.step = 5;  // repeat 1: never again
  EXPECT_EQ(run(b, 2, f), "..");
}

TEST(RuleBook, StepsRange) {
  RuleBook b = book(R"({"rules":[{"when":{"steps":{"from":3,"to":4},"every":1}}]})");
  CallFacts f = call();
  std::string out;
  for (int64_t step : {1, 2, 3, 4, 5, 6}) {
    f.step = step;
    out += b.decide(f) >= 0 ? 'x' : '.';
  }
  EXPECT_EQ(out, "..xx..");
}

TEST(RuleBook, PhaseWindow) {
  RuleBook b = book(R"({"rules":[{"when":{"phase":"backward"}}]})");
  CallFacts f = call();
  f.phase = Phase::forward;
  EXPECT_EQ(run(b, 2, f), "..");
  f.phase = Phase::backward;
  EXPECT_EQ(run(b, 2, f), "x.");
}

TEST(RuleBook, AfterSeconds) {
  RuleBook b = book(R"({"rules":[{"when":{"after":30}}]})");
  EXPECT_TRUE(b.needs_time());
  CallFacts f = call();
  f.elapsed_s = 29.9;
  EXPECT_EQ(run(b, 2, f), "..");
  f.elapsed_s = 30.0;
  EXPECT_EQ(run(b, 2, f), "x.");
}

TEST(RuleBook, UntilFreedEndsWhenTheProcessPaysBack) {
  RuleBook b = book(R"({"rules":[{"fail":{"until_freed":"1MiB"}}]})");
  CallFacts f = call();
  f.freed_total = 100;  // freed before the trigger does not count
  EXPECT_EQ(run(b, 3, f), "xxx");
  f.freed_total = 100 + (1 << 20) - 1;
  EXPECT_EQ(run(b, 1, f), "x");
  f.freed_total = 100 + (1 << 20);
  EXPECT_EQ(run(b, 3, f), "...");
}

TEST(RuleBook, ForeverFailsEveryLaterTargetCall) {
  RuleBook b = book(R"({"rules":[{"when":{"nth":2,"entry":"cuMemAlloc"},"fail":{"forever":true}}]})");
  EXPECT_EQ(run(b, 6), ".xxxxx");
  CallFacts vmm = call();
  vmm.entry = Entry::mem_create;  // not a target
  EXPECT_LT(b.decide(vmm), 0);
}

TEST(RuleBook, ProbabilityIsDeterministicForASeed) {
  const char* plan = R"({"seed":1234,"rules":[{"when":{"probability":0.3}}]})";
  RuleBook a = book(plan), b = book(plan);
  std::string first = run(a, 2000), second = run(b, 2000);
  EXPECT_EQ(first, second);
  auto failures = std::count(first.begin(), first.end(), 'x');
  EXPECT_GT(failures, 500);  // about 600 of 2000
  EXPECT_LT(failures, 700);
  RuleBook other_seed = book(R"({"seed":1235,"rules":[{"when":{"probability":0.3}}]})");
  EXPECT_NE(run(other_seed, 2000), first);
}

TEST(RuleBook, ProbabilityOneAlwaysFailsAndZeroIsRefused) {
  // A rule that can never fire tests nothing: the plan refuses it (Note [One rule schema]).
  auto never = parse_fault_plan(R"({"rules":[{"when":{"probability":0}}]})");
  EXPECT_FALSE(never);
  EXPECT_EQ(never.error(), "rules[0].when.probability: must be a number more than 0 and at most 1 (got 0)");
  RuleBook always = book(R"({"rules":[{"when":{"probability":1}}]})");
  EXPECT_EQ(run(always, 50), std::string(50, 'x'));
}

TEST(RuleBook, RulesAreIndependentAndTheFirstFailingOneIsReported) {
  RuleBook b = book(R"({"rules":[{"name":"a","when":{"nth":3}},{"name":"b","when":{"every":2}}]})");
  std::vector<int> who;
  for (int i = 0; i < 4; ++i) who.push_back(b.decide(call()));
  // call 1: none; call 2: b; call 3: a (and b's counter goes on: its 3rd match is not a 2nd); call 4: b.
  EXPECT_EQ(who, (std::vector<int>{-1, 1, 0, 1}));
}

TEST(RuleBook, Splitmix64IsTheReferenceSequence) {
  uint64_t state = 0;
  EXPECT_EQ(splitmix64(state), 0xE220A8397B1DCDAFull);  // splitmix64's published first output for seed 0
}

// Note [Where a step fault fires] in injector/engine/fault_plan.h: a rule is asked at one layer only.
TEST(RuleBook, AStepRuleIsAskedAtTheRequestLayerOnly) {
  RuleBook b = book(R"({"rules":[{"name":"s","when":{"step":3},"fail":{"times":2}}]})");
  CallFacts driver = call();
  driver.step = 3;
  driver.phase = oomh::Phase::forward;
  CallFacts request = driver;
  request.layer = request.requests = Layer::allocator;
  driver.requests = Layer::allocator;
  CallFacts copy = request;
  copy.phase = oomh::Phase::data;
  EXPECT_EQ(run(b, 2, copy), "..") << "the batch's copy before the step's work is not its window";
  EXPECT_EQ(run(b, 3, driver), "...") << "the driver no longer asks a step rule once a request layer is registered";
  EXPECT_EQ(run(b, 3, request), "xx.");
  RuleSeen seen = b.seen(0);
  EXPECT_EQ(seen.triggers, 1u);
  EXPECT_EQ(seen.driver_calls, 0u);
  EXPECT_EQ(seen.requests, 2u) << "counted until the rule was done: the trigger and the retry it failed";
}

TEST(RuleBook, WithoutARequestLayerEveryRuleStaysAtTheDriver) {
  RuleBook b = book(R"({"rules":[{"when":{"step":3}}]})");
  CallFacts driver = call();
  driver.step = 3;
  EXPECT_EQ(run(b, 2, driver), "x.");
  EXPECT_EQ(b.seen(0).driver_calls, 1u);
}

TEST(RuleBook, WhichRulesTheRequestLayersTake) {
  auto when = [](const std::string& json) {
    auto r = parse_fault_plan(R"({"rules":[{"when":)" + json + "}]}");
    EXPECT_TRUE(r) << r.error();
    return r->rules[0].when;
  };
  EXPECT_TRUE(at_request_layer(when(R"({"step":3})"), Layer::allocator));
  EXPECT_TRUE(at_request_layer(when(R"({"step":3,"phase":"backward"})"), Layer::probe));
  EXPECT_FALSE(at_request_layer(when(R"({"step":3,"phase":"data"})"), Layer::probe)) << "the probe has no point there";
  EXPECT_TRUE(at_request_layer(when(R"({"step":3,"phase":"data"})"), Layer::allocator));
  EXPECT_TRUE(at_request_layer(when(R"({"steps":{"from":2,"to":4}})"), Layer::allocator));
  EXPECT_TRUE(at_request_layer(when(R"({"step":3,"min_size":1048576})"), Layer::allocator)) << "the allocator knows sizes";
  EXPECT_FALSE(at_request_layer(when(R"({"step":3,"min_size":1048576})"), Layer::probe)) << "the probe knows none";
  EXPECT_FALSE(at_request_layer(when(R"({"step":3})"), Layer::driver));
  EXPECT_FALSE(at_request_layer(when(R"({"nth":20})"), Layer::allocator)) << "a count of driver calls stays there";
  EXPECT_FALSE(at_request_layer(when(R"({"step":3,"nth":2})"), Layer::allocator)) << "a sweep's site is a driver call";
  EXPECT_FALSE(at_request_layer(when(R"({"step":3,"entry":"cuMemAllocAsync"})"), Layer::allocator));
  EXPECT_FALSE(at_request_layer(when(R"({"step":3,"memory":"host"})"), Layer::allocator));
}
