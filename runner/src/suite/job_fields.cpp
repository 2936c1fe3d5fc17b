// Note [Job fields] in job_fields.h.

#include "suite/job_fields.h"

#include "suite/job_table.h"

#include "oomharness/runner/name_tables.h"

namespace oomh::suite {

JobFields merge(JobFields base, const JobFields& over) {
  for (const JobKey& k : job_keys()) k.merge(base, over);
  return base;
}

// Note [Step numbering]
// Most training loops print `for step in range(n)`, counting from 0, while the probe once counted the
// first optimizer step as 1: `--fault step=3` then hit what the user's log calls step 2, and a report mixed
// the probe's numbers with the checkpoint's and the log's. `step_base` (0 or 1, default 1) says which
// numbering the job's code uses, and every step number stays in it from end to end: the runner passes a
// fault's `step`/`steps`, a cap's `at: {step}`, the target step and the steps to flush through unchanged,
// the probe numbers the steps it counts and reads the numbers it is given in it (OOMH_STEP_BASE; _Steps in
// StepClock in python/oomharness/_job.py is the one conversion, Note [Step convention] in probe/steps.py), a `step` the runner
// observes in the output is the code's own, and the reports print the numbers they get, saying once per
// job which numbering they are in (step_numbering() in reports/include/oomharness/reports/result.h). The
// C++ probe reports the program's own numbers and converts nothing.
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
