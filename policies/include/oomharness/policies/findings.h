#pragma once
// Findings: why memory ran out or grew, each a named rule with one sentence a user can act on, naming the
// line where the probe knew it (docs/diagnosis.md). Checks pass or fail what the suite asked; findings
// explain, whatever was asked. They are read from the probe's `step`, `eval_forward` and
// `memory_breakdown` events (docs/events.md), in the priority order of the usual OOM diagnosis:
//   0. oom_as_other_error  an OOM reached the code as another error than OutOfMemoryError (cuBLAS, NCCL, ...)
//   1. grads_not_cleared   gradients not cleared between optimizer steps
//   2. kept_with_graph     tensors kept with their autograd graph, step after step
//   3. batch_too_large     activations dominate at the OOM: per-sample cost and the largest batch that fits
//   4. eval_with_graph     evaluation building a graph (grad enabled), or run in train mode
//   5. kept_after_loop     tensors the loop left bound still alive when an evaluation starts after it

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/evidence.h"
#include "oomharness/policies/trace.h"

namespace oomh {

struct Finding {
  std::string rule;      // "kept_with_graph"
  std::string sentence;  // "train.py:216 keeps ... +16.00 MiB per step ...: keep loss.detach() instead"
  std::string site;      // "train.py:216", the line that made the tensors; empty when unknown
  int attempt = 0;
  double t = 0;          // wall-clock seconds in a trace; seconds since the job started in a result
  std::string kept_at;   // "train.py:254", the line that keeps them (appends, assigns); empty when unknown
};

struct DiagnoseOptions {
  // kept_with_graph: a user's absolute limit of growth per step; unset, a leak is a trend (Note [A leak is a
  // trend] in policies/src/checks_memory.cpp) adding leak_share of the held memory by leak_steps.
  std::optional<uint64_t> growth_per_step;
  uint64_t kept_after_loop = 1024 * 1024;  // kept_after_loop: the least bytes left alive that count
  double leak_share = 0.1;
  int64_t leak_steps = -1;                 // the step to extrapolate to; -1: the job's target step
};

// The rules' names, in priority order.
const std::vector<std::string>& finding_rules();

// Note [Findings on every job]
// Findings explain whatever a job was asked, so the evidence they read is gathered for every job, beside what
// its checks read (JobSpec::evidence): the batch size of each forward (batch_too_large), the evaluation's first
// forward (eval_with_graph, kept_after_loop) and whether gradients were cleared (grads_not_cleared). Each is
// cheap in the lean probe: the model's own forwards, not every module's (Note [Which forward is a model's] in
// python/oomharness/probe/forwards.py), and a few attribute reads per optimizer step. Not here: the memory at
// each step's end that kept_with_graph reads (on a GPU, a read of the allocator's statistics per step), which a
// job gets with memory_stable, the check that judges a leak.
inline constexpr EvidenceKind kFindingsEvidence[] = {EvidenceKind::batches, EvidenceKind::evaluation,
                                                     EvidenceKind::grads};
// Every finding of the trace, in priority order (one per rule at most).
std::vector<Finding> diagnose(const Trace& trace, const DiagnoseOptions& options = {});

// What held the memory, from a `memory_breakdown` event: "parameters 23.82 MiB, gradients 7.82 MiB, optimizer
// state 0 B and workspaces 256.00 KiB (31.89 MiB that no batch size changes) and 21.50 KiB of activations and
// other tensors (the allocator's segments held 44.00 MiB), under a total of 48.00 MiB". `fixed` gets the
// bytes no batch size changes.
std::string memory_holders(const Event& breakdown, double* fixed = nullptr);

void to_json(nlohmann::json& j, const Finding& f);
void from_json(const nlohmann::json& j, Finding& f);

}  // namespace oomh
