#pragma once
// Every OOMH_ environment variable, in one table (mimalloc's habit). The shim reads them once, at start-up;
// a name that starts with OOMH_ but is not in the table is warned about, with the closest known name.
//
// The shim is active (maps a control block, counts, may fail calls) when OOMH_PLAN, OOMH_CAP, OOMH_CONTROL
// or OOMH_EVENTS is set and OOMH_DISABLE is not; the other variables belong to the probes and the runner
// and are accepted silently. docs/injector.md lists them for users.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fault_plan.h"

namespace oomh::inject {

enum class LogLevel { quiet = 0, warn = 1, info = 2, debug = 3 };

struct OptionSpec {
  const char* name;
  bool configures_shim;  // setting it turns the shim on
  const char* what;
};

inline constexpr OptionSpec kOptionTable[] = {
    {"OOMH_PLAN", true, "the fault plan: JSON text, or the path of a file holding it (docs/fault-plan.md)"},
    {"OOMH_CAP", true, "memory cap for the whole job: 8GiB (every device) or 0=8GiB,1=4GiB"},
    {"OOMH_CAP_COUNTS", false, "what a cap counts: allocations (default) or footprint (the context and driver memory too)"},
    {"OOMH_CONTROL", true, "name of the control block (/oomh-...) to map; without it the shim creates its own"},
    {"OOMH_EVENTS", true, "event log to append JSON lines to (docs/events.md)"},
    {"OOMH_LOG", false, "what the shim prints on stderr: quiet, warn (default), info or debug"},
    {"OOMH_DISABLE", false, "1: the shim only forwards (a pure pass-through), whatever else is set"},
    {"OOMH_PROBE", false, "probe settings (read by the Python and C++ probes)"},
    {"OOMH_JOB", false, "the job's name (set by the runner)"},
    {"OOMH_ATTEMPT", false, "the attempt number (set by the runner)"},
    {"OOMH_SNAPSHOT", false, "where the probe saves a PyTorch memory snapshot"},
    {"OOMH_SHIM_PARENT", false, "pid of the shim process that exec'd this one (set by the shim itself)"},
    {"OOMH_PHASE_EVENTS", false, "1: the Python probe also logs a phase event at each phase change"},
    {"OOMH_RESERVE_PID", false, "pid of the job's reservation sidecar (set by the runner)"},
    {"OOMH_FLUSH_AT_STEPS", false, "steps at which the Python probe empties PyTorch's cache (set by the runner for step faults)"},
    {"OOMH_SAVED_STEPS", false, "digest:completed,...: what the earlier attempts' checkpoints held, for the Python probe to number a resume (set by the runner)"},
    {"OOMH_STEP_BASE", false, "0 or 1: the number of the first training step, for the Python probe (set by the runner from step_base)"},
    {"OOMH_RECORD_STEP", false, "N or A..B: the shim writes one alloc event per allocation call in those steps (set by oomharness sweep for its golden run)"},
    {"OOMH_DEVICE", false, "virtual: the Python package installs the virtual CUDA device (set by the runner)"},
    {"OOMH_STACKS", false, "a distributed rank's stack file: the Python probe has faulthandler write to it on SIGUSR1 (set by the runner)"},
    {"OOMH_EVIDENCE", false, "what the Python probe gathers: the evidence the job's checks read, or all (set by the runner; include/oomharness/evidence.h)"},
    {"OOMH_SHAPE_ONLY", false, "1: the virtual CUDA device in shape-only mode (set by oomharness predict)"},
    {"OOMH_SHAPE_STEPS", false, "N: a shape-only run stops after N training steps (set by oomharness predict --steps)"},
    {"OOMH_SHAPE_KERNELS", false, "gpu (default) or cpu: which kernels shape-only mode picks where they differ (docs/predict.md)"},
    {"OOMH_CHECK_EVENTS", false, "1: the Python package refuses event fields the C++ schema lacks (the project's tests set it)"},
    // The runner's own settings: jobs inherit them, so the shim must not warn about them.
    {"OOMH_HOME", false, "the oomharness source tree (runner: where the demo suite is)"},
    {"OOMH_INJECT_LIBRARY", false, "runner: the shim to preload"},
    {"OOMH_PYTHON_DIR", false, "runner: the Python probe's directory"},
    {"OOMH_RESERVE_PROGRAM", false, "runner: the reservation sidecar"},
    {"OOMH_CUDA_DOUBLE_DIR", false, "runner: the CPU driver double's directory (--simulate)"},
    {"OOMH_DEMO_SUITE", false, "runner: the demo suite"},
    {"OOMH_EMULATED_TRAINER", false, "runner: the emulated trainer the simulated demo runs"},
    {"OOMH_HEARTBEAT", false, "runner: seconds between heartbeat lines in non-terminal output (default 30)"},
    {"OOMH_PID_NAMESPACE", false, "runner: 0 keeps the jobs out of a PID namespace of the run's own (docs/cli.md)"},
    {"OOMH_NVML_LIBRARY", false, "runner: the NVML library it asks for the GPU's processes (default libnvidia-ml.so.1; a test's fake)"},
    // The Python package's settings (python/oomharness/harness.py, pytest_plugin.py).
    {"OOMH_BINARY", false, "Python package and pytest plugin: the oomharness command (default: the wheel's, else the first on PATH)"},
    {"OOMH_TORCH_PYTHON", false, "the wheel's console script: the Python it runs under, tried first for the demo's PyTorch jobs"},
    {"OOMH_PYTEST_INNER", false, "pytest plugin: set in the subprocess that runs a marked test under the harness"},
    {"OOMH_BUILD_DIR", false, "scripts: the build directory"},
    {"OOMH_JOBS", false, "scripts: parallel build and test jobs"},
    {"OOMH_DEMO_OUT", false, "scripts: where the demo writes its reports"},
    {"OOMH_SANITIZERS", false, "scripts/test.sh: 0 skips the sanitizer builds of the engine"},
    {"OOMH_FUZZ", false, "scripts/test.sh: 0 skips the fuzz targets"},
    {"OOMH_FUZZ_SECONDS", false, "scripts/fuzz.sh: seconds per fuzz target"},
    {"OOMH_FUZZ_BUILD_DIR", false, "scripts/fuzz.sh: the fuzz build directory"},
    {"OOMH_FUZZ_WORK", false, "scripts/fuzz.sh: where new inputs and crash files go"},
    {"OOMH_FUZZ_CXX", false, "scripts/fuzz.sh: the clang++ to build with"},
    // The tests' settings: CI runs every job of the test suite with these in its environment (a shim that
    // warned about them on stderr put a line before a job's own first line: hostile.jobs.bigout failed in CI).
    {"OOMH_REQUIRE_SLURM", false, "tests/slurm: 1 makes a Slurm that cannot start a failure, not a skip (scripts/test.sh sets it as root)"},
    {"OOMH_SLURM_DIR", false, "scripts/slurm-local.sh, tests/slurm: the local cluster's folder"},
    {"OOMH_SLURM_PORT", false, "scripts/slurm-local.sh: the local cluster's first port"},
    {"OOMH_SOURCE_DIR", false, "tests: the source tree"},
    {"OOMH_UPDATE_GOLDEN", false, "tests/reports: 1 rewrites the golden reports"},
    {"OOMH_BENCH_DIR", false, "bench/slurm_overhead.py: its working folder"},
};

struct Options {
  std::string plan, cap, control, events, shim_parent;
  CapCounting cap_counts = CapCounting::allocations;
  int64_t record_from = -1, record_to = -1;  // OOMH_RECORD_STEP: N or A..B; -1: none
  bool has_plan = false, has_cap = false, has_control = false, has_events = false, has_shim_parent = false;
  LogLevel log = LogLevel::warn;
  bool disable = false;
  bool any_set = false;               // some OOMH_ variable is set
  std::vector<std::string> problems;  // one line each: unknown names, bad values

  bool active() const { return !disable && (has_plan || has_cap || has_control || has_events); }
};

// Reads the options from an environment block (environ). Never throws.
Options read_options(char** envp) noexcept;

// The known option closest to `name` (edit distance at most 3), or "" when none is close.
std::string closest_option(std::string_view name);

}  // namespace oomh::inject
