#pragma once
// A child process with a time limit, for asking the machine about itself (nvidia-smi, nvcc, python3):
// a hung nvidia-smi must never hang a run.

#include <string>
#include <vector>

namespace oomh {

struct CommandOutput {
  int exit_code = -1;   // -1: could not start, or killed at the time limit
  bool timed_out = false;
  std::string out;      // stdout (stderr is discarded)
};
// Runs argv[0] (looked up in PATH) with a time limit; kills it (SIGKILL) when the limit passes.
CommandOutput run_command(const std::vector<std::string>& argv, double timeout_seconds);

}  // namespace oomh
