// Note [Job fields] in job_fields.h.

#include "suite/job_fields.h"

#include <algorithm>

namespace oomh::suite {

namespace {

template <class T>
void take(std::optional<T>& into, const std::optional<T>& from) {
  if (from) into = from;
}

}  // namespace

JobFields merge(JobFields base, const JobFields& over) {
  take(base.name, over.name);
  take(base.argv, over.argv);
  take(base.shell, over.shell);
  take(base.cwd, over.cwd);
  for (const auto& [key, value] : over.env) base.env[key] = value;
  take(base.timeout, over.timeout);
  take(base.grace, over.grace);
  take(base.probe, over.probe);
  take(base.device, over.device);
  for (const auto& o : over.observe) {
    auto it = std::find_if(base.observe.begin(), base.observe.end(), [&](const auto& b) { return b.key == o.key; });
    if (it != base.observe.end()) *it = o;
    else base.observe.push_back(o);
  }
  take(base.memory.limit, over.memory.limit);
  take(base.memory.counts_footprint, over.memory.counts_footprint);
  take(base.memory.schedule, over.memory.schedule);
  take(base.memory.reserve, over.memory.reserve);
  take(base.memory.leave, over.memory.leave);
  take(base.memory.reserve_chunk, over.memory.reserve_chunk);
  take(base.memory.snapshot, over.memory.snapshot);
  take(base.faults, over.faults);
  take(base.restart.max, over.restart.max);
  take(base.restart.on, over.restart.on);
  take(base.restart.clear_faults, over.restart.clear_faults);
  take(base.expect, over.expect);
  take(base.target_step, over.target_step);
  take(base.step_base, over.step_base);
  take(base.ranks, over.ranks);
  take(base.sweep, over.sweep);
  return base;
}

// Note [Step numbering]
// Most training loops print `for step in range(n)`, counting from 0, while the probe once counted the
// first optimizer step as 1: `--fault step=3` then hit what the user's log calls step 2, and a report mixed
// the probe's numbers with the checkpoint's and the log's. `step_base` (0 or 1, default 1) says which
// numbering the job's code uses, and every step number stays in it from end to end: the runner passes a
// fault's `step`/`steps`, a cap's `at: {step}`, the target step and the steps to flush through unchanged,
// the probe numbers the steps it counts and reads the numbers it is given in it (OOMH_STEP_BASE; _Steps in
// python/oomharness/probe.py is the one conversion, Note [Step convention] there), a `step` the runner
// observes in the output is the code's own, and the reports print the numbers they get, saying once per
// job which numbering they are in (step_numbering() in reports/include/oomharness/reports/result.h). The
// C++ probe reports the program's own numbers and converts nothing.
JobSpec build_job(const JobFields& f) {
  JobSpec job;  // its initialisers are the defaults (suite.h)
  job.name = f.name.value_or(job.name);
  job.argv = f.argv.value_or(job.argv);
  job.shell = f.shell.value_or(job.shell);
  job.cwd = f.cwd;
  job.env = f.env;
  job.timeout = f.timeout.value_or(job.timeout);
  job.grace = f.grace.value_or(job.grace);
  job.probe = f.probe.value_or(job.probe);
  job.device = f.device.value_or(job.device);
  job.observe = f.observe;
  job.memory.limit = f.memory.limit;
  job.memory.counts_footprint = f.memory.counts_footprint.value_or(job.memory.counts_footprint);
  job.memory.schedule = f.memory.schedule.value_or(job.memory.schedule);
  job.memory.reserve = f.memory.reserve.value_or(job.memory.reserve);
  job.memory.leave = f.memory.leave;
  job.memory.reserve_chunk = f.memory.reserve_chunk;
  job.memory.snapshot = f.memory.snapshot.value_or(job.memory.snapshot);
  job.faults = f.faults.value_or(job.faults);
  job.restart.max = f.restart.max.value_or(job.restart.max);
  job.restart.on = f.restart.on.value_or(job.restart.on);
  job.restart.clear_faults = f.restart.clear_faults.value_or(job.restart.clear_faults);
  job.expect = f.expect.value_or(job.expect);
  job.target_step = f.target_step;
  job.step_base = f.step_base.value_or(job.step_base);
  job.ranks = f.ranks.value_or(job.ranks);
  // Note [Hang detection] in job_runner.cpp: the runner waits for a stalled rank as long as no_hang would.
  for (const auto& e : job.expect)
    if (e.policy == "no_hang" && e.args.contains("stall") && e.args["stall"].is_number()) job.hang_stall = e.args["stall"].get<double>();
  job.sweep = f.sweep;
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

std::optional<DeviceChoice> device_choice_from_name(const std::string& name) {
  if (name == "auto") return DeviceChoice::automatic;
  if (name == "gpu") return DeviceChoice::gpu;
  if (name == "virtual") return DeviceChoice::virtual_device;
  return std::nullopt;
}

const char* device_choice_name(DeviceChoice d) {
  switch (d) {
    case DeviceChoice::automatic: return "auto";
    case DeviceChoice::gpu: return "gpu";
    case DeviceChoice::virtual_device: return "virtual";
  }
  return "auto";
}

}  // namespace oomh
