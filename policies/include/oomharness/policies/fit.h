#pragma once
// Whether a run fits: in a cap, at a batch. `budget`, `predict --batch-under` and `predict --cap` ask it
// of every run they make (docs/sweep.md, docs/predict.md).
//
// Note [Fits means no OOM]
// A job that catches an out-of-memory error and recovers (halves its batch, empties the cache and retries)
// completes under a cap its batch does not fit in: what completed was a smaller batch, or a second try.
// That is what the recovery checks ask about; a budget asks where the job needs no recovery. So a run fits
// when it passed its checks and the training code met no OOM in it, caught or not, by the one rule of what
// the code saw (Note [OOMs the code saw] in policies/src/trace_view.h: the probe's `oom` events, an attempt
// that died of one, an OOM printed after a refusal of the shim; a visible injection is one of them). A
// refusal the framework absorbed unseen (the caching allocator freed its cache and retried) is not an OOM:
// the allocation was served, as it would have been on a GPU. A run that met an OOM and still passed is
// said to have "recovered at batch M", M being the batch of the last step it completed (issue 40: a
// halving trainer "fitted" batch 3072 under a cap where every batch above 2048 ran out and halved itself).

#include <cstdint>
#include <optional>
#include <string>

#include "oomharness/policies/trace.h"

namespace oomh {

// The first OOM the training code met in a run, and what the run did after it.
struct OomMet {
  int attempt = 0;
  int64_t step = -1;         // the step in progress, -1: unknown
  int64_t batch = -1;        // its batch size, -1: unknown
  std::string phase;         // empty: unknown
  bool caught = false;       // the code caught it and went on
  std::string exception;     // the type it reached the code as, when the probe said
  int64_t steps_after = 0;   // steps completed after it (in its attempt or a later one)
  int64_t last_batch = -1;   // the batch of the last of them, -1: none, or not reported
};

// The first OOM the training code met in the trace (Note [Fits means no OOM]); nullopt when it met none.
std::optional<OomMet> first_oom_met(const Trace& trace);

// "out of memory at step 1 (batch 4096, forward), caught"
std::string oom_met_text(const OomMet& oom);
// What a run that met `oom` and passed is called: "recovered at batch 2048"; "recovered" when the batch
// it went on at is unknown.
std::string recovered_text(const OomMet& oom);

}  // namespace oomh
