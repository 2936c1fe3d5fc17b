#pragma once
// What crosses from the submitting side to a Slurm node and back (Note [Backends] in backend.h): the agent's
// plan (one job, already expanded, and how to run it) and the job's outcome (every attempt, as the local
// job runner keeps it in memory). Both are JSON files in the run's output folder, which the nodes share.
//
// Note [Agent plan and results]
// The plan carries the job itself (JobSpec, every field), its environment included: values go through a
// JSON file, never through `sbatch --export=K=V`, which cuts a value at its first comma. The results carry
// the JobOutcome exactly (attempts, events, samples, rank ends, a thinned log's folded figures, the shim's
// armed record), so that the submitting side judges and reports it with the same code as a local run. The
// job and the outcome are written by the model layer's one codec per type (Note [One codec per boundary
// type] in model.h); this file only adds the envelope (`version`) and the plan's own fields. Each file is
// written to a temporary name and renamed. `version` changes when a field changes meaning or shape; a
// reader refuses another version by name. Version 2: the codec of the model layer (samples as objects,
// with their rank; the attempt's `thinned`; the job's `sweep`; the outcome's `gpus` and `not_started`). Version 3:
// the job's `nodes` and `ranks_per_node`, the plan's `agent` (Note [Ranks on several nodes] in
// runner/src/exec/node_group.h).

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "oomharness/runner/job_runner.h"
#include "oomharness/runner/model.h"
#include "oomharness/runner/suite.h"

namespace oomh {

inline constexpr int kAgentFormatVersion = 3;

struct AgentPlan {
  JobSpec job;
  HarnessPaths paths;
  std::string jobs_dir;                  // RunOptions::out_dir: the job's logs and work folder go under it
  std::string results_path;              // where the agent writes the outcome
  std::optional<int> threads;            // OMP_NUM_THREADS, as the local runner would set it; unset: none
  std::optional<std::string> ld_preload; // the submitter's own LD_PRELOAD (kept out of sbatch's environment)
  std::string agent;                     // the oomharness the nodes run (--slurm-agent): a job on several nodes
                                         // starts its node agents with it (Note [Ranks on several nodes])
};

// The outcome and the plan with their envelope (`version`). The job inside the plan and the outcome are the
// model layer's codecs (model.h).
nlohmann::json to_json_value(const JobOutcome& outcome);
nlohmann::json to_json_value(const AgentPlan& plan);

// Each throws std::runtime_error (naming the field's path) for JSON that is not one of ours.
JobOutcome job_outcome_from_json(const nlohmann::json& j);
AgentPlan agent_plan_from_json(const nlohmann::json& j);

// Writes `text` to path + ".tmp.<pid>" and renames it over `path`. Returns the error text on failure.
std::optional<std::string> write_text_atomic(const std::string& path, const std::string& text);

}  // namespace oomh
