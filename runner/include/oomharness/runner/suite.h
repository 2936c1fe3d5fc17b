#pragma once
// The suite model: a YAML suite (docs/suite-format.md) after parsing, validation, matrix expansion and
// templating. Everything the launcher needs is here, already checked; every value still knows where it
// came from (file:line:col) so that later errors can point at it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/expected.h"

namespace oomh {

struct SourceLocation {
  std::string file;
  int line = 0;   // 1-based
  int column = 0; // 1-based
  // "suite.yaml:12:7"; without a line ("suite.yaml") for problems with the whole file (it cannot be read).
  std::string str() const {
    if (line <= 0) return file;
    if (column <= 0) return file + ":" + std::to_string(line);
    return file + ":" + std::to_string(line) + ":" + std::to_string(column);
  }
};

// A suite error: "suite.yaml:12:7: unknown key 'tiemout' in job 'a' (did you mean 'timeout'?)".
struct SuiteError {
  SourceLocation where;
  std::string message;
  std::string str() const { return where.str() + ": " + message; }
};

struct ObserveSpec {            // `observe:` one regex per key, exactly one capture group
  std::string key;              // "step", "batch_size", "loss", or any other name
  std::string pattern;
  SourceLocation where;
};

struct CapChange {              // `memory.schedule` entries
  std::optional<int64_t> at_step;
  std::optional<double> at_seconds;
  uint64_t limit = 0;
};

struct MemorySpec {
  std::optional<uint64_t> limit;          // virtual cap in bytes, every device
  bool counts_footprint = false;          // `counts: footprint`: the cap counts context and driver memory too
  std::vector<CapChange> schedule;
  uint64_t reserve = 0;                   // real bytes held by the reservation sidecar
  std::optional<uint64_t> leave;          // or: the sidecar holds whatever leaves this many bytes free
  std::optional<uint64_t> reserve_chunk;  // hold the reservation in chunks of this size (fragmentation)
  bool snapshot = false;                  // PyTorch memory snapshot at the OOM (Python probe)
};

struct FaultSpec {
  std::string name;
  nlohmann::json rule;          // one rule of docs/fault-plan.md, sizes and times normalised to numbers
  SourceLocation where;
};

struct RestartSpec {
  int max = 0;
  std::vector<std::string> on{"oom"};  // "oom", "nonzero", "signal", "any"; default: oom
  bool clear_faults = false;
};

struct ExpectSpec {
  std::string policy;           // registry name
  nlohmann::json args = nlohmann::json::object();  // normalised by the registry
  SourceLocation where;
  bool must_fail = false;       // `must_fail: true` beside the policy: the check is expected to fail
};

// A job's `sweep:` (docs/sweep.md): what `oomharness sweep SUITE -k JOB` sweeps when its flags do not say.
// `run` sweeps it too, its faulted runs among the suite's jobs (Note [A suite's sweeps] in run_command.cpp).
struct SweepSpec {
  std::string steps;                  // "3", "2,5" or "2..4"
  std::vector<std::string> modes;     // "transient", "persistent"; empty: both
  std::optional<int> transient_times;
};

enum class ProbeMode { auto_, python, none };
// "auto", "python", "none", as suites write them; nullopt for anything else.
std::optional<ProbeMode> probe_mode_from_name(const std::string& name);
const char* probe_mode_name(ProbeMode p);

// Where a job's CUDA work runs (docs/without-a-gpu.md): the GPU (through the shim over the real driver, or
// the CPU driver double under --simulate), or the virtual CUDA device (PyTorch on the CPU, its device memory
// booked in a model of the caching allocator whose segments the shim sees). `automatic`: the virtual device
// for Python jobs under --simulate, the GPU otherwise (run_suites decides, once).
enum class DeviceChoice { automatic, gpu, virtual_device };
// "auto", "gpu", "virtual"; nullopt for anything else.
std::optional<DeviceChoice> device_choice_from_name(const std::string& name);
const char* device_choice_name(DeviceChoice d);

// The strings marked "runtime template" below still hold `{workdir}`, `{attempt}` and the brace escapes
// `{{` `}}` (docs/suite-format.md, "Templates"): the launcher passes them through substitute_runtime, or
// the whole job through resolve_runtime, for each attempt.
struct JobSpec {
  std::string name;                       // templated, unique in the suite (fully resolved)
  std::vector<std::string> argv;          // runtime template; with shell, {"/bin/sh", "-c", text}
  bool shell = false;
  std::map<std::string, std::string> env; // runtime template; only the suite's `env` (the launcher adds its own)
  std::optional<std::string> cwd;         // runtime template, absolute (or `{workdir}...`); unset: the suite's directory
  double timeout = 600;                   // seconds
  double grace = 5;                       // seconds between SIGTERM and SIGKILL
  ProbeMode probe = ProbeMode::auto_;
  DeviceChoice device = DeviceChoice::automatic;
  std::vector<ObserveSpec> observe;
  MemorySpec memory;
  std::vector<FaultSpec> faults;
  RestartSpec restart;
  std::vector<ExpectSpec> expect;
  std::optional<int64_t> target_step;     // `target_step:`; also taken from `completes`
  int step_base = 1;                      // `step_base:` the number of the first step (Note [Step numbering])
  int ranks = 1;                          // `ranks:` distributed processes per attempt, on all nodes (Note [Ranks] in trace.h)
  int nodes = 1;                          // `nodes:` the nodes the ranks spread over (Slurm only; Note [Ranks on
                                          // several nodes] in runner/src/exec/node_group.h)
  int ranks_per_node = 1;                 // `ranks_per_node:` the ranks each node runs; the loader makes
                                          // ranks = nodes x ranks_per_node (with `nodes` > 1)
  double hang_stall = 60;                 // with ranks > 1: no_hang's `stall` (its default otherwise), the
                                          // runner's limit for a rank that stops advancing after another ended
  std::optional<SweepSpec> sweep;         // `sweep:`
  std::map<std::string, std::string> matrix;  // this job's matrix values (only the variables it uses)
  SourceLocation where;                   // the job's entry in the file

  // The fault plan JSON (docs/fault-plan.md) for this job: its faults and memory caps.
  nlohmann::json plan(bool with_faults = true) const;
  // The steps at which that plan starts failing allocations (a rule's `step`, or the first of its `steps`)
  // or lowers a cap (`memory.schedule` at a step), in order: the probes empty the framework's cache as each
  // begins (OOMH_FLUSH_AT_STEPS), so that the step's allocations reach the driver.
  std::vector<int64_t> flush_steps(bool with_faults = true) const;
  // What the probe must gather for this job's checks and faults, as OOMH_EVIDENCE says it ("batches,data";
  // Note [A probe that pays for what is checked] in include/oomharness/evidence.h).
  std::string evidence() const;
};

struct Suite {
  int version = 1;
  std::string name;
  std::string file;                       // path as given
  std::string dir;                        // the suite file's directory ({suite_dir})
  std::optional<std::string> backend;     // `backend:` "local" or "slurm", the run's default (--backend wins)
  std::vector<JobSpec> jobs;              // expanded
};

// Loads, validates and expands a suite file. Never throws for bad input: the suite, or every problem found
// (at least one), in the order of the file: the loader goes on after an error so that one run of
// `oomharness validate` shows them all, hence a list of SuiteErrors, each at its own file:line:col, for
// the error of the one result type (Note [One result type] in include/oomharness/expected.h).
// `{workdir}` and `{attempt}` stay in the strings: the launcher substitutes them per attempt with
// `substitute_runtime`.
// What a suite may grow to (Note [Suite limits] in runner/src/suite/limits.h lists the fixed ones).
struct SuiteLimits {
  static constexpr size_t default_max_jobs = 10'000;
  size_t max_jobs = default_max_jobs;  // jobs after matrix expansion (`--max-jobs`)
};
Expected<Suite, std::vector<SuiteError>> load_suite(const std::string& path, const SuiteLimits& limits = {});
Expected<Suite, std::vector<SuiteError>> load_suite_text(const std::string& text, const std::string& file_name,
                                                         const std::string& dir, const SuiteLimits& limits = {});

// Replaces `{workdir}` and `{attempt}` in `s`, and turns the escapes `{{` `}}` into single braces.
std::string substitute_runtime(const std::string& s, const std::string& workdir, int attempt);

// The job with substitute_runtime applied to its argv, env values and cwd: what one attempt runs.
JobSpec resolve_runtime(const JobSpec& job, const std::string& workdir, int attempt);

}  // namespace oomh
