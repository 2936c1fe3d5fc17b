#pragma once
// Note [A probe that pays for what is checked]
// The Python probe's parts cost the job time at every step: PyTorch's global module hooks send every module
// call through its slow path, the loss's `.item()` and a GPU batch's digest wait for the step's kernels, the
// memory figures read the allocator's statistics. A job whose checks need none of that (exit, completes,
// oom_visible, graceful_exit, no_hang, peak_below) should not pay for it. So each check says which kinds of
// evidence it reads (PolicyInfo::evidence), the runner passes the union for a job's checks to the job
// (OOMH_EVIDENCE, runner/src/exec/launch.cpp: job_evidence in plan.cpp), and the probe installs only the parts
// that gather those (PARTS in python/oomharness/probe/__init__.py). What every job gets whatever its checks:
// its steps (the step event and the block's step, so that step faults fire), its OOMs (caught or not) and
// what held the memory at each OOM. A job run by hand, or with OOMH_EVIDENCE=all, gets every part.

#include <cstdint>

#include "oomharness/name_table.h"

namespace oomh {

enum class EvidenceKind : uint32_t { batches, data, losses, memory, grads, evaluation, checkpoints, phases };

inline constexpr NameTable<EvidenceKind, 8> kEvidenceKinds{{
    {EvidenceKind::batches, "batches", "the batch size of each top-level forward and the samples of each step"},
    {EvidenceKind::data, "data", "what each step trained on: the samples' digests (Note [A step is its data])"},
    {EvidenceKind::losses, "losses", "each step's loss (on a GPU, a wait for the step's kernels)"},
    {EvidenceKind::memory, "memory", "memory allocated and reserved at each step's end, and breakdowns where it grew"},
    {EvidenceKind::grads, "grads", "whether the gradients were cleared before each optimizer step"},
    {EvidenceKind::evaluation, "evaluation", "evaluation forwards, with or without a graph, and what the loop left"},
    {EvidenceKind::checkpoints, "checkpoints", "torch.save and torch.load by content, and the model's state after a load"},
    {EvidenceKind::phases, "phases", "the training phase in the control block (forward, backward, optimizer, ...)"},
}};

}  // namespace oomh
