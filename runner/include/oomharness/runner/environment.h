#pragma once
// Where a run happened: host, GPU, driver, CUDA, frameworks, harness version, command line. Every probe
// of the machine is a child process with a time limit, so that a hung nvidia-smi never hangs a run.

#include <optional>
#include <string>
#include <vector>

#include "oomharness/reports/result.h"
#include "oomharness/runner/command.h"

namespace oomh {

// The first GPU as nvidia-smi sees it (the caller surveys the machine once: exec::survey_gpus).
struct GpuIdentity {
  std::string name;
  std::string driver_version;
  std::string cuda_version;
};

// "13.0" from `nvcc --version` ("Cuda compilation tools, release 13.0, V13.0.88").
std::optional<std::string> parse_nvcc_version(const std::string& text);

struct EnvironmentOptions {
  bool simulated = false;         // the jobs run on the CPU driver double
  bool detect_torch = false;      // some job runs Python: ask for torch.__version__ (10 s limit)
  std::vector<std::string> command_line;
  std::optional<GpuIdentity> gpu; // what the survey found (nullopt: no GPU)
};
Environment detect_environment(const EnvironmentOptions& options);
// The device the jobs run on, in the results' words: the GPU's name, "simulated (CPU driver double)", or ""
// when there is no GPU. Asks nothing: the run's header shows it before the detection is done.
std::string device_name(const EnvironmentOptions& options);

}  // namespace oomh
