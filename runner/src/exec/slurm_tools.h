#pragma once
// Slurm's command-line tools as the Slurm backend uses them (Note [Backends] in backend.h): the plain CLI
// (`sbatch --parsable`, `squeue -h -t all -j IDS -o '%i|%T|%r'`, `scontrol show job -o`, `scancel`), stable
// for years, rather than libslurm (its ABI follows each release) or the JSON outputs (they change
// between versions and do not exist before 23.02). docs/design/slurm.md has the measurements.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace oomh::exec {

struct ToolResult {
  int exit_code = -1;      // -1: could not start, or killed at the time limit
  bool timed_out = false;
  std::string out, err;
  std::string start_error; // why it could not start
  bool ok() const { return exit_code == 0; }
  // "sbatch: error: ..." or the start error, for messages; empty when there is nothing to say.
  std::string why() const;
};

// The submitting side's environment for Slurm's tools, without LD_PRELOAD: with `--export=ALL` a job
// gets sbatch's environment, and a preloaded library would be loaded into sbatch and srun themselves.
std::vector<std::string> tool_environment();

// Runs argv (argv[0] looked up on PATH) in its own process group (a Ctrl-C meant for the run must not
// kill an sbatch halfway), stdout and stderr kept, killed at the time limit.
ToolResult run_tool(const std::vector<std::string>& argv, const std::vector<std::string>& env, double timeout_seconds);

struct QueueEntry {
  std::string state;   // RUNNING, PENDING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...
  std::string reason;
};
// squeue -o '%i|%T|%r' lines, by job id.
std::map<std::string, QueueEntry> parse_squeue(const std::string& text);

// Whether a job in this state has ended (it will never run again).
bool slurm_state_ended(const std::string& state);

// `scontrol show job -o` fields (JobState, Reason, ExitCode, NodeList, ...).
std::map<std::string, std::string> parse_scontrol_job(const std::string& text);

// What Slurm's state means, in words: "Slurm cancelled it (CANCELLED)", "the node failed (NODE_FAIL)".
std::string slurm_state_text(const std::string& state);

// A value for a shell script, in single quotes.
std::string shell_quote(const std::string& s);

}  // namespace oomh::exec
