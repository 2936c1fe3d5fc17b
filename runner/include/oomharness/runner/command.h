#pragma once
// A child process with a time limit, for asking the machine about itself (nvidia-smi, nvcc, python3):
// a hung nvidia-smi must never hang a run.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace oomh {

// Note [One way to spawn a helper]
// Every short-lived child the runner starts for itself (nvidia-smi, nvcc, python3 for detection; sbatch,
// squeue, scontrol, scancel for the Slurm backend) is started by spawn_and_wait, so that each is known to
// the subreaper guard (is_command_child) from before it exists until it is reaped: the job runner, a child
// subreaper, kills and reaps any other child it finds (Note [Nothing left behind] in job_runner_reaping.cpp), and a
// helper it took for a stray would come back as "killed" to its caller. Jobs themselves are not helpers:
// the job runner starts them (launch.cpp) and knows them by its own table.
struct SpawnOptions {
  std::optional<std::vector<std::string>> env;  // NAME=VALUE; unset: this process's environment
  bool own_process_group = false;  // a Ctrl-C meant for the run must not reach it (and signals reset)
  bool keep_stderr = false;        // else stderr goes to /dev/null
  size_t max_output = static_cast<size_t>(-1);  // bytes of stdout (and of stderr) kept; the rest is read and dropped
};
struct SpawnResult {
  std::string start_error;         // why it could not start; empty when it started
  bool timed_out = false;          // killed (SIGKILL) at the time limit
  std::optional<int> exit_code;    // it exited by itself
  std::optional<int> signal;       // it was killed by a signal (SIGKILL at the time limit included)
  std::string out, err;
};
// Runs argv (argv[0] looked up on PATH, stdin /dev/null) and waits for it, at most `timeout_seconds`.
SpawnResult spawn_and_wait(const std::vector<std::string>& argv, double timeout_seconds, const SpawnOptions& options = {});

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
