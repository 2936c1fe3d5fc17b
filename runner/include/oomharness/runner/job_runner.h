#pragma once
// The job runner: runs expanded jobs (suite.h) as real processes under the shim and turns each into a
// Trace (policies/trace.h). It owns launching, timeouts, restarts, the reservation sidecar, packing jobs
// onto GPUs, observation (event logs, stdout/stderr regexes, control-block sampling) and interruption.
// It does not evaluate policies or write reports: the app (app.h) does that with what it returns.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/policies/trace.h"
#include "oomharness/runner/suite.h"

namespace oomh {

// Where the runner finds what it injects into jobs.
struct HarnessPaths {
  std::string inject_library;   // liboomharness_inject.so
  std::string python_probe_dir; // directory to put on PYTHONPATH (holds sitecustomize.py and oomharness/)
  std::string reserve_program;  // the reservation sidecar (oomh-reserve)
  // Prepended to LD_LIBRARY_PATH of every job (the CPU driver double's directory in tests and in the
  // simulated demo); empty on a real GPU machine.
  std::string driver_library_dir;
  // The CPU driver double's directory for jobs on the virtual CUDA device (whose allocator model asks the
  // double for its segments, through the shim), whether or not the run is simulated; empty when none needs it.
  std::string virtual_driver_dir;
};

// What a live view shows for one running job (sampled every 50 ms).
struct JobProgress {
  std::string job;
  // The running attempt's index (from 0); outside an attempt (waiting, restarting, done) the number of
  // attempts so far. The reference run is not an attempt: while it runs, `reference` is set and
  // `attempt` counts the attempts, which have all ended.
  int attempt = 0;
  bool reference = false;
  int64_t step = -1;       // the running attempt's current step (the control block's, sampled)
  // The last step the latest ended attempt completed (Attempt::last_completed_step, as results.json's
  // last_step), -1 when none has ended or it completed none.
  int64_t last_step = -1;
  uint64_t held = 0;       // bytes, summed over devices
  uint64_t cap = 0;        // bytes, 0: none
  uint64_t faults = 0;     // failures injected so far (rules + cap)
  double elapsed = 0;      // seconds since the job started
  std::optional<int> gpu;
  enum class State { waiting, running, restarting, done } state = State::waiting;
};

// One GPU as the runner sees it when packing jobs (bytes). From the caller's survey of the machine
// (exec::survey_gpus, nvidia-smi), or given by tests.
struct GpuInfo {
  int index = 0;
  uint64_t total = 0;  // bytes
  uint64_t used = 0;   // bytes already in use by others when the run starts
};

// OMP_NUM_THREADS for each job (`oomharness run --threads-per-job`; Note [CPU share of packed jobs] in
// src/exec/cpu_share.h): `automatic` gives each job its share of the cores when more than one job runs at
// once, `off` never sets it, `fixed` sets `threads`.
struct ThreadsPerJob {
  enum class Mode { automatic, off, fixed } mode = Mode::automatic;
  int threads = 0;
};

struct JobOutcome;

namespace exec {
class NodeGroup;
}

struct RunOptions {
  int jobs = 1;                          // how many jobs run at once
  std::vector<int> gpus;                 // GPUs to use; empty: detect (none found: run without assigning one)
  std::string out_dir;                   // per job/attempt: output logs, event logs, work dirs
  double sample_interval = 0.05;         // control block sampling, seconds
  uint64_t gpu_margin = 1ull << 30;      // kept free on a GPU when packing capped jobs
  ThreadsPerJob threads_per_job;         // CPU threads each job may start when jobs run at once
  int cpus = 0;                          // CPUs to share among jobs; 0: those this process may run on
  HarnessPaths paths;
  // Bytes of output kept per attempt log (Note [Bounded job logs]); 0: no cap.
  uint64_t log_cap = 64ull << 20;
  // The GPUs to pack jobs onto (the app's survey, or a test's fake inventory; an empty vector means "no
  // GPU"); unset: the runner surveys the machine itself. `gpus`, when not empty, selects which to use.
  std::optional<std::vector<GpuInfo>> gpu_inventory;
  std::function<void(const JobProgress&)> on_progress;   // called from the runner's thread
  // Called as each job finishes (from the runner's thread, its outcome final), and for each job that
  // stop_starting() kept from starting. The callback may take what it needs out of the outcome (its trace,
  // which can be large): run() returns what is left. Note [Constant cost per job].
  std::function<void(size_t job_index, JobOutcome& outcome)> on_job_done;
  // A Slurm node agent's: this node's share of a job's ranks, and the other nodes (Note [Ranks on several
  // nodes] in runner/src/exec/node_group.h). Unset: every rank runs here.
  std::shared_ptr<exec::NodeGroup> node_group;
};

struct JobOutcome {
  Trace trace;                   // every attempt (and the reference run, when a policy needs one)
  std::optional<int> gpu;        // the GPU it ran on (a job with ranks: rank 0's)
  std::vector<int> gpus;         // a job with ranks on GPUs: each rank's, in rank order (Note [One GPU per rank])
  bool interrupted = false;      // stopped because the run was interrupted
  bool not_started = false;      // never started: stop_starting() was called before its turn
  std::string error;             // the job could not be run at all (bad command, sidecar failed, ...)
  double start = 0, end = 0;     // wall-clock seconds
  std::vector<std::string> argv; // the first attempt's command, templated
  std::string work_dir;          // the job's {workdir}
};

class JobRunner {
 public:
  explicit JobRunner(RunOptions options);
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Runs `jobs` (at most options.jobs at a time, packed onto GPUs) and returns one outcome per job, in
  // the same order. Results do not depend on options.jobs. Returns early, with the unfinished jobs
  // marked interrupted, after interrupt().
  std::vector<JobOutcome> run(const std::vector<JobSpec>& jobs);

  // Stops every running job (SIGTERM to its process group, SIGKILL after its grace period) and starts no
  // new one. Async-signal-safe: a SIGINT handler may call it.
  void interrupt() noexcept;
  bool interrupted() const noexcept;

  // Starts no new job; the running ones run to their end. The jobs not started yet come back with
  // `not_started` set (`oomharness run --maxfail`). Call it from on_job_done (the runner's thread).
  void stop_starting();

 private:
  struct Impl;
  Impl* impl_;
};

// A job name as a directory name (OUT/NAME, OUT/sweeps/SUITE/JOB): readable, and distinct for distinct
// names (Note [One job, one folder] in runner/src/suite/limits.h).
std::string job_dir_name(const std::string& job);

}  // namespace oomh
