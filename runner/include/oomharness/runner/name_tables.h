#pragma once
// The runner's name tables (Note [Name tables] in oomharness/name_table.h): what restarts a job, where its
// CUDA work runs, where the jobs run, and what the command's exit status says. The suite reader, the
// command line, the job runner and the results read these; tests/runner/model/name_tables_test.cpp checks
// the copies outside C++ (the man page, the bash completion, the Python package, docs/suite-format.md).

#include "oomharness/name_table.h"
#include "oomharness/runner/app.h"
#include "oomharness/runner/backend.h"
#include "oomharness/runner/suite.h"

namespace oomh {

// `restart: {on: [...]}` and --restart-on: what ends an attempt in a way that asks for another.
enum class RestartOn { oom, nonzero, signal, any };
inline constexpr NameTable<RestartOn, 4> kRestartReasons{{
    {RestartOn::oom, "oom", "the attempt died of an out-of-memory error (the default)"},
    {RestartOn::nonzero, "nonzero", "the attempt exited with a code other than 0"},
    {RestartOn::signal, "signal", "a signal killed the attempt"},
    {RestartOn::any, "any", "the attempt exited non-zero or a signal killed it"},
}};

// `device:` and --device (DeviceChoice).
inline constexpr NameTable<DeviceChoice, 3> kDevices{{
    {DeviceChoice::automatic, "auto", "the job's own choice: the virtual device for Python jobs under --simulate, else the GPU"},
    {DeviceChoice::gpu, "gpu", "the GPU (the CPU driver double under --simulate)"},
    {DeviceChoice::virtual_device, "virtual", "the virtual CUDA device: PyTorch on the CPU, a modelled caching allocator"},
}};

// `backend:` and --backend (Note [Backends] in backend.h).
inline constexpr NameTable<BackendKind, 2> kBackends{{
    {BackendKind::local, "local", "this machine (the default)"},
    {BackendKind::slurm, "slurm", "a Slurm cluster, one Slurm job each (docs/slurm.md)"},
}};

// The command's exit status, as pytest's (ExitCode); the Python harness names them EXIT_OK ... EXIT_NOTHING_TESTED.
inline constexpr NameTable<ExitCode, 6> kExitCodes{{
    {ExitCode::ok, "ok", "the jobs passed"},
    {ExitCode::tests_failed, "tests_failed", "a job failed or erred (compare: a regression)"},
    {ExitCode::interrupted, "interrupted", "interrupted"},
    {ExitCode::internal_error, "internal_error", "internal error"},
    {ExitCode::usage_error, "usage_error", "usage or suite error"},
    {ExitCode::nothing_tested, "nothing_tested", "nothing was tested (no job selected, or none passed or failed)"},
}};

}  // namespace oomh
