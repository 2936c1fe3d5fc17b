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

// Whether `pid` is a run_command child still running or not yet reaped. The job runner is a child subreaper
// that kills and reaps children that are not its jobs (Note [Nothing left behind]); these are the runner's
// own (the environment's detection runs beside the jobs), and must be left to run_command's waitpid.
bool is_command_child(int pid);

}  // namespace oomh
