#pragma once
// Where a run's jobs run: here (the local job runner) or on a Slurm cluster.
//
// Note [Backends]
// `oomharness run` hands its flat list of expanded jobs to one Backend and gets one JobOutcome per job
// back; judging and reporting do not know which backend ran them. The local backend is the JobRunner
// (job_runner.h). The Slurm backend submits one Slurm job per suite job (`sbatch --parsable`); the batch
// script runs `oomharness agent PLAN`, which runs that ONE job with the local backend on the node (the shim,
// the control block, the probe, timeouts, restarts and faults are all local to the node) and writes its
// JobOutcome to the run's output folder, which the nodes must share (Note [Agent plan and results] in
// agent_plan.h). The submitting side polls every job with one `squeue` call per interval, reads each
// job's outcome when Slurm says it ended, and falls back to `scontrol show job` to say what Slurm did
// with a job whose agent wrote nothing: such a job is an error, never a pass. docs/slurm.md is the user's
// side of this.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/runner/job_runner.h"

namespace oomh {

class Backend {
 public:
  virtual ~Backend() = default;
  // What stops the run before any job starts (Slurm's commands missing, an output folder the nodes do not
  // share), as a sentence for the user; nullopt when the backend can run.
  virtual std::optional<std::string> check() = 0;
  // One outcome per job, in order. Returns early, the unfinished jobs marked interrupted, after interrupt().
  virtual std::vector<JobOutcome> run(const std::vector<JobSpec>& jobs) = 0;
  // Async-signal-safe: a SIGINT handler calls it.
  virtual void interrupt() noexcept = 0;
  virtual bool interrupted() const noexcept = 0;
  // Starts no further job (`--maxfail`); the jobs not started come back with `not_started`. Call it from
  // on_job_done. The Slurm backend submits every job at once, so there it does nothing (docs/slurm.md).
  virtual void stop_starting() {}
};

enum class BackendKind { local, slurm };
// "local", "slurm"; nullopt for anything else.
std::optional<BackendKind> backend_from_name(const std::string& name);

// `--slurm-*` (docs/slurm.md).
struct SlurmOptions {
  std::string partition;                 // empty: the cluster's default partition
  std::vector<std::string> sbatch_args;  // passed to sbatch (and to the shared-folder check's srun) as they are
  // GPUs per job: `auto` (gpu:1 for jobs on a GPU, none under --simulate or on the virtual device), `none`,
  // `gpu` (gpu:1 for every job), `shard` (shard:1 for capped jobs, which may share a card; gpu:1 for others).
  std::string gres = "auto";
  int cpus = 1;                          // --cpus-per-task
  std::string mem;                       // --mem per job, Slurm's syntax (4G); empty: the partition's default
  double poll_interval = 1.0;            // seconds between squeue calls
  bool simulate = false;                 // the run is simulated (no GPU needed)
  std::string agent_program;             // the oomharness nodes run; empty: this executable
  std::string work_dir;                  // plans, batch scripts, agents' results: <out>/slurm
};

std::unique_ptr<Backend> make_local_backend(RunOptions options);
std::unique_ptr<Backend> make_slurm_backend(RunOptions options, SlurmOptions slurm);

}  // namespace oomh
