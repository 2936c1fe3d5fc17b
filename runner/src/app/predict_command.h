#pragma once
// `oomharness predict` (predict_command.cpp, docs/predict.md): its flags and its command, beside commands.h's.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "app/commands.h"

namespace oomh::app {

// Note [Flags that mean something for a prediction]
// predict takes, of the job table's flags (Note [One table of job fields] in suite/job_table.h), only these:
// a prediction always runs on the virtual device (no --device, --simulate), judges one thing (no --expect,
// --target-step, --strict), restarts nothing (no --restart, --restart-on, --clear-faults) and writes one
// document (--json; no --junit, --html, --markdown, --perfetto, --summary). `predict --help` lists these and
// predict's own flags; any other is refused by the command line as an unknown flag (exit 4).
inline constexpr std::string_view kPredictJobFlags[] = {"--name", "--env", "--timeout", "--cap", "--cap-counts",
                                                        "--step-base"};

// exec's flags describe the job; these, what to predict.
struct PredictArgs {
  ExecArgs exec;                      // --cap: predict under it (the OOM the job would see); --json: the prediction
  std::optional<int64_t> steps;       // --steps N: stop the run after N training steps (OOMH_SHAPE_STEPS)
  std::optional<int64_t> batch;       // --batch N: written into {batch} for the prediction (default 1)
  std::string batch_under;            // --batch-under CAP: the largest {batch} that completes under CAP
  int64_t max_batch = 4096;           // --max-batch
};

ExitCode command_predict(const PredictArgs& args, std::ostream& out, std::ostream& err);

}  // namespace oomh::app
