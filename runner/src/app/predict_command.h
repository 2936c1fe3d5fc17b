#pragma once
// `oomharness predict` (predict_command.cpp, docs/predict.md): its flags and its command, beside commands.h's.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "app/commands.h"

namespace oomh::app {

// exec's flags describe the job; these, what to predict.
struct PredictArgs {
  ExecArgs exec;                      // --cap: predict under it (the OOM the job would see); --json: the prediction
  std::optional<int64_t> batch;       // --batch N: written into {batch} for the prediction (default 1)
  std::string batch_under;            // --batch-under CAP: the largest {batch} that completes under CAP
  int64_t max_batch = 4096;           // --max-batch
};

ExitCode command_predict(const PredictArgs& args, std::ostream& out, std::ostream& err);

}  // namespace oomh::app
