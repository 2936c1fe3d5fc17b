#pragma once
// How an attempt's process is launched: its argv, its environment, and the Boost.Process initializer that
// puts it in its own process group, in its working directory, with clean signal state.

#include <string>
#include <sys/types.h>
#include <vector>

#include "exec/boost_process.h"

#include <nlohmann/json.hpp>

#include "oomharness/runner/job_runner.h"

namespace oomh::exec {

// What the runner knows about one attempt when it builds the environment.
struct AttemptContext {
  std::string job;            // the job's name (OOMH_JOB)
  int attempt = 0;            // OOMH_ATTEMPT
  std::string control_name;   // OOMH_CONTROL: "/oomh-<runner pid>-<job index>-<attempt>"
  std::string events_path;    // OOMH_EVENTS
  std::string plan_json;      // OOMH_PLAN (the JSON text)
  std::vector<int64_t> flush_steps;  // OOMH_FLUSH_AT_STEPS (JobSpec::flush_steps of the same plan)
  std::string workdir;        // {workdir}
  std::vector<int> gpus;      // CUDA_VISIBLE_DEVICES: the job's GPU, or each rank's in rank order
  std::optional<int> threads; // OMP_NUM_THREADS, unless the job's env or the runner's already sets it
  // A job with ranks > 1 (Note [Ranks] in trace.h): this process's rank; RANK, LOCAL_RANK, WORLD_SIZE,
  // MASTER_ADDR (127.0.0.1) and MASTER_PORT, as torchrun sets them, and OOMH_STACKS, the file the probe
  // has faulthandler write every thread's stack to when the runner sends SIGUSR1 (a hang).
  std::optional<int> rank;
  int world_size = 1;
  // Ranks on several nodes (Note [Ranks on several nodes] in node_group.h): this rank's index on its node
  // (LOCAL_RANK), the node's ranks (LOCAL_WORLD_SIZE), its node (GROUP_RANK) and rank 0's node's address.
  // Unset: the rank itself, world_size, 0 and 127.0.0.1.
  std::optional<int> local_rank;
  int local_world_size = 0;
  int node = 0;
  std::string master_addr;
  int master_port = 0;
  std::string stacks_path;
  // Note [One torchrun per node] in node_group.h: this process is node `torchrun_node`'s torchrun, of
  // `nodes`; it gets MASTER_ADDR, MASTER_PORT and one Slurm task per node's variables, and no rank.
  std::optional<int> torchrun_node;
  int nodes = 1;
  std::string saved_steps;    // OOMH_SAVED_STEPS: saved_steps() of the earlier attempts
};

// Note [A resume numbered by what it loaded]
// A resumed attempt must number its steps from where the checkpoint it loaded left off, or it "stops at step 4
// of 10" having trained to step 10. The probe reads that from the loaded object's counter or the optimizer's
// own count (Note [A step is what the optimizer did] in python/oomharness/probe/checkpoints.py); a program
// that keeps its step in a side file (Hugging Face's trainer_state.json, a JSON beside model.safetensors)
// with an optimizer that keeps no count (SGD) gave neither. What cannot be missed is the content: each earlier
// attempt's probe wrote, with every checkpoint it saved, the content's digest and the steps it had completed
// then, in its own count. The runner hands those to the next attempt (OOMH_SAVED_STEPS: "digest:completed"
// joined by commas), and a process that loads, before its first step, content one of them saved starts its
// count there. A digest saved at two different counts (a model that did not change between two saves) says
// nothing and is left out; so is anything but 16 hex digits and a count, and past the last 64 saves.
std::string saved_steps(const std::vector<Attempt>& earlier);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed): a distributed job's
// MASTER_PORT. 0 when none could be had.
int free_local_port();

// The job's environment as "NAME=value" strings: the runner's own environment, then the job's `env`,
// then what the harness injects (LD_PRELOAD appended, OOMH_*, PYTHONPATH and OOMH_PROBE for the Python
// probe, LD_LIBRARY_PATH prepended with the driver double, CUDA_VISIBLE_DEVICES, and OMP_NUM_THREADS
// where neither of the first two set it).
std::vector<std::string> job_environment(const JobSpec& job, const HarnessPaths& paths, const AttemptContext& ctx);

// The environment of the reservation sidecar: the runner's, the job's `env` (the double's settings live
// there), the driver library directory and the job's GPU.
std::vector<std::string> sidecar_environment(const JobSpec& job, const HarnessPaths& paths, std::optional<int> gpu);

// argv with {workdir}/{attempt} substituted. argv[0] is looked up on PATH when it has no '/'.
std::vector<std::string> attempt_argv(const JobSpec& job, const std::string& workdir, int attempt);
// The program to execute for argv[0]: itself when it has a '/', else the first match on PATH; empty when
// not found.
std::string resolve_program(const std::string& argv0, const std::vector<std::string>& env);

// A Boost.Process v2 initializer: the environment, setsid() so the job and everything it starts form
// one session and process group the runner can signal as a whole (and the job cannot reach the runner's
// group or terminal: Note [Signals a job may send] in signals.h), the working directory, and signals back to their
// defaults (the runner's own mask and dispositions must not leak into the job), and PR_SET_PDEATHSIG
// (SIGKILL) so that the job's leader dies with the runner.
class JobSetup {
 public:
  JobSetup(const std::vector<std::string>& env, std::string cwd);
  boost::system::error_code on_setup(boost::process::v2::posix::default_launcher& launcher,
                                     const boost::process::v2::filesystem::path&, const char* const*);
  boost::system::error_code on_exec_setup(boost::process::v2::posix::default_launcher&,
                                          const boost::process::v2::filesystem::path&, const char* const*);

 private:
  std::vector<const char*> envp_;
  std::string cwd_;
  pid_t parent_;  // the runner: the child exits at once when its parent is already another process
};

}  // namespace oomh::exec
