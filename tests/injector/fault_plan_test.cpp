// The fault plan parser against docs/fault-plan.md: every example there parses, every error names its field.
#include "engine/fault_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace oomh::inject;

namespace {

std::vector<std::string> json_examples(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> blocks;
  std::string line, block;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside && line.rfind("```json", 0) == 0) { inside = true; block.clear(); continue; }
    if (inside && line.rfind("```", 0) == 0) { inside = false; blocks.push_back(block); continue; }
    if (inside) block += line + "\n";
  }
  return blocks;
}

std::string error_of(const std::string& json) {
  auto r = parse_fault_plan(json);
  EXPECT_FALSE(r) << json;
  return r.error();
}

}  // namespace

TEST(FaultPlan, EveryExampleInTheDocsParses) {
  auto examples = json_examples(std::string(OOMH_DOCS_DIR) + "/fault-plan.md");
  ASSERT_FALSE(examples.empty()) << "docs/fault-plan.md has no ```json example";
  for (const auto& text : examples) {
    auto r = parse_fault_plan(text);
    EXPECT_TRUE(r) << r.error() << "\n" << text;
  }
}

TEST(FaultPlan, CapCountsIsReadWhenGiven) {
  EXPECT_FALSE(parse_fault_plan(R"({"caps":[{"limit":"8GiB"}]})")->cap_counts.has_value());
  EXPECT_EQ(parse_fault_plan(R"({"cap_counts":"footprint"})")->cap_counts, CapCounting::footprint);
  EXPECT_EQ(parse_fault_plan(R"({"cap_counts":"allocations"})")->cap_counts, CapCounting::allocations);
}

TEST(FaultPlan, TheDocsExampleMeansWhatTheDocsSay) {
  auto examples = json_examples(std::string(OOMH_DOCS_DIR) + "/fault-plan.md");
  ASSERT_FALSE(examples.empty());
  auto r = parse_fault_plan(examples[0]);
  ASSERT_TRUE(r) << r.error();
  const FaultPlan& p = *r;
  EXPECT_EQ(p.seed, 42u);
  ASSERT_EQ(p.rules.size(), 3u);
  const Rule& a = p.rules[0];
  EXPECT_EQ(a.name, "oom-at-5");
  EXPECT_TRUE(a.when.has_steps);
  EXPECT_EQ(a.when.steps_from, 5);
  EXPECT_EQ(a.when.steps_to, 5);
  EXPECT_TRUE(a.when.has_phase);
  EXPECT_EQ(a.when.phase, oomh::Phase::forward);
  EXPECT_EQ(a.when.min_size, 1u << 20);
  EXPECT_EQ(a.when.entries, kAllEntries);
  EXPECT_EQ(a.when.trigger, Trigger::first);
  EXPECT_EQ(a.when.repeat, 1u);
  EXPECT_EQ(a.fail.kind, Duration::times);
  EXPECT_EQ(a.fail.times, 4u);
  const Rule& b = p.rules[1];
  EXPECT_EQ(b.when.trigger, Trigger::every);
  EXPECT_EQ(b.when.n, 10u);
  EXPECT_EQ(b.when.repeat, 0u);
  EXPECT_EQ(b.when.min_size, 67108864u);
  const Rule& c = p.rules[2];
  EXPECT_EQ(c.when.trigger, Trigger::probability);
  EXPECT_DOUBLE_EQ(c.when.probability, 0.05);
  EXPECT_DOUBLE_EQ(c.when.after_s, 30.0);
  EXPECT_EQ(c.fail.kind, Duration::until_freed);
  EXPECT_EQ(c.fail.until_freed, 1ull << 30);
  ASSERT_EQ(p.caps.size(), 3u);
  EXPECT_EQ(p.caps[0].limit, 8ull << 30);
  EXPECT_EQ(p.caps[0].device, -1);
  EXPECT_EQ(p.caps[0].at, CapEntry::At::start);
  EXPECT_EQ(p.caps[1].at, CapEntry::At::step);
  EXPECT_EQ(p.caps[1].at_step, 8);
  EXPECT_EQ(p.caps[2].device, 1);
  EXPECT_EQ(p.caps[2].at, CapEntry::At::after);
  EXPECT_DOUBLE_EQ(p.caps[2].at_after_s, 60.0);
}

TEST(FaultPlan, EntryNamesAndGroups) {
  auto r = parse_fault_plan(R"({"rules":[{"when":{"entry":["vmm","cuMemAllocManaged"]}},{"when":{"entry":"async"}},
    {"when":{"entry":["sync"]}},{"when":{"entry":["cuMemAllocPitch"]}}]})");
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->rules[0].when.entries, entry_bit(Entry::mem_create) | entry_bit(Entry::mem_alloc_managed));
  EXPECT_EQ(r->rules[1].when.entries, entry_bit(Entry::mem_alloc_async) | entry_bit(Entry::mem_alloc_from_pool_async));
  EXPECT_EQ(r->rules[2].when.entries,
            entry_bit(Entry::mem_alloc) | entry_bit(Entry::mem_alloc_pitch) | entry_bit(Entry::mem_alloc_managed));
  EXPECT_EQ(r->rules[3].when.entries, entry_bit(Entry::mem_alloc_pitch));
  EXPECT_EQ(r->rules[0].name, "rules[0]");  // unnamed rules are named by position
}

// Note [Host memory]: `memory` picks the kind a rule or a cap targets; device is the default, and the plan
// written back reads as the same plan.
TEST(FaultPlan, MemoryKindOfRulesAndCaps) {
  auto r = parse_fault_plan(R"({"rules":[{"when":{"memory":"host","step":3}},{"when":{"memory":"host","entry":"cuMemHostRegister"}},
    {"when":{"entry":"vmm"}},{}], "caps":[{"limit":"1GiB","memory":"host"},{"limit":"8GiB"}]})");
  ASSERT_TRUE(r) << r.error();
  const FaultPlan& p = *r;
  EXPECT_EQ(p.rules[0].when.memory, MemoryKind::host);
  EXPECT_EQ(p.rules[0].when.entries, kAllEntries);
  EXPECT_EQ(p.rules[1].when.entries, entry_bit(Entry::mem_host_register));
  EXPECT_EQ(p.rules[2].when.memory, MemoryKind::device);
  EXPECT_EQ(p.rules[3].when.memory, MemoryKind::device);
  EXPECT_EQ(p.caps[0].memory, MemoryKind::host);
  EXPECT_EQ(p.caps[1].memory, MemoryKind::device);
  auto again = parse_fault_plan(fault_plan_json(p));
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ(again->rules[0].when.memory, MemoryKind::host);
  EXPECT_EQ(again->rules[1].when.entries, entry_bit(Entry::mem_host_register));
  EXPECT_EQ(again->rules[3].when.memory, MemoryKind::device);
  EXPECT_EQ(again->caps[0].memory, MemoryKind::host);
  EXPECT_EQ(again->caps[1].memory, MemoryKind::device);
  auto check = check_rule(R"({"when":{"memory":"host"},"fail":{"forever":true}})");
  ASSERT_TRUE(check.ok()) << check.error().str();
  EXPECT_NE(check.value().find(R"("memory":"host")"), std::string::npos) << check.value();
}

// Note [One result type]: a rule's error carries its field as data, relative to the rule.
TEST(FaultPlan, ARulesErrorHasItsPathAsData) {
  auto steps = check_rule(R"({"when":{"steps":{"from":5,"to":2}}})");
  ASSERT_FALSE(steps.ok());
  EXPECT_EQ(steps.error().path, (std::vector<std::string>{"when", "steps"}));
  EXPECT_EQ(steps.error().message, "'from' is after 'to'");
  EXPECT_EQ(steps.error().kind, oomh::Error::Kind::value);
  auto key = check_rule(R"({"when":{"stpe":5}})");
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.error().path, (std::vector<std::string>{"when", "stpe"}));
  EXPECT_EQ(key.error().message, "unknown key 'stpe'");
  EXPECT_EQ(key.error().kind, oomh::Error::Kind::unknown_key);
  auto entry = check_rule(R"({"when":{"entry":["cuMemAlloc","cuMemAloc"]}})");
  ASSERT_FALSE(entry.ok());
  EXPECT_EQ(entry.error().path_text(), "when.entry[1]");
  // A value outside a closed set: the message says what was wrong, the suggestion what was meant and what
  // may be written, for the front end to append (the plan's one-line error lists the set alone).
  EXPECT_EQ(entry.error().message, "unknown entry point 'cuMemAloc'");
  EXPECT_EQ(entry.error().suggestion.rfind(" (did you mean 'cuMemAlloc'?; use cuMemAlloc, ", 0), 0u) << entry.error().suggestion;
  auto phase = check_rule(R"({"when":{"phase":"forwards"}})");
  ASSERT_FALSE(phase.ok());
  EXPECT_EQ(phase.error().message, "unknown phase \"forwards\"");
  EXPECT_EQ(phase.error().suggestion, " (did you mean 'forward'?; use forward, backward, optimizer, eval, checkpoint or data)");
  auto memory = check_rule(R"({"when":{"memory":"pinned"}})");
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.error().str(), "when.memory: unknown memory \"pinned\" (use device or host)");
}

TEST(FaultPlan, DefaultsAndOptionalParts) {
  auto r = parse_fault_plan(R"({"rules":[{"when":{"nth":3,"repeat":2,"steps":{"from":4}}, "fail":{"forever":true}}]})");
  ASSERT_TRUE(r) << r.error();
  const Rule& rule = r->rules[0];
  EXPECT_EQ(rule.when.trigger, Trigger::nth);
  EXPECT_EQ(rule.when.n, 3u);
  EXPECT_EQ(rule.when.repeat, 2u);
  EXPECT_EQ(rule.when.steps_from, 4);
  EXPECT_EQ(rule.when.steps_to, INT64_MAX);
  EXPECT_EQ(rule.fail.kind, Duration::forever);
  EXPECT_TRUE(parse_fault_plan("{}"));
  EXPECT_TRUE(parse_fault_plan(R"({"version":1,"rules":[{}]})"));
  auto durations = parse_fault_plan(R"({"rules":[{"when":{"after":"250ms","max_size":"1.5GB"}}]})");
  ASSERT_TRUE(durations) << durations.error();
  EXPECT_DOUBLE_EQ(durations->rules[0].when.after_s, 0.25);
  EXPECT_EQ(durations->rules[0].when.max_size, 1500000000u);
}

struct BadPlan {
  const char* json;
  const char* error;
};

class FaultPlanErrors : public ::testing::TestWithParam<BadPlan> {};

TEST_P(FaultPlanErrors, NameTheFieldAndTheProblem) { EXPECT_EQ(error_of(GetParam().json), GetParam().error); }

INSTANTIATE_TEST_SUITE_P(
    EveryErrorPath, FaultPlanErrors,
    ::testing::Values(
        BadPlan{R"({"rules":[{"when":{"stpe":5}}]})", "rules[0].when: unknown key 'stpe'"},
        BadPlan{R"([1,2])", "the plan must be a JSON object"},
        BadPlan{R"({"rule":[]})", "unknown key 'rule'"},
        BadPlan{R"({"version":2})", "version: must be 1 (got 2)"},
        BadPlan{R"({"cap_counts":"everything"})", "cap_counts: must be \"allocations\" or \"footprint\" (got \"everything\")"},
        BadPlan{R"({"cap_counts":1})", "cap_counts: must be \"allocations\" or \"footprint\" (got 1)"},
        BadPlan{R"({"seed":-1})", "seed: must be at least 0 (got -1)"},
        BadPlan{R"({"seed":"x"})", "seed: must be an integer (got \"x\")"},
        BadPlan{R"({"rules":{}})", "rules: must be a list"},
        BadPlan{R"({"rules":[5]})", "rules[0]: must be an object"},
        BadPlan{R"({"rules":[{"name":""}]})", "rules[0].name: must be a non-empty string"},
        BadPlan{R"({"rules":[{"nme":"x"}]})", "rules[0]: unknown key 'nme'"},
        BadPlan{R"({"rules":[{"when":[]}]})", "rules[0].when: must be an object"},
        BadPlan{R"({"rules":[{},{"when":{"entry":["alloc","cuMemAloc"]}}]})",
                "rules[1].when.entry[1]: unknown entry point 'cuMemAloc' (use cuMemAlloc, cuMemAllocPitch, "
                "cuMemAllocManaged, cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemCreate, cuMemHostAlloc, cuMemAllocHost, "
                "cuMemHostRegister, or a group: alloc, sync, async, vmm, managed, host)"},
        BadPlan{R"({"rules":[{"when":{"memory":"pinned"}}]})",
                "rules[0].when.memory: unknown memory \"pinned\" (use device or host)"},
        BadPlan{R"({"rules":[{"when":{"memory":1}}]})", "rules[0].when.memory: unknown memory 1 (use device or host)"},
        BadPlan{R"({"rules":[{"when":{"entry":"cuMemHostAlloc"}}]})",
                "rules[0].when.entry: names only host entry points: add memory: host to the rule"},
        BadPlan{R"({"rules":[{"when":{"memory":"host","entry":["sync"]}}]})",
                "rules[0].when.entry: names no entry point that allocates host memory (use cuMemHostAlloc, "
                "cuMemAllocHost, cuMemHostRegister, cuMemCreate or the group host)"},
        BadPlan{R"({"caps":[{"limit":"1GiB","memory":"hots"}]})", "caps[0].memory: unknown memory \"hots\" (use device or host)"},
        BadPlan{R"({"caps":[{"limit":"1GiB","memory":"host","device":0}]})",
                "caps[0].device: a host cap is not a device's: leave 'device' out (Note [Host memory])"},
        BadPlan{R"({"rules":[{"when":{"entry":[]}}]})", "rules[0].when.entry: must name at least one entry point or group"},
        BadPlan{R"({"rules":[{"when":{"entry":5}}]})", "rules[0].when.entry: must be a list of entry points or groups"},
        BadPlan{R"({"rules":[{"when":{"min_size":"12XB"}}]})",
                "rules[0].when.min_size: bad size '12XB': unknown unit 'XB' (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)"},
        BadPlan{R"({"rules":[{"when":{"min_size":-5}}]})",
                "rules[0].when.min_size: must be a size in bytes (a number, or a string like \"1MiB\"; got -5)"},
        BadPlan{R"({"rules":[{"when":{"min_size":"2MiB","max_size":"1MiB"}}]})", "rules[0].when: min_size is larger than max_size"},
        BadPlan{R"({"rules":[{"when":{"device":-1}}]})", "rules[0].when.device: must be at least 0 (got -1)"},
        BadPlan{R"({"rules":[{"when":{"rank":1.5}}]})", "rules[0].when.rank: must be an integer (got 1.5)"},
        BadPlan{R"({"rules":[{"when":{"local_rank":"0"}}]})", "rules[0].when.local_rank: must be an integer (got \"0\")"},
        BadPlan{R"({"rules":[{"when":{"step":3,"steps":{"from":1}}}]})", "rules[0].when: use either 'step' or 'steps', not both"},
        BadPlan{R"({"rules":[{"when":{"steps":{"from":5,"to":2}}}]})", "rules[0].when.steps: 'from' is after 'to'"},
        BadPlan{R"({"rules":[{"when":{"steps":{"form":5}}}]})", "rules[0].when.steps: unknown key 'form'"},
        BadPlan{R"({"rules":[{"when":{"phase":"fwd"}}]})",
                "rules[0].when.phase: unknown phase \"fwd\" (use forward, backward, optimizer, eval, checkpoint or data)"},
        BadPlan{R"({"rules":[{"when":{"after":"5 parsecs"}}]})",
                "rules[0].when.after: bad duration '5 parsecs': unknown unit 'parsecs' (use ns, us, ms, s, m or h)"},
        BadPlan{R"({"rules":[{"when":{"after":-1}}]})", "rules[0].when.after: must be a non-negative number of seconds (got -1)"},
        BadPlan{R"({"rules":[{"when":{"nth":2,"every":3}}]})", "rules[0].when: use only one of 'nth', 'every' and 'probability'"},
        BadPlan{R"({"rules":[{"when":{"nth":0}}]})", "rules[0].when.nth: must be at least 1 (got 0)"},
        BadPlan{R"({"rules":[{"when":{"every":0}}]})", "rules[0].when.every: must be at least 1 (got 0)"},
        BadPlan{R"({"rules":[{"when":{"probability":1.5}}]})", "rules[0].when.probability: must be a number more than 0 and at most 1 (got 1.5)"},
        BadPlan{R"({"rules":[{"when":{"repeat":-2}}]})", "rules[0].when.repeat: must be at least 0 (got -2)"},
        BadPlan{R"({"rules":[{"fail":{"times":0}}]})", "rules[0].fail.times: must be at least 1 (got 0)"},
        BadPlan{R"({"rules":[{"fail":{"times":2,"forever":true}}]})", "rules[0].fail: use only one of 'times', 'until_freed' and 'forever'"},
        BadPlan{R"({"rules":[{"fail":{"forever":false}}]})", "rules[0].fail.forever: must be true (leave it out for a fault that ends)"},
        BadPlan{R"({"rules":[{"fail":{"until_freed":"lots"}}]})",
                "rules[0].fail.until_freed: bad size 'lots': it does not start with a number (write a size like 8GiB, 512MiB or 0)"},
        BadPlan{R"({"rules":[{"fail":{"time":2}}]})", "rules[0].fail: unknown key 'time'"},
        BadPlan{R"({"rules":[{"fail":3}]})", "rules[0].fail: must be an object"},
        BadPlan{R"({"caps":{}})", "caps: must be a list"},
        BadPlan{R"({"caps":[{"device":0}]})", "caps[0]: missing 'limit'"},
        BadPlan{R"({"caps":[{"limit":"8GiB","device":-2}]})", "caps[0].device: must be at least -1 (got -2)"},
        BadPlan{R"({"caps":[{"limit":"8GiB","device":16}]})", "caps[0].device: must be below 16"},
        BadPlan{R"({"caps":[{"limit":"8GiB","at":{"step":1,"after":2}}]})", "caps[0].at: give exactly one of 'step' and 'after'"},
        BadPlan{R"({"caps":[{"limit":"8GiB","at":{}}]})", "caps[0].at: give exactly one of 'step' and 'after'"},
        BadPlan{R"({"caps":[{"limit":"8GiB","at":{"stp":1}}]})", "caps[0].at: unknown key 'stp'"},
        BadPlan{R"({"caps":[{"limit":"8GiB","at":5}]})", "caps[0].at: must be an object"},
        BadPlan{R"({"caps":[{"limit":"8GiB","dev":1}]})", "caps[0]: unknown key 'dev'"}));

TEST(FaultPlan, InvalidJsonSaysWhere) {
  std::string e = error_of(R"({"rules": [)");
  EXPECT_EQ(e.rfind("invalid JSON: parse error at line 1, column 12", 0), 0u) << e;
}

TEST(FaultPlan, LoadFromTextOrFile) {
  EXPECT_TRUE(load_fault_plan(R"(  {"seed": 7})"));
  char path[] = "/tmp/oomh-plan-test-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string text = R"({"rules":[{"when":{"stpe":1}}]})";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  auto bad = load_fault_plan(path);
  EXPECT_EQ(bad.error(), std::string(path) + ": rules[0].when: unknown key 'stpe'");
  std::ofstream(path) << R"({"seed": 9})";
  auto good = load_fault_plan(path);
  ASSERT_TRUE(good) << good.error();
  EXPECT_EQ(good->seed, 9u);
  unlink(path);
  auto missing = load_fault_plan("/nonexistent/plan.json");
  EXPECT_EQ(missing.error(), "cannot read '/nonexistent/plan.json': No such file or directory");
  EXPECT_EQ(load_fault_plan("  ").error(), "empty (give the plan's JSON or the path of a file holding it)");
}

TEST(CapOption, OneSizeOrPerDevice) {
  auto all = parse_cap_option("8GiB");
  ASSERT_TRUE(all.ok()) << all.error().str();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].device, -1);
  EXPECT_EQ((*all)[0].limit, 8ull << 30);
  auto per = parse_cap_option("0=8GiB, 1=4GiB");
  ASSERT_TRUE(per.ok()) << per.error().str();
  ASSERT_EQ(per->size(), 2u);
  EXPECT_EQ((*per)[1].device, 1);
  EXPECT_EQ((*per)[1].limit, 4ull << 30);
  EXPECT_EQ(parse_cap_option("x=8GiB").error().str(), "bad device 'x' in 'x=8GiB' (write DEVICE=SIZE with DEVICE from 0 to 15)");
  EXPECT_EQ(parse_cap_option("0=8XB").error().str(), "bad size '8XB': unknown unit 'XB' (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)");
  EXPECT_EQ(parse_cap_option("").error().str(), "empty (write a size like 8GiB, or 0=8GiB,1=4GiB)");
}
