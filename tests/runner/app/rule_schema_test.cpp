// Note [One rule schema] (injector/engine/fault_plan.h): a suite's `faults:`, the `--fault` text and the
// shim's own parser must accept exactly the same rules and mean the same by them. Every documented
// `--fault` example and a generated set of rules, valid and not, go through all three.

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "engine/fault_plan.h"
#include "oomharness/runner/cli_specs.h"
#include "oomharness/runner/suite.h"

namespace oomh {
namespace {

struct Outcome {
  bool accepted = false;
  nlohmann::json rule;  // as the shim reads it
  std::string error;
};

Outcome through_fault_text(const std::string& spec) {
  Outcome o;
  auto f = parse_fault_spec(spec, "r");
  o.accepted = static_cast<bool>(f);
  if (f) o.rule = f->rule;
  else o.error = f.error();
  return o;
}

Outcome through_suite(const std::string& when_yaml, const std::string& fail_yaml) {
  Outcome o;
  // step_base 0: a step before the job's first one is a job's problem (steps_before_first), not the rule's.
  std::string text = "version: 1\njobs:\n  - name: j\n    run: 'true'\n    step_base: 0\n    faults:\n      - name: r\n        when: " + when_yaml +
                     "\n" + (fail_yaml.empty() ? std::string() : "        fail: " + fail_yaml + "\n");
  auto load = load_suite_text(text, "s.yaml", "/tmp");
  o.accepted = load.ok();
  if (o.accepted) o.rule = load->jobs.at(0).faults.at(0).rule;
  else o.error = load.error().empty() ? "?" : load.error()[0].str();
  return o;
}

Outcome through_shim(const nlohmann::json& rule) {
  Outcome o;
  auto r = inject::parse_fault_plan(nlohmann::json{{"rules", {rule}}}.dump());
  o.accepted = static_cast<bool>(r);
  if (!r) o.error = r.error();
  return o;
}

// One rule written both ways: `spec` for --fault, `when`/`fail` as YAML flow maps, `json` as the plan's.
struct Case {
  std::string spec, when, fail;
  nlohmann::json json;
};

void expect_same(const Case& c) {
  Outcome text = through_fault_text(c.spec);
  Outcome suite = through_suite(c.when, c.fail);
  Outcome shim = through_shim(c.json);
  EXPECT_EQ(text.accepted, shim.accepted) << "--fault '" << c.spec << "': " << text.error << " | shim: " << shim.error;
  EXPECT_EQ(suite.accepted, shim.accepted) << "when: " << c.when << " fail: " << c.fail << ": " << suite.error
                                           << " | shim: " << shim.error;
  if (text.accepted && suite.accepted) {
    EXPECT_EQ(text.rule, suite.rule) << c.spec;
  }
}

TEST(RuleSchema, GeneratedRulesAreAcceptedAlikeByBothFrontEndsAndTheShim) {
  // key, values as --fault writes them (the suite writes the same scalar; the plan's JSON as YAML types it).
  const std::vector<std::pair<std::string, std::vector<std::string>>> when_values = {
      {"step", {"0", "5", "-1", "five", "2.5", "4.0", "99999999999999999999"}},
      {"nth", {"0", "1", "7", "x"}},
      {"every", {"0", "3"}},
      {"probability", {"0", "0.5", "1", "1.5", "-0.1", "abc"}},
      {"repeat", {"0", "2", "-1"}},
      {"min_size", {"1MiB", "0", "12XB", "-5", "1024"}},
      {"max_size", {"64MiB", "x"}},
      {"after", {"30s", "250ms", "0", "-1s", "20000000000s", "5", "soon"}},
      {"phase", {"forward", "forwards", "data", "none"}},
      {"device", {"0", "3", "-1"}},
      {"rank", {"1", "-2"}},
      {"local_rank", {"0", "z"}},
      {"entry", {"cuMemAlloc", "async", "bogus"}},
  };
  auto scalar_json = [](const std::string& v) -> nlohmann::json {
    // How the suite (YAML 1.2 plain scalars) and --fault type a value.
    try {
      size_t used = 0;
      long long i = std::stoll(v, &used);
      if (used == v.size()) return i;
    } catch (...) {
    }
    try {
      size_t used = 0;
      double d = std::stod(v, &used);
      if (used == v.size()) return d;
    } catch (...) {
    }
    return v;
  };
  int cases = 0;
  for (const auto& [key, values] : when_values)
    for (const auto& v : values) {
      nlohmann::json value = scalar_json(v);
      if (key == "entry") value = nlohmann::json::array({v});
      expect_same(Case{key + "=" + v, "{" + key + ": " + v + "}", "", {{"name", "r"}, {"when", {{key, value}}}}});
      ++cases;
    }
  // Ranges, durations of a fault, and the combinations the plan forbids.
  const std::vector<Case> more = {
      {"steps=2..5", "{steps: {from: 2, to: 5}}", "", {{"name", "r"}, {"when", {{"steps", {{"from", 2}, {"to", 5}}}}}}},
      {"steps=5..", "{steps: {from: 5}}", "", {{"name", "r"}, {"when", {{"steps", {{"from", 5}}}}}}},
      {"steps=..3", "{steps: {to: 3}}", "", {{"name", "r"}, {"when", {{"steps", {{"to", 3}}}}}}},
      {"steps=9..3", "{steps: {from: 9, to: 3}}", "", {{"name", "r"}, {"when", {{"steps", {{"from", 9}, {"to", 3}}}}}}},
      {"step=2,steps=3..", "{step: 2, steps: {from: 3}}", "",
       {{"name", "r"}, {"when", {{"step", 2}, {"steps", {{"from", 3}}}}}}},
      {"nth=2,every=3", "{nth: 2, every: 3}", "", {{"name", "r"}, {"when", {{"nth", 2}, {"every", 3}}}}},
      {"min_size=2MiB,max_size=1MiB", "{min_size: 2MiB, max_size: 1MiB}", "",
       {{"name", "r"}, {"when", {{"min_size", "2MiB"}, {"max_size", "1MiB"}}}}},
      {"entry=cuMemAlloc+vmm", "{entry: [cuMemAlloc, vmm]}", "", {{"name", "r"}, {"when", {{"entry", {"cuMemAlloc", "vmm"}}}}}},
      {"step=3,times=4", "{step: 3}", "{times: 4}", {{"name", "r"}, {"when", {{"step", 3}}}, {"fail", {{"times", 4}}}}},
      {"step=3,times=0", "{step: 3}", "{times: 0}", {{"name", "r"}, {"when", {{"step", 3}}}, {"fail", {{"times", 0}}}}},
      {"step=3,forever", "{step: 3}", "{forever: true}", {{"name", "r"}, {"when", {{"step", 3}}}, {"fail", {{"forever", true}}}}},
      {"step=3,forever=false", "{step: 3}", "{forever: false}",
       {{"name", "r"}, {"when", {{"step", 3}}}, {"fail", {{"forever", false}}}}},
      {"step=3,until_freed=1GiB", "{step: 3}", "{until_freed: 1GiB}",
       {{"name", "r"}, {"when", {{"step", 3}}}, {"fail", {{"until_freed", "1GiB"}}}}},
      {"step=3,times=2,forever", "{step: 3}", "{times: 2, forever: true}",
       {{"name", "r"}, {"when", {{"step", 3}}}, {"fail", {{"times", 2}, {"forever", true}}}}},
  };
  for (const Case& c : more) {
    expect_same(c);
    ++cases;
  }
  EXPECT_GT(cases, 60);
}

// Every `--fault` example the README and docs give is accepted, and means what the suite form means.
TEST(RuleSchema, EveryDocumentedFaultExampleIsAccepted) {
  const std::string root = OOMH_SOURCE_DIR;
  const std::regex example(R"(--fault ([a-z_]+=[^ `'"|\n]+))");
  int found = 0;
  for (const char* file : {"README.md", "docs/cli.md", "docs/fault-plan.md", "docs/suite-format.md", "docs/policies.md", "docs/sweep.md"}) {
    std::ifstream in(root + "/" + file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), example), end; it != end; ++it) {
      std::string spec = (*it)[1].str();
      while (!spec.empty() && (spec.back() == '.' || spec.back() == ',' || spec.back() == ';' || spec.back() == ')')) spec.pop_back();
      Outcome o = through_fault_text(spec);
      EXPECT_TRUE(o.accepted) << file << ": --fault " << spec << ": " << o.error;
      if (o.accepted) {
        EXPECT_TRUE(through_shim(o.rule).accepted) << spec;
      }
      ++found;
    }
  }
  EXPECT_GE(found, 5) << "the documented examples were not found";
}

}  // namespace
}  // namespace oomh

namespace oomh {
namespace {

// Found by fuzz_suite (tests/fuzz/corpus/suite/fault-rule-invalid-utf8.yaml): invalid UTF-8 in a rule's
// value made the translation's JSON dump throw, and the loader died. It is an ordinary suite error now.
TEST(RuleSchema, InvalidUtf8InAValueIsASuiteErrorNotACrash) {
  auto load = load_suite_text("version: 1\njobs:\n  - name: j\n    run: 'true'\n    faults: [{when: {after: \"1\xCF\"}}]\n",
                                   "s.yaml", "/tmp");
  EXPECT_FALSE(load.ok());
  ASSERT_FALSE(load.error().empty());
  EXPECT_NE(load.error()[0].str().find("s.yaml:5:"), std::string::npos) << load.error()[0].str();
}

}  // namespace
}  // namespace oomh
