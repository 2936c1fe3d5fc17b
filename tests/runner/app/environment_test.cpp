// Environment detection: version parsing and the time-bounded child process it relies on.

#include <gtest/gtest.h>

#include <chrono>

#include "oomharness/runner/environment.h"
#include "oomharness/version.h"

namespace oomh {
namespace {

TEST(Environment, ParsesNvccVersions) {
  EXPECT_EQ(parse_nvcc_version("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"), "13.0");
  EXPECT_FALSE(parse_nvcc_version("no version here"));
}

TEST(Environment, RunCommandCapturesStdout) {
  CommandOutput r = run_command({"sh", "-c", "echo hello; echo err >&2; exit 3"}, 10);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "hello\n");
  EXPECT_FALSE(r.timed_out);
}

TEST(Environment, RunCommandStopsAtItsTimeLimit) {
  auto t0 = std::chrono::steady_clock::now();
  CommandOutput r = run_command({"sleep", "30"}, 0.3);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_LT(took, 5.0);
}

TEST(Environment, MissingProgram) {
  CommandOutput r = run_command({"oomh-no-such-program-anywhere"}, 5);
  EXPECT_NE(r.exit_code, 0);
}

// The GPU comes from the caller's survey: detecting the environment asks nvidia-smi nothing.
TEST(Environment, NamesTheSurveyedGpu) {
  EnvironmentOptions o;
  o.gpu = GpuIdentity{"NVIDIA H100 80GB HBM3", "580.159.04", "13.0"};
  Environment env = detect_environment(o);
  EXPECT_EQ(env.gpu_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(env.driver_version, "580.159.04");
  EXPECT_EQ(env.cuda_version, "13.0");
  EXPECT_FALSE(env.simulated_device);
}

TEST(Environment, SimulatedDeviceAndHarnessFields) {
  Environment env = detect_environment({true, false, {"oomharness", "run", "x.yaml"}, std::nullopt});
  EXPECT_TRUE(env.simulated_device);
  EXPECT_EQ(env.gpu_name, "simulated (CPU driver double)");
  EXPECT_EQ(env.harness_version, kVersion);
  EXPECT_FALSE(env.hostname.empty());
  EXPECT_EQ(env.command_line, (std::vector<std::string>{"oomharness", "run", "x.yaml"}));
  EXPECT_TRUE(env.frameworks.empty());
}

}  // namespace
}  // namespace oomh
