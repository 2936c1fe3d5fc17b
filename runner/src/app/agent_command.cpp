// `oomharness agent PLAN`: a Slurm job's batch script runs this on the node (Note [Backends] in backend.h).
// It runs the plan's ONE job with the local backend (the shim, the control block, the probe, timeouts,
// restarts and faults, exactly as `oomharness run` does here) and writes the job's outcome where the
// submitting side reads it (Note [Agent plan and results] in agent_plan.h).

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "app/commands.h"
#include "app/interrupts.h"
#include "oomharness/runner/agent_plan.h"
#include "oomharness/runner/backend.h"
#include "app/spec_text.h"

namespace oomh::app {

ExitCode command_agent(const std::string& plan_path, std::ostream& out, std::ostream& err) {
  std::ifstream f(plan_path, std::ios::binary);
  if (!f) {
    err << "oomharness agent: cannot read the plan " << plan_path
        << " (is the output folder shared with this node? docs/slurm.md)\n";
    return ExitCode::internal_error;
  }
  std::stringstream text;
  text << f.rdbuf();
  AgentPlan plan;
  try {
    plan = agent_plan_from_json(nlohmann::json::parse(text.str()));
  } catch (const std::exception& e) {
    err << "oomharness agent: " << plan_path << ": " << e.what() << "\n";
    return ExitCode::internal_error;
  }
  // The submitter's own LD_PRELOAD was kept out of sbatch; the job gets it back, the shim after it.
  if (plan.ld_preload) setenv("LD_PRELOAD", plan.ld_preload->c_str(), 1);
  else unsetenv("LD_PRELOAD");

  RunOptions options;
  options.jobs = 1;
  options.out_dir = plan.jobs_dir;
  options.paths = plan.paths;
  // Slurm chose the job's GPUs and set CUDA_VISIBLE_DEVICES: the runner assigns none (an empty inventory)
  // and the job inherits Slurm's.
  options.gpu_inventory = std::vector<GpuInfo>{};
  options.threads_per_job = plan.threads ? ThreadsPerJob{ThreadsPerJob::Mode::fixed, *plan.threads}
                                         : ThreadsPerJob{ThreadsPerJob::Mode::off, 0};
  std::unique_ptr<Backend> backend = make_local_backend(std::move(options));
  std::vector<JobOutcome> outcomes;
  {
    InterruptHandlers handlers(*backend);
    outcomes = backend->run({plan.job});
  }
  JobOutcome outcome = outcomes.empty() ? JobOutcome{} : std::move(outcomes.front());
  if (backend->interrupted()) outcome.interrupted = true;
  // The job's GPU as Slurm gave it (the node's index), for the reports.
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd && *cvd) {
    if (auto n = parse_integer(cvd); n && *n >= 0 && *n < 1024) outcome.gpu = static_cast<int>(*n);
  }
  std::string json = to_json_value(outcome).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (auto problem = write_text_atomic(plan.results_path, json)) {
    err << "oomharness agent: " << *problem << "\n";
    return ExitCode::internal_error;
  }
  out << "oomharness agent: " << plan.job.name << ": " << outcome.trace.attempts.size() << " attempt(s)"
      << (outcome.interrupted ? ", interrupted" : "") << (outcome.error.empty() ? "" : ", error: " + outcome.error)
      << "; results in " << plan.results_path << "\n";
  return outcome.interrupted ? ExitCode::interrupted : ExitCode::ok;
}

}  // namespace oomh::app
