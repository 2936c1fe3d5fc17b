// Note [Job fields] in job_fields.h.

#include "suite/job_fields.h"

#include "suite/job_table.h"

#include "oomharness/runner/name_tables.h"

namespace oomh::suite {

JobFields merge(JobFields base, const JobFields& over) {
  for (const JobKey& k : job_keys()) k.merge(base, over);
  return base;
}

JobSpec build_job(const JobFields& f) {
  JobSpec job;  // its initialisers are the defaults (suite.h)
  for (const JobKey& k : job_keys()) k.build(job, f);
  // What follows from the fields rather than from one of them (Note [One table of job fields]).
  // Note [Hang detection] in job_runner_hangs.cpp: the runner waits for a stalled rank as long as no_hang would.
  for (const auto& e : job.expect)
    if (e.policy == "no_hang" && e.args.contains("stall") && e.args["stall"].is_number()) job.hang_stall = e.args["stall"].get<double>();
  if (!job.target_step) {
    // `completes` says how far the job must get; the trace needs the same number.
    for (const auto& e : job.expect)
      if (e.policy == "completes")
        for (const char* key : {"steps", "step", "target_step"})
          if (e.args.contains(key) && e.args[key].is_number_integer()) job.target_step = e.args[key].get<int64_t>();
  }
  return job;
}

}  // namespace oomh::suite

namespace oomh {

std::optional<ProbeMode> probe_mode_from_name(const std::string& name) {
  if (name == "auto") return ProbeMode::auto_;
  if (name == "python") return ProbeMode::python;
  if (name == "none") return ProbeMode::none;
  return std::nullopt;
}

const char* probe_mode_name(ProbeMode p) {
  switch (p) {
    case ProbeMode::python: return "python";
    case ProbeMode::none: return "none";
    case ProbeMode::auto_: break;
  }
  return "auto";
}

// Note [Name tables]: kDevices (its names are string literals, so data() ends in a NUL).
std::optional<DeviceChoice> device_choice_from_name(const std::string& name) { return value_named(kDevices, name); }

const char* device_choice_name(DeviceChoice d) { return name_of(kDevices, d, "auto").data(); }

}  // namespace oomh
