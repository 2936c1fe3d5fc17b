#pragma once
// Note [Job fields]
// What a job says about itself, from a suite (each job laid over `defaults`) or from `oomharness exec`'s
// flags: every field optional, already typed and checked. build_job is the one place where given fields
// become a JobSpec, each default applied once, so that `run` and `exec` cannot build a job differently
// (they once did: `exec --restart-on signal` appended to the default `oom` and restarted after an OOM
// exit, and `exec --expect completes=N` never set the target step). merge lays one JobFields over
// another: maps (env, observe, memory, restart) key by key, every other field replaces.
// A new field is a member below and one row of the job table (Note [One table of job fields] in
// job_table.h), which holds its reader, its merge and its build.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/runner/suite.h"

namespace oomh::suite {

struct JobFields {
  std::optional<std::string> name;               // templates still unexpanded in a suite
  std::optional<std::vector<std::string>> argv;  // likewise
  std::optional<bool> shell;
  std::optional<std::string> cwd;                // likewise; a suite's relative cwd is made absolute by the loader
  std::map<std::string, std::string> env;        // likewise (values)
  std::optional<double> timeout, grace;
  std::optional<ProbeMode> probe;
  std::optional<DeviceChoice> device;
  std::vector<ObserveSpec> observe;
  struct Memory {
    std::optional<uint64_t> limit;
    std::optional<bool> counts_footprint;
    std::optional<std::vector<CapChange>> schedule;
    std::optional<uint64_t> reserve, leave, reserve_chunk;
    std::optional<bool> snapshot;
  } memory;
  std::optional<std::vector<FaultSpec>> faults;
  struct Restart {
    std::optional<int> max;
    std::optional<std::vector<std::string>> on;
    std::optional<bool> clear_faults;
  } restart;
  std::optional<std::vector<ExpectSpec>> expect;
  std::optional<int64_t> target_step;
  std::optional<int> step_base;
  std::optional<int> ranks;
  std::optional<int> nodes;           // Note [Ranks on several nodes] in runner/src/exec/node_group.h
  std::optional<int> ranks_per_node;  // the loader makes ranks = nodes x ranks_per_node
  std::optional<SweepSpec> sweep;
};

// `over` laid over `base`.
JobFields merge(JobFields base, const JobFields& over);

// The job with every default applied (suite.h's JobSpec documents them) and what follows from the
// fields: the target step from `completes` when none is given. `name` and `argv` must be set.
JobSpec build_job(const JobFields& fields);

}  // namespace oomh::suite
