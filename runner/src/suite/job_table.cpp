// Note [One table of job fields] in job_table.h.

#include "suite/job_table.h"

#include <algorithm>
#include <iterator>

#include "oomharness/runner/model.h"
#include "oomharness/runner/name_tables.h"
#include "oomharness/units.h"
#include "suite/fault_rule.h"
#include "suite/items.h"
#include "suite/loader.h"
#include "suite/names.h"

namespace oomh::suite {

namespace {

template <class T>
void take(std::optional<T>& into, const std::optional<T>& from) {
  if (from) into = from;
}

// ---- merge: `over` laid over `base`; maps key by key (env, observe, memory, restart), the rest replaces.

void merge_name(JobFields& b, const JobFields& o) { take(b.name, o.name); }
void merge_argv(JobFields& b, const JobFields& o) { take(b.argv, o.argv); }
void merge_shell(JobFields& b, const JobFields& o) { take(b.shell, o.shell); }
void merge_cwd(JobFields& b, const JobFields& o) { take(b.cwd, o.cwd); }
void merge_env(JobFields& b, const JobFields& o) {
  for (const auto& [key, value] : o.env) b.env[key] = value;
}
void merge_timeout(JobFields& b, const JobFields& o) { take(b.timeout, o.timeout); }
void merge_grace(JobFields& b, const JobFields& o) { take(b.grace, o.grace); }
void merge_probe(JobFields& b, const JobFields& o) { take(b.probe, o.probe); }
void merge_device(JobFields& b, const JobFields& o) { take(b.device, o.device); }
void merge_observe(JobFields& b, const JobFields& o) {
  for (const auto& v : o.observe) {
    auto it = std::find_if(b.observe.begin(), b.observe.end(), [&](const auto& x) { return x.key == v.key; });
    if (it != b.observe.end()) *it = v;
    else b.observe.push_back(v);
  }
}
static_assert(field_count<JobFields::Memory>() == 7, "merge_memory and build_memory name each member of JobFields::Memory");
static_assert(field_count<MemorySpec>() == 7, "build_memory names each member of MemorySpec");
void merge_memory(JobFields& b, const JobFields& o) {
  take(b.memory.limit, o.memory.limit);
  take(b.memory.counts_footprint, o.memory.counts_footprint);
  take(b.memory.schedule, o.memory.schedule);
  take(b.memory.reserve, o.memory.reserve);
  take(b.memory.leave, o.memory.leave);
  take(b.memory.reserve_chunk, o.memory.reserve_chunk);
  take(b.memory.snapshot, o.memory.snapshot);
}
void merge_faults(JobFields& b, const JobFields& o) { take(b.faults, o.faults); }
static_assert(field_count<JobFields::Restart>() == 3 && field_count<RestartSpec>() == 3,
              "merge_restart and build_restart name each member of JobFields::Restart and RestartSpec");
void merge_restart(JobFields& b, const JobFields& o) {
  take(b.restart.max, o.restart.max);
  take(b.restart.on, o.restart.on);
  take(b.restart.clear_faults, o.restart.clear_faults);
}
void merge_expect(JobFields& b, const JobFields& o) { take(b.expect, o.expect); }
void merge_target_step(JobFields& b, const JobFields& o) { take(b.target_step, o.target_step); }
void merge_step_base(JobFields& b, const JobFields& o) { take(b.step_base, o.step_base); }
void merge_ranks(JobFields& b, const JobFields& o) { take(b.ranks, o.ranks); }
void merge_nodes(JobFields& b, const JobFields& o) { take(b.nodes, o.nodes); }
void merge_ranks_per_node(JobFields& b, const JobFields& o) { take(b.ranks_per_node, o.ranks_per_node); }
void merge_sweep(JobFields& b, const JobFields& o) { take(b.sweep, o.sweep); }

// ---- build: the JobSpec's member from the field, its initialiser (suite.h) being the default.

void build_name(JobSpec& j, const JobFields& f) { j.name = f.name.value_or(j.name); }
void build_argv(JobSpec& j, const JobFields& f) { j.argv = f.argv.value_or(j.argv); }
void build_shell(JobSpec& j, const JobFields& f) { j.shell = f.shell.value_or(j.shell); }
void build_cwd(JobSpec& j, const JobFields& f) { j.cwd = f.cwd; }
void build_env(JobSpec& j, const JobFields& f) { j.env = f.env; }
void build_timeout(JobSpec& j, const JobFields& f) { j.timeout = f.timeout.value_or(j.timeout); }
void build_grace(JobSpec& j, const JobFields& f) { j.grace = f.grace.value_or(j.grace); }
void build_probe(JobSpec& j, const JobFields& f) { j.probe = f.probe.value_or(j.probe); }
void build_device(JobSpec& j, const JobFields& f) { j.device = f.device.value_or(j.device); }
void build_observe(JobSpec& j, const JobFields& f) { j.observe = f.observe; }
void build_memory(JobSpec& j, const JobFields& f) {
  j.memory.limit = f.memory.limit;
  j.memory.counts_footprint = f.memory.counts_footprint.value_or(j.memory.counts_footprint);
  j.memory.schedule = f.memory.schedule.value_or(j.memory.schedule);
  j.memory.reserve = f.memory.reserve.value_or(j.memory.reserve);
  j.memory.leave = f.memory.leave;
  j.memory.reserve_chunk = f.memory.reserve_chunk;
  j.memory.snapshot = f.memory.snapshot.value_or(j.memory.snapshot);
}
void build_faults(JobSpec& j, const JobFields& f) { j.faults = f.faults.value_or(j.faults); }
void build_restart(JobSpec& j, const JobFields& f) {
  j.restart.max = f.restart.max.value_or(j.restart.max);
  j.restart.on = f.restart.on.value_or(j.restart.on);
  j.restart.clear_faults = f.restart.clear_faults.value_or(j.restart.clear_faults);
}
void build_expect(JobSpec& j, const JobFields& f) { j.expect = f.expect.value_or(j.expect); }
void build_target_step(JobSpec& j, const JobFields& f) { j.target_step = f.target_step; }
void build_step_base(JobSpec& j, const JobFields& f) { j.step_base = f.step_base.value_or(j.step_base); }
// The loader makes `ranks`, `nodes` and `ranks_per_node` agree (Note [Ranks on several nodes]).
void build_ranks(JobSpec& j, const JobFields& f) { j.ranks = f.ranks.value_or(j.ranks); }
void build_nodes(JobSpec& j, const JobFields& f) { j.nodes = f.nodes.value_or(j.nodes); }
void build_ranks_per_node(JobSpec& j, const JobFields& f) { j.ranks_per_node = f.ranks_per_node.value_or(j.ranks_per_node); }
void build_sweep(JobSpec& j, const JobFields& f) { j.sweep = f.sweep; }

// ---- the readers of exec's job flags: a flag's values as written (the last counts for a flag taken once),
// the problem as "oomharness exec: " goes on to say it. The limits are the suite's (load.cpp).

using Problem = std::optional<std::string>;

Problem flag_name(JobFields& f, const std::vector<std::string>& v) {
  f.name = v.back();  // checked by job_from_exec_args with the name it makes when none is given
  return std::nullopt;
}
Problem flag_env(JobFields& f, const std::vector<std::string>& v) {
  for (const std::string& kv : v) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return "bad --env '" + kv + "': write NAME=VALUE";
    if (!is_variable_name(kv.substr(0, eq)))
      return "bad --env '" + kv + "': '" + kv.substr(0, eq) + "' is not a valid environment variable name";
    f.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return std::nullopt;
}
Problem flag_timeout(JobFields& f, const std::vector<std::string>& v) {
  Expected<double> t = parse_duration(v.back());
  if (!t || *t <= 0)
    return "bad --timeout: " + (t ? "bad duration '" + v.back() + "': it must be more than 0" : t.error().str());
  f.timeout = *t;
  return std::nullopt;
}
Problem flag_device(JobFields& f, const std::vector<std::string>& v) {
  f.device = device_choice_from_name(v.back());
  if (!f.device) return "bad --device '" + v.back() + "': " + names_text(kDevices, ", ", " or ");
  return std::nullopt;
}
Problem flag_cap(JobFields& f, const std::vector<std::string>& v) {
  Expected<double> cap = parse_bytes(v.back());
  if (!cap) return "bad --cap: " + cap.error().str();
  f.memory.limit = static_cast<uint64_t>(*cap);
  return std::nullopt;
}
Problem flag_cap_counts(JobFields& f, const std::vector<std::string>& v) {
  f.memory.counts_footprint = cap_counts_footprint(v.back());
  if (!f.memory.counts_footprint) return "bad --cap-counts '" + v.back() + "': " + join(cap_counting_names(), " or ");
  return std::nullopt;
}
Problem flag_restart(JobFields& f, const std::vector<std::string>& v) {
  std::optional<int64_t> n = parse_integer(v.back());
  if (!n || *n < 0 || *n > 1000) return "bad --restart " + v.back() + ": from 0 to 1000";
  f.restart.max = static_cast<int>(*n);
  return std::nullopt;
}
// The reasons given replace the default (`oom`), as `restart: {on: [...]}` does in a suite.
Problem flag_restart_on(JobFields& f, const std::vector<std::string>& v) {
  f.restart.on.emplace();
  for (const std::string& on : split_items(v.back())) {
    if (!value_named(kRestartReasons, on)) {
      const std::string near = suggest_name(kRestartReasons, on);
      return "bad --restart-on '" + v.back() + "': '" + on + "' is not one of " + names_text(kRestartReasons) +
             (near.empty() ? "" : " (did you mean '" + near + "'?)");
    }
    f.restart.on->push_back(on);
  }
  return std::nullopt;
}
Problem flag_clear_faults(JobFields& f, const std::vector<std::string>& v) {
  f.restart.clear_faults = v.back() == "true";
  return std::nullopt;
}
Problem flag_target_step(JobFields& f, const std::vector<std::string>& v) {
  std::optional<int64_t> n = parse_integer(v.back());
  if (!n || *n < 0) return "bad --target-step " + v.back() + ": at least 0";
  f.target_step = *n;
  return std::nullopt;
}
Problem flag_step_base(JobFields& f, const std::vector<std::string>& v) {
  std::optional<int64_t> n = parse_integer(v.back());
  if (!n || (*n != 0 && *n != 1)) return "bad --step-base " + v.back() + ": 0 or 1";
  f.step_base = static_cast<int>(*n);
  return std::nullopt;
}

constexpr JobFlag none{};
constexpr FlagTakes text = FlagTakes::text, integer = FlagTakes::integer, repeated = FlagTakes::repeated,
                    nothing = FlagTakes::nothing;

// In JobFields' order (which is JobSpec's): the loader reads the keys in the file's order, so the table's
// order only shows in `dev job-keys` and in build_job, whose rows are independent of one another.
constexpr JobKey kJobKeys[] = {
    {"name", "text; may name matrix variables", "", "the job's name, unique in the suite", false, &Loader::read_name,
     merge_name, build_name, {{{"--name", "The job's name in reports (default: the command's name)", text, flag_name}, none, none}}, ""},
    {"run", "a command: one string (split like a shell's words) or a list of strings", "",
     "the command to run; exec takes it after --", false, &Loader::read_run, merge_argv, build_argv, {},
     "exec takes the command after --"},
    {"shell", "true or false", "false", "run `run` with /bin/sh -c", true, &Loader::read_shell, merge_shell,
     build_shell, {}, "exec runs the command after -- as given: write sh -c '...' there for a shell"},
    {"cwd", "a folder; relative to the suite's", "the suite's folder (exec: the current one)",
     "the job's working folder", true, &Loader::read_cwd, merge_cwd, build_cwd, {},
     "exec runs the command in the current folder"},
    {"env", "a map of NAME: value", "", "variables added to the job's environment", true, &Loader::read_env,
     merge_env, build_env, {{{"--env", "NAME=VALUE for the job's environment (repeatable)", repeated, flag_env}, none, none}}, ""},
    {"timeout", "a duration (30s, 10m)", "10m", "how long an attempt may run before it is stopped", true,
     &Loader::read_timeout, merge_timeout, build_timeout,
     {{{"--timeout", "Stop the job after this long: 30s, 10m (default 10m)", text, flag_timeout}, none, none}}, ""},
    {"grace", "a duration", "5s", "time between SIGTERM and SIGKILL", true, &Loader::read_grace, merge_grace,
     build_grace, {}, "exec keeps the default grace; a suite gives another"},
    {"probe", "auto, python or none", "auto", "whether the Python probe is put into the job", true,
     &Loader::read_probe, merge_probe, build_probe, {}, "exec keeps the default (auto); a suite chooses otherwise"},
    {"device", "auto, gpu or virtual", "auto", "where the job's CUDA work runs", true, &Loader::read_device,
     merge_device, build_device,
     {{{"--device", "Where the job's CUDA work runs: auto (default), gpu or virtual", text, flag_device}, none, none}}, ""},
    {"observe", "a map of key: regular expression with one capture group", "", "values read from the job's output",
     true, &Loader::read_observe, merge_observe, build_observe, {}, "a map of patterns is a suite's to write"},
    {"memory", "a map: limit, counts, schedule, reserve, leave, reserve_chunk, snapshot, per", "no cap, nothing reserved",
     "the cap the shim applies and the memory the sidecar holds", true, &Loader::read_memory, merge_memory, build_memory,
     {{{"--cap", "Make every GPU look this big to the job: 8GiB, 512MiB", text, flag_cap},
       {"--cap-counts", "What the cap counts: allocations (default) or footprint (the CUDA context and driver memory too)",
        text, flag_cap_counts},
       none}},
     ""},
    {"faults", "a list of fault rules (docs/fault-plan.md)", "none", "the allocations the shim fails", true,
     &Loader::read_faults, merge_faults, build_faults,
     {{{"--fault", "A fault rule: step=5,times=4 | every=10,min_size=64MiB | ... (repeatable)", repeated, nullptr}, none,
       none}},
     ""},
    {"restart", "a map: max, on, clear_faults, scope", "max 0, on oom", "when a job that died is started again", true,
     &Loader::read_restart, merge_restart, build_restart,
     {{{"--restart", "Restart the job up to N times when it dies (default 0)", integer, flag_restart},
       {"--restart-on", "What restarts it: oom, nonzero, signal, any (comma list; default oom)", text, flag_restart_on},
       {"--clear-faults", "Restarted attempts run without the faults", nothing, flag_clear_faults}}},
     ""},
    {"expect", "a list of checks (docs/policies.md)", "none", "the recovery checks the job's trace must pass", true,
     &Loader::read_expect, merge_expect, build_expect,
     {{{"--expect", "A check: batch_halving:factor=0.5,min=8 | exit=0 | ... (repeatable)", repeated, nullptr}, none, none}},
     ""},
    {"target_step", "an integer, 0 or more", "completes' steps", "the step training must reach", true,
     &Loader::read_target_step, merge_target_step, build_target_step,
     {{{"--target-step", "The step training must reach", integer, flag_target_step}, none, none}}, ""},
    {"step_base", "0 or 1", "1", "the number of the first training step in the code's own log (Note [Step numbering])",
     true, &Loader::read_step_base, merge_step_base, build_step_base,
     {{{"--step-base", "The number of the first training step in the code's own log: 0 or 1 (default 1)", integer,
        flag_step_base},
       none, none}},
     ""},
    {"ranks", "an integer from 1", "1", "distributed processes per attempt", true, &Loader::read_ranks, merge_ranks,
     build_ranks, {}, "not yet: a distributed job is a suite's (docs/distributed.md, what is not done)"},
    {"nodes", "an integer from 1", "1", "the nodes the ranks spread over (--backend slurm; docs/slurm.md)", true,
     &Loader::read_nodes, merge_nodes, build_nodes, {}, "not yet: a job on several nodes is a suite's, run on Slurm"},
    {"ranks_per_node", "an integer from 1", "ranks / nodes", "the ranks each node runs; ranks is nodes x ranks_per_node", true,
     &Loader::read_ranks_per_node, merge_ranks_per_node, build_ranks_per_node, {},
     "not yet: a job on several nodes is a suite's, run on Slurm"},
    {"sweep", "a map: step, modes, transient_times (docs/sweep.md)", "none", "what `oomharness sweep` sweeps", true,
     &Loader::read_sweep, merge_sweep, build_sweep, {}, "oomharness sweep has its own flags (--step, --modes, --transient-times)"},
};

// Every member of JobFields is one row; JobSpec has those and three that no key gives: hang_stall (from
// no_hang's stall, in build_job), matrix and where (the loader's). A member added to either struct stops
// the build here until it has its row (or is named as one of the three).
static_assert(std::size(kJobKeys) == field_count<JobFields>(), "JobFields gained or lost a member: give it its row in kJobKeys");
static_assert(field_count<JobSpec>() == field_count<JobFields>() + 3,
              "JobSpec gained or lost a member: give it its row in kJobKeys (or build_job its derivation)");

}  // namespace

std::span<const JobKey> job_keys() { return kJobKeys; }

const JobKey* find_job_key(std::string_view key) {
  for (const JobKey& k : kJobKeys)
    if (k.key == key) return &k;
  return nullptr;
}

std::vector<std::string> job_key_names() {
  std::vector<std::string> out;
  for (const JobKey& k : kJobKeys) out.emplace_back(k.key);
  return out;
}

const JobFlag* find_job_flag(std::string_view flag) {
  for (const JobKey& k : kJobKeys)
    for (const JobFlag& f : k.flags)
      if (!f.name.empty() && f.name == flag) return &f;
  return nullptr;
}

}  // namespace oomh::suite
