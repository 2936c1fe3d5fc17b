// --fault spec parsing and the -k job filter.

#include <gtest/gtest.h>

#include "oomharness/runner/cli_specs.h"

namespace oomh {
namespace {

nlohmann::json rule_of(const std::string& spec) {
  auto r = parse_fault_spec(spec, "");
  EXPECT_TRUE(r) << r.error();
  return r ? r->rule : nlohmann::json();
}

std::string error_of(const std::string& spec) {
  auto r = parse_fault_spec(spec, "");
  EXPECT_FALSE(r) << "expected an error for '" << spec << "', got " << (r ? r->rule.dump() : "");
  return r.error();
}

TEST(FaultSpec, StepWithTimes) {
  auto rule = rule_of("step=5,times=4");
  EXPECT_EQ(rule["when"], nlohmann::json({{"step", 5}}));
  EXPECT_EQ(rule["fail"], nlohmann::json({{"times", 4}}));
  EXPECT_EQ(rule["name"], "step=5,times=4");
}

TEST(FaultSpec, NthForever) {
  auto rule = rule_of("nth=3,forever");
  EXPECT_EQ(rule["when"]["nth"], 3);
  EXPECT_EQ(rule["fail"], nlohmann::json({{"forever", true}}));
}

TEST(FaultSpec, EveryWithSizeFilter) {
  auto rule = rule_of("every=10,min_size=64MiB");
  EXPECT_EQ(rule["when"]["every"], 10);
  EXPECT_EQ(rule["when"]["min_size"].get<uint64_t>(), 64ull << 20);
  EXPECT_EQ(rule["fail"], nlohmann::json({{"times", 1}}));  // the plan's default, written out
}

TEST(FaultSpec, AfterProbabilityUntilFreed) {
  auto rule = rule_of("after=30s,probability=0.05,until_freed=1GiB");
  EXPECT_DOUBLE_EQ(rule["when"]["after"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(rule["when"]["probability"].get<double>(), 0.05);
  EXPECT_EQ(rule["fail"]["until_freed"].get<uint64_t>(), 1ull << 30);
}

TEST(FaultSpec, StepsRangesPhaseEntriesAndName) {
  EXPECT_EQ(rule_of("steps=5..10")["when"]["steps"], nlohmann::json({{"from", 5}, {"to", 10}}));
  EXPECT_EQ(rule_of("steps=5-10")["when"]["steps"], nlohmann::json({{"from", 5}, {"to", 10}}));
  EXPECT_EQ(rule_of("steps=5..")["when"]["steps"], nlohmann::json({{"from", 5}}));
  EXPECT_EQ(rule_of("steps=..7")["when"]["steps"], nlohmann::json({{"to", 7}}));
  auto rule = rule_of("phase=backward,entry=async+vmm,device=1,name=bwd");
  EXPECT_EQ(rule["when"]["phase"], "backward");
  // Groups are written out as the entry points they stand for: the rule as the shim reads it.
  EXPECT_EQ(rule["when"]["entry"], nlohmann::json({"cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemCreate"}));
  EXPECT_EQ(rule["when"]["device"], 1);
  EXPECT_EQ(rule["name"], "bwd");
  auto named = parse_fault_spec("step=1", "cli-1");
  ASSERT_TRUE(named);
  EXPECT_EQ(named->name, "cli-1");
}

TEST(FaultSpec, ErrorsQuoteTheSpec) {
  // Key names and syntax are this front end's; every rule about values is the shim's own parser's
  // (Note [One rule schema]), so the words after the key are the shim's.
  EXPECT_EQ(error_of("stpe=5"), "bad --fault 'stpe=5': unknown key 'stpe' (did you mean 'step'?)");
  EXPECT_EQ(error_of("step=five"), "bad --fault 'step=five': 'step': must be an integer (got \"five\")");
  EXPECT_EQ(error_of("step=5,steps=1..3"), "bad --fault 'step=5,steps=1..3': use either 'step' or 'steps', not both");
  EXPECT_EQ(error_of("nth=2,every=3"), "bad --fault 'nth=2,every=3': use only one of 'nth', 'every' and 'probability'");
  EXPECT_EQ(error_of("times=2,forever"), "bad --fault 'times=2,forever': use only one of 'times', 'until_freed' and 'forever'");
  EXPECT_EQ(error_of("probability=1.5"),
            "bad --fault 'probability=1.5': 'probability': must be a number more than 0 and at most 1 (got 1.5)");
  EXPECT_EQ(error_of("probability=0"),
            "bad --fault 'probability=0': 'probability': must be a number more than 0 and at most 1 (got 0)");
  EXPECT_EQ(error_of("min_size=12XB"),
            "bad --fault 'min_size=12XB': 'min_size': bad size '12XB': unknown unit 'XB' (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)");
  EXPECT_EQ(error_of("phase=warmup"),
            "bad --fault 'phase=warmup': 'phase': unknown phase \"warmup\" (use forward, backward, optimizer, eval, checkpoint or data)");
  EXPECT_EQ(error_of("phase=forwards"),
            "bad --fault 'phase=forwards': 'phase': unknown phase \"forwards\" (did you mean 'forward'?; use forward, backward, "
            "optimizer, eval, checkpoint or data)");
  EXPECT_EQ(error_of("step"), "bad --fault 'step': 'step' needs a value ('step=...')");
  EXPECT_EQ(error_of("step=1,step=2"), "bad --fault 'step=1,step=2': 'step' is given twice");
  EXPECT_EQ(error_of("steps=9..3"), "bad --fault 'steps=9..3': 'steps': 'from' is after 'to'");
  EXPECT_EQ(error_of("steps=9"), "bad --fault 'steps=9': 'steps' must be a range like 5..10, 5.. or ..10, not '9'");
  EXPECT_EQ(error_of("times=0"), "bad --fault 'times=0': 'times': must be at least 1 (got 0)");
  EXPECT_EQ(error_of("after=20000000000s"),
            "bad --fault 'after=20000000000s': 'after': bad duration '20000000000s': longer than 1e9 seconds (about 31 years)");
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of("step=1,,times=2").find("empty item"), std::string::npos);
  EXPECT_NE(error_of("entry=cuMemAlloc+bogus").find("unknown entry point 'bogus'"), std::string::npos);
  EXPECT_NE(error_of("min_size=2MiB,max_size=1MiB").find("larger"), std::string::npos);
}

bool k(const std::string& expr, const std::string& suite, const std::string& job) {
  auto f = JobFilter::parse(expr);
  EXPECT_TRUE(f) << f.error();
  return f && f->matches(suite, job);
}

TEST(JobFilterTest, SubstringIgnoresCase) {
  EXPECT_TRUE(k("halv", "demo", "batch_halving"));
  EXPECT_TRUE(k("HALV", "demo", "batch_halving"));
  EXPECT_TRUE(k("demo::batch", "demo", "batch_halving"));
  EXPECT_TRUE(k("demo", "demo", "anything"));  // the suite's name is part of the full name
  EXPECT_FALSE(k("retry", "demo", "batch_halving"));
}

TEST(JobFilterTest, Globs) {
  EXPECT_TRUE(k("batch_*", "demo", "batch_halving"));       // the job's own name
  EXPECT_TRUE(k("demo::*ing", "demo", "batch_halving"));    // the full name
  EXPECT_FALSE(k("halv*", "demo", "batch_halving"));        // a glob matches whole names
  EXPECT_TRUE(k("*halv*", "demo", "batch_halving"));
  EXPECT_TRUE(k("batch_halving[12]", "s", "batch_halving2"));
}

TEST(JobFilterTest, BooleanExpressions) {
  EXPECT_TRUE(k("halving and not slow", "demo", "batch_halving"));
  EXPECT_FALSE(k("halving and not slow", "demo", "batch_halving_slow"));
  EXPECT_TRUE(k("retry or halving", "demo", "batch_halving"));
  EXPECT_TRUE(k("not (retry or resume)", "demo", "batch_halving"));
  EXPECT_FALSE(k("not (retry or halving)", "demo", "batch_halving"));
  EXPECT_TRUE(k("(a or b) and c", "s", "b_c"));
}

TEST(JobFilterTest, BadExpressions) {
  for (const char* bad : {"", "and", "a and", "(a or b", "a b", "not", "a or )"}) {
    auto f = JobFilter::parse(bad);
    EXPECT_FALSE(f) << "'" << bad << "' parsed";
    EXPECT_EQ(f.error().rfind(std::string("bad -k '") + bad + "'", 0), 0u) << f.error();
  }
}

}  // namespace
}  // namespace oomh
