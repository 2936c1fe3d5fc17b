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
};

// Common GPU sizes of the "fits on" table, in GiB.
inline constexpr int kFitsOnGiB[] = {16, 24, 40, 48, 80, 141};

// The headline: "needs 9.00 MiB (between 8.50 MiB and 9.00 MiB), counting allocations; 6 runs (at most 7)".
std::string budget_sentence(const BudgetResult& b);
// The runs, the headline, the "fits on" table and what the figures count.
std::string render_budget_text(const BudgetResult& b);
// budget.json, pretty-printed, ending in a newline.
std::string render_budget_json(const BudgetResult& b);

}  // namespace oomh
