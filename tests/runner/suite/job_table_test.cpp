// The job table (Note [One table of job fields] in runner/src/suite/job_table.h): each row carries its
// field through merge and build_job, and the keys a suite may use are the table's. A member added to
// JobFields or JobSpec without a row stops the build in job_table.cpp (its static_asserts).

#include <set>
#include <string>

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
  static_assert(field_count<JobFields>() == 18, "a JobFields member was added: give it a value here too");
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

TEST(JobTable, FlagsHaveHelp) {
  EXPECT_EQ(job_flag_help("--cap"), "Make every GPU look this big to the job: 8GiB, 512MiB");
  EXPECT_THROW(job_flag_help("--nope"), std::logic_error);
}

}  // namespace
}  // namespace oomh::suite
