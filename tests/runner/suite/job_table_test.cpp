// The job table (Note [One table of job fields] in runner/src/suite/job_table.h): each row carries its
// field through merge and build_job, and the keys a suite may use are the table's. A member added to
// JobFields or JobSpec without a row stops the build in job_table.cpp (its static_asserts).

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "oomharness/runner/model.h"
#include "oomharness/runner/suite.h"
#include "suite/job_fields.h"
#include "suite/job_table.h"

namespace oomh::suite {
namespace {

// Every field given, each with a value that is not its default.
JobFields full_fields() {
  static_assert(field_count<JobFields>() == 20, "a JobFields member was added: give it a value here too");
  JobFields f;
  f.name = "full";
  f.argv = std::vector<std::string>{"python3", "train.py"};
  f.shell = true;
  f.cwd = "/tmp";
  f.env = {{"A", "1"}};
  f.timeout = 90;
  f.grace = 3;
  f.probe = ProbeMode::python;
  f.device = DeviceChoice::virtual_device;
  f.observe = {ObserveSpec{"loss", "loss=([0-9.]+)", {}}};
  f.memory.limit = 1 << 20;
  f.faults = std::vector<FaultSpec>{FaultSpec{"f", nlohmann::json{{"when", {{"step", 3}}}}, {}}};
  f.restart.max = 2;
  f.expect = std::vector<ExpectSpec>{ExpectSpec{"completes", nlohmann::json::object(), {}, false}};
  f.target_step = 12;
  f.step_base = 0;
  f.ranks = 2;
  f.nodes = 2;
  f.ranks_per_node = 3;
  f.sweep = SweepSpec{"3", {}, std::nullopt};
  return f;
}

nlohmann::json as_json(const JobSpec& job) { return job; }

TEST(JobTable, EachRowCarriesItsFieldThroughMergeAndBuild) {
  const JobFields full = full_fields();
  const nlohmann::json plain = as_json(build_job(JobFields{}));
  std::set<std::string> members_changed;
  for (const JobKey& row : job_keys()) {
    JobFields one;
    row.merge(one, full);
    const nlohmann::json built = as_json(build_job(one));
    std::vector<std::string> changed;
    for (auto it = built.begin(); it != built.end(); ++it)
      if (it.value() != plain[it.key()]) changed.push_back(it.key());
    EXPECT_EQ(changed.size(), 1u) << "row '" << row.key << "' changed " << built.dump();
    members_changed.insert(changed.begin(), changed.end());
  }
  // Each row its own member of JobSpec (run's is argv).
  EXPECT_EQ(members_changed.size(), job_keys().size());
  EXPECT_TRUE(members_changed.count("argv"));
}

TEST(JobTable, MergeKeepsTheBaseWhereTheOverlayIsSilent) {
  const JobFields full = full_fields();
  EXPECT_EQ(as_json(build_job(merge(full, JobFields{}))), as_json(build_job(full)));
  EXPECT_EQ(as_json(build_job(merge(JobFields{}, full))), as_json(build_job(full)));
}

TEST(JobTable, KeysAreUniqueAndOnlyNameAndRunAreEachJobsOwn) {
  std::set<std::string> keys, own;
  for (const JobKey& row : job_keys()) {
    EXPECT_TRUE(keys.insert(std::string(row.key)).second) << row.key;
    EXPECT_FALSE(row.help.empty()) << row.key;
    EXPECT_NE(row.read, nullptr) << row.key;
    if (!row.in_defaults) own.insert(std::string(row.key));
  }
  EXPECT_EQ(own, (std::set<std::string>{"name", "run"}));
}

TEST(JobTable, ASuiteAcceptsEveryKeyAndSuggestsFromTheTable) {
  auto bad = load_suite_text("version: 1\njobs:\n  - name: a\n    run: x\n    target_stpe: 3\n", "s.yaml", "/s");
  ASSERT_EQ(bad.error().size(), 1u);
  EXPECT_NE(bad.error()[0].message.find("did you mean 'target_step'?"), std::string::npos) << bad.error()[0].str();
  EXPECT_NE(find_job_key("sweep"), nullptr);
  EXPECT_EQ(find_job_key("tiemout"), nullptr);
}

// A value for each flag that has a reader, not the default. A flag added to the table without one here
// fails FlagsSetTheirRowsField.
const std::map<std::string_view, std::vector<std::string>> kFlagSamples = {
    {"--name", {"n"}},         {"--env", {"A=1", "B=2"}},     {"--timeout", {"30s"}},     {"--device", {"virtual"}},
    {"--cap", {"1GiB"}},       {"--cap-counts", {"footprint"}}, {"--restart", {"2"}},     {"--restart-on", {"oom, signal"}},
    {"--clear-faults", {"true"}}, {"--target-step", {"5"}},     {"--step-base", {"0"}},
};

bool read_by_the_app(std::string_view flag) {
  return std::find(std::begin(kFlagsReadByTheApp), std::end(kFlagsReadByTheApp), flag) != std::end(kFlagsReadByTheApp);
}

// Note [One table of job fields]: a row gives `exec` its flag, or says why it has none; a row that has
// neither was added without deciding, and fails here.
TEST(JobTable, EveryRowHasAnExecFlagOrSaysWhyNot) {
  std::set<std::string> flags;
  for (const JobKey& row : job_keys()) {
    size_t n = 0;
    for (const JobFlag& f : row.flags) {
      if (f.name.empty()) continue;
      ++n;
      EXPECT_TRUE(flags.insert(std::string(f.name)).second) << f.name << " twice";
      EXPECT_EQ(f.name.rfind("--", 0), 0u) << f.name;
      EXPECT_FALSE(f.help.empty()) << f.name;
      // Each flag has a reader, or is one of the two the app layer parses (kFlagsReadByTheApp).
      EXPECT_NE(f.read != nullptr, read_by_the_app(f.name)) << f.name << ": a reader, or a name in kFlagsReadByTheApp";
    }
    EXPECT_NE(n > 0, !row.no_flag.empty()) << "row '" << row.key << "': give it an exec flag, or say in no_flag why it has none";
  }
  for (std::string_view f : kFlagsReadByTheApp) EXPECT_NE(find_job_flag(f), nullptr) << f;
  EXPECT_EQ(find_job_flag("--nope"), nullptr);
  EXPECT_EQ(find_job_flag("--cap")->help, "Make every GPU look this big to the job: 8GiB, 512MiB");
}

// Each reader sets its own row's field: the job built from it differs from the plain one in that member
// alone (the member JobSpec's JSON names it by).
TEST(JobTable, FlagsSetTheirRowsField) {
  const nlohmann::json plain = as_json(build_job(JobFields{}));
  const std::map<std::string_view, std::string> member = {{"name", "name"}, {"env", "env"},       {"timeout", "timeout"},
                                                          {"device", "device"}, {"memory", "memory"}, {"restart", "restart"},
                                                          {"target_step", "target_step"}, {"step_base", "step_base"}};
  for (const JobKey& row : job_keys())
    for (const JobFlag& f : row.flags) {
      if (f.name.empty() || !f.read) continue;
      auto sample = kFlagSamples.find(f.name);
      ASSERT_NE(sample, kFlagSamples.end()) << f.name << ": give it a sample value in kFlagSamples";
      JobFields fields;
      std::optional<std::string> problem = f.read(fields, sample->second);
      ASSERT_FALSE(problem) << f.name << ": " << *problem;
      const nlohmann::json built = as_json(build_job(fields));
      std::vector<std::string> changed;
      for (auto it = built.begin(); it != built.end(); ++it)
        if (it.value() != plain[it.key()]) changed.push_back(it.key());
      ASSERT_EQ(changed.size(), 1u) << f.name << " changed " << built.dump();
      ASSERT_TRUE(member.count(row.key)) << row.key;
      EXPECT_EQ(changed[0], member.at(row.key)) << f.name;
    }
}

TEST(JobTable, FlagReadersSayWhatIsWrong) {
  auto problem = [](std::string_view flag, std::vector<std::string> values) {
    JobFields fields;
    std::optional<std::string> p = find_job_flag(flag)->read(fields, values);
    return p.value_or("");
  };
  EXPECT_EQ(problem("--restart-on", {"oom,sgnal"}),
            "bad --restart-on 'oom,sgnal': 'sgnal' is not one of oom, nonzero, signal, any (did you mean 'signal'?)");
  EXPECT_EQ(problem("--restart-on", {"zzz"}), "bad --restart-on 'zzz': 'zzz' is not one of oom, nonzero, signal, any");
  EXPECT_EQ(problem("--restart", {"1001"}), "bad --restart 1001: from 0 to 1000");
  EXPECT_EQ(problem("--step-base", {"2"}), "bad --step-base 2: 0 or 1");
  EXPECT_EQ(problem("--device", {"cpu"}), "bad --device 'cpu': auto, gpu or virtual");
  EXPECT_EQ(problem("--cap-counts", {"all"}), "bad --cap-counts 'all': allocations or footprint");
  EXPECT_EQ(problem("--env", {"A=1", "=2"}), "bad --env '=2': write NAME=VALUE");
  JobFields fields;
  ASSERT_FALSE(find_job_flag("--restart-on")->read(fields, {" nonzero ,signal"}));
  EXPECT_EQ(fields.restart.on, (std::vector<std::string>{"nonzero", "signal"}));
}

}  // namespace
}  // namespace oomh::suite
