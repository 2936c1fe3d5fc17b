#pragma once
// Where a run happened: host, GPU, driver, CUDA, frameworks, harness version, command line. Every probe
// of the machine is a child process with a time limit, so that a hung nvidia-smi never hangs a run.

#include <optional>
#include <string>
#include <vector>

#include "oomharness/reports/result.h"

namespace oomh {

struct CommandOutput {
  int exit_code = -1;   // -1: could not start, or killed at the time limit
  bool timed_out = false;
  std::string out;      // stdout (stderr is discarded)
};
// Runs argv[0] (looked up in PATH) with a time limit; kills it (SIGKILL) when the limit passes.
CommandOutput run_command(const std::vector<std::string>& argv, double timeout_seconds);

struct GpuIdentity {
  std::string name;
  std::string driver_version;
  std::string cuda_version;
};
// The first GPU as nvidia-smi sees it; nullopt when there is no nvidia-smi or no GPU.
std::optional<GpuIdentity> detect_gpu(double timeout_seconds = 10);

// "13.0" from `nvcc --version` ("Cuda compilation tools, release 13.0, V13.0.88").
std::optional<std::string> parse_nvcc_version(const std::string& text);
// "13.0" from nvidia-smi's banner ("| ... CUDA Version: 13.0 |").
std::optional<std::string> parse_smi_cuda_version(const std::string& text);

struct EnvironmentOptions {
  bool simulated = false;         // the jobs run on the CPU driver double
  bool detect_torch = false;      // some job runs Python: ask for torch.__version__ (10 s limit)
  std::vector<std::string> command_line;
};
Environment detect_environment(const EnvironmentOptions& options);

}  // namespace oomh
