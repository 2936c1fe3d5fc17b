// exec's job flags are the job table's (Note [One table of job fields] in runner/src/suite/job_table.h):
// job_from_exec_args reads each flag given by its row, and --fault and --expect by the spec parsers.

#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>

#include "app/commands.h"
#include "suite/job_table.h"

namespace oomh::app {
namespace {

ExecArgs with_command() {
  ExecArgs a;
  a.command = {"python3", "train.py"};
  return a;
}

TEST(ExecArgs, EveryFlagOfTheTableIsRead) {
  ExecArgs a = with_command();
  a.job_flags = {{"--name", {"n"}},           {"--env", {"A=1"}},          {"--timeout", {"30s"}},
                 {"--device", {"virtual"}},   {"--cap", {"1GiB"}},         {"--cap-counts", {"footprint"}},
                 {"--fault", {"step=3", "step=3"}}, {"--restart", {"2"}},  {"--restart-on", {"signal"}},
                 {"--clear-faults", {"true"}}, {"--expect", {"exit=0"}},   {"--target-step", {"9"}},
                 {"--step-base", {"0"}}};
  size_t flags = 0;
  for (const suite::JobKey& k : suite::job_keys())
    for (const suite::JobFlag& f : k.flags) flags += !f.name.empty();
  ASSERT_EQ(a.job_flags.size(), flags) << "a flag was added to the job table: give it a value here";
  std::ostringstream err;
  std::optional<JobSpec> job = job_from_exec_args(a, "exec", err);
  ASSERT_TRUE(job) << err.str();
  EXPECT_EQ(job->name, "n");
  EXPECT_EQ(job->env.at("A"), "1");
  EXPECT_EQ(job->timeout, 30);
  EXPECT_EQ(job->device, DeviceChoice::virtual_device);
  EXPECT_EQ(job->memory.limit, uint64_t{1} << 30);
  EXPECT_TRUE(job->memory.counts_footprint);
  ASSERT_EQ(job->faults.size(), 2u);
  EXPECT_EQ(job->faults[1].name, "step=3 #2");  // two identical specs, told apart
  EXPECT_EQ(job->restart.max, 2);
  EXPECT_EQ(job->restart.on, std::vector<std::string>{"signal"});  // replaces the default, as in a suite
  EXPECT_TRUE(job->restart.clear_faults);
  ASSERT_EQ(job->expect.size(), 1u);
  EXPECT_EQ(job->expect[0].policy, "exit");
  EXPECT_EQ(job->target_step, 9);
  EXPECT_EQ(job->step_base, 0);
}

TEST(ExecArgs, DefaultsAndEmptyValues) {
  ExecArgs a = with_command();
  a.job_flags = {{"--cap", {""}}, {"--name", {""}}};  // an empty value is no value
  std::ostringstream err;
  std::optional<JobSpec> job = job_from_exec_args(a, "exec", err);
  ASSERT_TRUE(job) << err.str();
  EXPECT_EQ(job->name, "python3");
  EXPECT_FALSE(job->memory.limit);
  EXPECT_EQ(job->restart.on, std::vector<std::string>{"oom"});
}

TEST(ExecArgs, AProblemIsSaidAfterTheCommand) {
  ExecArgs a = with_command();
  a.job_flags = {{"--restart-on", {"oom,sgnal"}}};
  std::ostringstream err;
  EXPECT_FALSE(job_from_exec_args(a, "budget", err));
  EXPECT_EQ(err.str(), "oomharness budget: bad --restart-on 'oom,sgnal': 'sgnal' is not one of oom, nonzero, signal, any "
                       "(did you mean 'signal'?)\n");
  a.job_flags = {{"--fault", {"stpe=5"}}};
  err.str("");
  EXPECT_FALSE(job_from_exec_args(a, "exec", err));
  EXPECT_EQ(err.str(), "oomharness exec: bad --fault 'stpe=5': unknown key 'stpe' (did you mean 'step'?)\n");
}

// Issue 44: steps count from 1 (Note [Step numbering]): `--fault step=0` was accepted and could never fire.
TEST(ExecArgs, AFaultBeforeTheFirstStepIsRefused) {
  ExecArgs a = with_command();
  a.job_flags = {{"--fault", {"step=0"}}};
  std::ostringstream err;
  EXPECT_FALSE(job_from_exec_args(a, "exec", err));
  EXPECT_EQ(err.str(), "oomharness exec: bad --fault 'step=0': step 0 comes before the first training step: steps count "
                       "from 1 (a job whose own log counts from 0 says step_base: 0, --step-base 0), so the rule could never fire\n");
  a.job_flags = {{"--fault", {"steps=..0"}}};
  err.str("");
  EXPECT_FALSE(job_from_exec_args(a, "exec", err));
  a.job_flags = {{"--fault", {"step=0"}}, {"--step-base", {"0"}}};
  err.str("");
  EXPECT_TRUE(job_from_exec_args(a, "exec", err)) << err.str();
  // A number out of range is quoted as typed (CLI11 saturated it to 9223372036854775807 before).
  a.job_flags = {{"--restart", {"99999999999999999999"}}};
  err.str("");
  EXPECT_FALSE(job_from_exec_args(a, "exec", err));
  EXPECT_EQ(err.str(), "oomharness exec: bad --restart 99999999999999999999: from 0 to 1000\n");
}

// An environment variable's name as a suite's `env:` takes it (is_variable_name in suite/items.h).
TEST(ExecArgs, EnvNamesAreChecked) {
  ExecArgs a = with_command();
  a.job_flags = {{"--env", {"MODE fast=1"}}};
  std::ostringstream err;
  EXPECT_FALSE(job_from_exec_args(a, "exec", err));
  EXPECT_EQ(err.str(), "oomharness exec: bad --env 'MODE fast=1': 'MODE fast' is not a valid environment variable name\n");
  a.job_flags = {{"--env", {"MODE=fast=1"}}};  // the first '=' ends the name: MODE='fast=1'
  err.str("");
  std::optional<JobSpec> job = job_from_exec_args(a, "exec", err);
  ASSERT_TRUE(job) << err.str();
  EXPECT_EQ(job->env.at("MODE"), "fast=1");
}

TEST(ExecArgs, AFlagTheTableLacksIsAProgrammingError) {
  ExecArgs a = with_command();
  a.job_flags = {{"--nope", {"1"}}};
  std::ostringstream err;
  EXPECT_THROW(job_from_exec_args(a, "exec", err), std::logic_error);
}

}  // namespace
}  // namespace oomh::app
