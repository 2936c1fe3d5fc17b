#pragma once
// What held the memory and why, in words for a person: the findings and breakdowns of a job result
// (docs/diagnosis.md). The terminal, the Markdown and JUnit writers and `oomharness explain` all say it
// through these, so that they say it the same way.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/reports/result.h"

namespace oomh {

// "finding (kept_with_graph): tensors made at train.py:216 ..." for each finding, in priority order.
std::vector<std::string> finding_lines(const JobResult& job);
// "at the OOM in step 1 (forward, batch 64), attempt 1: 358.43 MiB allocated = parameters 14.18 MiB +
// gradients 0 bytes + optimizer state 0 bytes + workspaces 32.00 MiB + other live tensors 312.25 MiB;
// cached but free 29.57 MiB" for one breakdown (JobResult::breakdowns' element).
std::string breakdown_sentence(const nlohmann::json& b);
// "64x128x1024 float32, 32.00 MiB, made at train.py:79 < train.py:119" for each of its largest tensors.
std::vector<std::string> largest_tensor_lines(const nlohmann::json& b, size_t max = 5);
// The whole explanation of a job, as `oomharness explain` prints it.
std::string explain_job(const std::string& suite, const JobResult& job);

}  // namespace oomh
