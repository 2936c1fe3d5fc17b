#pragma once
// The memory budget of a job (`oomharness budget`, docs/sweep.md): the runs of the bisection on the cap
// and what it concluded, with the "fits on" table for common GPU sizes. budget.json is its JSON form.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/reports/result.h"

namespace oomh {

inline constexpr int kBudgetSchemaVersion = 1;

struct BudgetRun {
  std::optional<uint64_t> cap;    // unset: the uncapped run that measured the peak
  std::optional<int64_t> batch;   // the {batch} of a batch search
  bool completed = false;         // the job passed its checks under this cap
  // ... and the training code met no OOM (Note [Fits means no OOM] in oomharness/policies/fit.h): the
  // search goes by this, not by `completed`.
  bool fits = false;
  std::string oom;                // the first OOM the code met: "out of memory at step 1 (batch 2048), caught"
  bool recovered = false;         // it completed after that OOM
  int64_t recovered_batch = -1;   // ... at this batch (the last step's), -1: not reported
  bool timed_out = false;         // the runner stopped it at --timeout: whether it fits is unknown
  JobStatus status = JobStatus::passed;
  std::string message;
  uint64_t peak = 0;              // bytes held at the peak, as the cap counts them
  double seconds = 0;
};

struct BudgetResult {
  int schema_version = kBudgetSchemaVersion;
  std::string job;
  std::vector<std::string> command;
  std::string counting;           // "allocations" or "footprint"
  bool simulated = false;         // the CPU driver double: figures of the emulated job, not of a GPU
  bool virtual_device = false;    // the virtual CUDA device: figures modelled from PyTorch's allocator
  uint64_t tolerance = 0;
  uint64_t low = 0;               // the largest cap known (or assumed, when never run) not to be enough
  std::optional<uint64_t> need;   // the smallest cap known to be enough; unset when none was found
  int run_bound = 0;              // ceil(log2(range / tolerance)) + 2
  std::vector<BudgetRun> runs;
  // A batch search (--batch-under): the cap every run had, and the largest batch that completed under it
  // (unset when not even the smallest did); `batch_limit` is the largest batch considered.
  std::optional<uint64_t> batch_cap;
  std::optional<int64_t> batch;
  int64_t batch_limit = 0;
  // Why the search stopped before its answer (Note [A search's runs] in runner/src/app/search.h): "the
  // search was cut short by an interrupt ...", "... timed out ..."; empty when it did not. The bounds
  // (low and need, or batch and the runs) are then what it had found so far.
  std::string cut_short;
};

// What one run came to, in the table's words: "fits", "recovered at batch 1024", "not completed (failed)",
// "timed out".
std::string budget_run_outcome(const BudgetRun& r);

// Common GPU sizes of the "fits on" table, in GiB.
inline constexpr int kFitsOnGiB[] = {16, 24, 40, 48, 80, 141};

// The headline: "needs 9.00 MiB (more than 8.50 MiB, to 1.00 MiB), counting allocations; 6 runs (at most 7)";
// "largest batch under 300.00 MiB: 2048 (batch 2049 recovered at batch 1024: it does not fit), ...".
std::string budget_sentence(const BudgetResult& b);
// The runs, the headline, the "fits on" table and what the figures count.
std::string render_budget_text(const BudgetResult& b);
// budget.json, pretty-printed, ending in a newline.
std::string render_budget_json(const BudgetResult& b);

}  // namespace oomh
