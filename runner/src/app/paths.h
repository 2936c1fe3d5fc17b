#pragma once
// Where the harness finds its own pieces (the shim, the Python probe, the sidecar, the CPU driver double).
//
// Note [Finding the harness's pieces]
// The command runs from a build tree (<build>/runner/oomharness), from an install (<prefix>/bin) or
// inside a test program (<build>/tests/runner/app/...). Each piece is looked for in the folders above the
// executable, a few levels up, at the places a build and an install put it; an OOMH_* variable names it
// outright. The first existing file wins, and an error lists every place that was tried.

#include <optional>
#include <string>
#include <vector>

#include "oomharness/runner/job_runner.h"

namespace oomh::app {

struct Found {
  std::optional<std::string> path;
  std::vector<std::string> tried;
  std::string tried_text() const;  // "looked in a, b, c"
};

std::string executable_dir();
Found find_inject_library();
Found find_python_probe_dir();
Found find_reserve_program();
Found find_driver_double_dir();
// The demo suite: $OOMH_HOME, then an installed tree's share/oomharness, then the source tree this was built from.
Found find_demo_suite(bool simulated);
// The folder of the emulated trainer, which the simulated demo runs (put on PATH for its jobs).
Found find_emulated_trainer_dir();
// The folder of a `python3` that can import torch, for the simulated demo's PyTorch jobs (they call
// `python3`): $OOMH_TORCH_PYTHON (the wheel's console script sets it to the Python it runs under), the first
// python3 on PATH, then Debian's /usr/bin/python3 (when the first is another, e.g. pyenv's). Each is asked
// to import torch (one process, at most 60 s).
Found find_torch_python_dir();

// The shim (required), the probe and the sidecar (optional), and the driver double when `simulate`.
// Returns the error text when a required piece is missing.
// `virtual_device`: some job runs on the virtual CUDA device, which needs the driver double and the probe.
std::optional<std::string> resolve_paths(bool simulate, HarnessPaths& paths, bool virtual_device = false);

}  // namespace oomh::app
