// The registry: its order, and how it checks and normalises a suite's `expect:` arguments.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "oomharness/policies/oom_kinds.h"
#include "oomharness/policies/registry.h"

namespace oomh {
namespace {

using ::testing::HasSubstr;

nlohmann::json normalised(const std::string& policy, nlohmann::json args) {
  const PolicyInfo* p = find_policy(policy);
  EXPECT_NE(p, nullptr) << policy;
  if (!p) return nullptr;
  auto normalised = normalise_args(*p, args);
  EXPECT_TRUE(normalised.ok()) << normalised.error().message;
  return normalised ? normalised.value() : args;
}

Error error_of(const std::string& policy, nlohmann::json args) {
  auto normalised = normalise_args(*find_policy(policy), args);
  EXPECT_FALSE(normalised.ok()) << policy << " accepted " << args.dump();
  return normalised.error();
}

TEST(Registry, DocumentationOrder) {
  std::vector<std::string> names;
  for (const auto& p : policies()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"exit", "completes", "oom_visible", "batch_halving", "empty_cache_retry",
                                             "checkpoint_resume", "graceful_exit", "memory_stable", "peak_below", "no_hang",
                                             "ranks_recover_together", "zero_grad", "eval_no_grad", "effective_batch"}));
  EXPECT_EQ(find_policy("nope"), nullptr);
  EXPECT_TRUE(find_policy("exit")->scalar_arg);
  EXPECT_TRUE(find_policy("completes")->scalar_arg);
  EXPECT_TRUE(find_policy("peak_below")->scalar_arg);
  EXPECT_FALSE(find_policy("batch_halving")->scalar_arg);
  EXPECT_TRUE(find_policy("checkpoint_resume")->needs_reference);
}

TEST(NormaliseArgs, FillsDefaults) {
  auto a = normalised("batch_halving", nullptr);
  EXPECT_EQ(a["factor"], 0.5);
  EXPECT_EQ(a["min"], 1);
  EXPECT_EQ(a["no_sample_loss"], false);
  EXPECT_EQ(normalised("exit", nlohmann::json::object())["code"], 0);
  EXPECT_EQ(normalised("empty_cache_retry", nullptr)["max_retries"], 3);
  // Issue 26: a leak is a trend (share, steps); the absolute limit is an option without a default.
  EXPECT_FALSE(normalised("memory_stable", nullptr).contains("growth_per_step"));
  EXPECT_DOUBLE_EQ(normalised("memory_stable", nullptr)["share"].get<double>(), 0.1);
  EXPECT_FALSE(normalised("memory_stable", nullptr).contains("steps"));
  EXPECT_EQ(normalised("memory_stable", nullptr)["after_recovery"], true);
  EXPECT_EQ(normalised("no_hang", nullptr)["stall"], 60);
  EXPECT_EQ(normalised("graceful_exit", nullptr)["message"], oomh::oom::message_pattern());
  // No default: stays absent (unlimited / the job's target).
  EXPECT_FALSE(normalised("checkpoint_resume", nullptr).contains("max_lost_steps"));
  EXPECT_FALSE(normalised("completes", nullptr).contains("steps"));
}

TEST(NormaliseArgs, ScalarFormGoesToTheFirstArgument) {
  EXPECT_EQ(normalised("exit", 3)["code"], 3);
  EXPECT_EQ(normalised("completes", 100)["steps"], 100);
  EXPECT_EQ(normalised("peak_below", "8GiB")["bytes"], 8ull << 30);
}

TEST(NormaliseArgs, SizesAndDurations) {
  EXPECT_EQ(normalised("peak_below", {{"bytes", "512MiB"}})["bytes"], 512ull << 20);
  EXPECT_EQ(normalised("peak_below", {{"bytes", "1.5GB"}})["bytes"], 1500000000ull);
  EXPECT_EQ(normalised("peak_below", {{"bytes", 4096}})["bytes"], 4096);
  EXPECT_EQ(normalised("memory_stable", {{"growth_per_step", "64KiB"}})["growth_per_step"], 65536);
  EXPECT_DOUBLE_EQ(normalised("no_hang", {{"stall", "90s"}})["stall"].get<double>(), 90.0);
  EXPECT_DOUBLE_EQ(normalised("no_hang", {{"stall", "2m"}})["stall"].get<double>(), 120.0);
  EXPECT_DOUBLE_EQ(normalised("graceful_exit", {{"within", "250ms"}})["within"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(normalised("graceful_exit", {{"within", 30}})["within"].get<double>(), 30.0);
  // YAML scalars may arrive as text.
  EXPECT_DOUBLE_EQ(normalised("batch_halving", {{"factor", "0.25"}})["factor"].get<double>(), 0.25);
  EXPECT_EQ(normalised("batch_halving", {{"no_sample_loss", "true"}})["no_sample_loss"], true);
}

TEST(NormaliseArgs, BadSizeQuotesTheValue) {
  auto e = error_of("peak_below", {{"bytes", "12XB"}});
  EXPECT_EQ(e.path_text(), "bytes");
  EXPECT_THAT(e.message, HasSubstr("'12XB'"));
  EXPECT_THAT(e.message, HasSubstr("unknown unit"));
  EXPECT_THAT(error_of("no_hang", {{"stall", "soon"}}).message, HasSubstr("'soon'"));
}

TEST(NormaliseArgs, UnknownArgumentSuggestsTheNearest) {
  auto e = error_of("batch_halving", {{"factr", 0.5}});
  EXPECT_EQ(e.path_text(), "factr");
  EXPECT_THAT(e.message, HasSubstr("no argument 'factr'"));
  EXPECT_THAT(e.message, HasSubstr("did you mean 'factor'?"));
  EXPECT_THAT(error_of("empty_cache_retry", {{"retries", 2}}).message, HasSubstr("did you mean 'max_retries'?"));
  EXPECT_THAT(error_of("batch_halving", {{"no_sampleloss", true}}).message, HasSubstr("did you mean 'no_sample_loss'?"));
  EXPECT_THAT(error_of("oom_visible", {{"x", 1}}).message, HasSubstr("takes no arguments"));
}

TEST(NormaliseArgs, MemoryStablesGoldenMapsStepsToSizes) {
  auto a = normalised("memory_stable", {{"golden", {{"007", "1MiB"}, {"8", 4096}}}});
  EXPECT_EQ(a["golden"], (nlohmann::json{{"7", 1 << 20}, {"8", 4096}}));
  EXPECT_EQ(a["golden_tolerance"], 64 * 1024);
  auto e = error_of("memory_stable", {{"golden", {{"last", 5}}}});
  EXPECT_EQ(e.path_text(), "golden.last");
  EXPECT_THAT(e.message, HasSubstr("'last' is not a step number"));
  EXPECT_THAT(error_of("memory_stable", {{"golden", {{"3", "lots"}}}}).message, HasSubstr("'lots'"));
  EXPECT_THAT(error_of("memory_stable", {{"golden", {{"3", -1}}}}).message, HasSubstr("cannot be negative"));
  EXPECT_THAT(error_of("memory_stable", {{"golden", 5}}).message, HasSubstr("golden"));
  // A byte count is a uint64: 2^64-1 written out is kept exactly; a float past it is refused, never cast.
  EXPECT_EQ(normalised("memory_stable", {{"golden", {{"3", UINT64_MAX}}}})["golden"]["3"].get<uint64_t>(), UINT64_MAX);
  EXPECT_THAT(error_of("memory_stable", {{"golden", {{"3", 1e30}}}}).message,
              HasSubstr("golden step 3 is too large: 1e+30 is past 2^64-1 bytes"));
  EXPECT_THAT(error_of("memory_stable", {{"golden_tolerance", 18446744073709551616.0}}).message, HasSubstr("is too large"));
}

TEST(NormaliseArgs, WrongTypeQuotesTheValue) {
  auto e = error_of("batch_halving", {{"factor", "half"}});
  EXPECT_EQ(e.path_text(), "factor");
  EXPECT_THAT(e.message, HasSubstr("must be a number"));
  EXPECT_THAT(e.message, HasSubstr("'half'"));
  EXPECT_THAT(error_of("exit", 1.5).message, HasSubstr("whole number, got 1.5"));
  EXPECT_THAT(error_of("batch_halving", {{"no_sample_loss", 3}}).message, HasSubstr("true or false, got 3"));
  EXPECT_THAT(error_of("graceful_exit", {{"message", 5}}).message, HasSubstr("must be text"));
  EXPECT_THAT(error_of("batch_halving", {{"factor", 2}}).message, HasSubstr("at most 1"));
  EXPECT_THAT(error_of("batch_halving", {{"min", -1}}).message, HasSubstr("cannot be negative"));
  EXPECT_THAT(error_of("batch_halving", 0.5).message, HasSubstr("named arguments"));
}

TEST(NormaliseArgs, RequiredArgument) {
  auto e = error_of("peak_below", nlohmann::json::object());
  EXPECT_EQ(e.path_text(), "bytes");
  EXPECT_THAT(e.message, HasSubstr("needs 'bytes'"));
}

TEST(NormaliseArgs, ReferenceObject) {
  auto a = normalised("checkpoint_resume", {{"reference", {{"rtol", "1e-3"}}}});
  EXPECT_EQ(a["reference"]["metric"], "loss");
  EXPECT_DOUBLE_EQ(a["reference"]["rtol"].get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(a["reference"]["atol"].get<double>(), 0.0);
  EXPECT_TRUE(wants_reference(*find_policy("checkpoint_resume"), a));
  auto t = normalised("checkpoint_resume", {{"reference", true}});
  EXPECT_EQ(t["reference"]["metric"], "loss");
  auto none = normalised("checkpoint_resume", nullptr);
  EXPECT_FALSE(wants_reference(*find_policy("checkpoint_resume"), none));
  auto e = error_of("checkpoint_resume", {{"reference", {{"metrc", "loss"}}}});
  EXPECT_EQ(e.path_text(), "reference.metrc");
  EXPECT_THAT(e.message, HasSubstr("did you mean 'metric'?"));
}

TEST(NormaliseArgs, BadRegex) {
  auto e = error_of("graceful_exit", {{"message", "out of (memory"}});
  EXPECT_EQ(e.path_text(), "message");
  EXPECT_THAT(e.message, HasSubstr("regular expression"));
  // 20,000 nested groups: std::regex recursed into a crash; RE2 parses it without recursion and takes it.
  const std::string deep = std::string(20000, '(') + "x" + std::string(20000, ')');
  EXPECT_EQ(normalised("graceful_exit", {{"message", deep}})["message"], deep);
}

}  // namespace
}  // namespace oomh
