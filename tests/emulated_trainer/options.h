#pragma once
// The emulated trainer's command line. Every flag is listed in kUsage; an unknown flag or a bad value is
// a usage error (exit 2) that names the flag.
#include <cstdint>
#include <optional>
#include <string>

#include "device_memory.h"
#include "driver_api.h"

namespace trainer {

enum class Recovery { none, halve, retry, checkpoint };

struct Options {
  int64_t steps = 10;                  // --steps: the target step (steps are numbered from 1)
  int64_t batch_size = 8;              // --batch-size
  int64_t min_batch = 1;               // --min-batch: halve never goes below it
  uint64_t bytes_per_sample = 1 << 20; // --bytes-per-sample
  int64_t step_ms = 0;                 // --step-ms: sleep per step
  uint64_t leak_per_step = 0;          // --leak-per-step: bytes kept for ever after each step
  int64_t eval_every = 0;              // --eval-every K: an eval pass at 2x batch after every K-th step
  int64_t hang_at_step = -1;           // --hang-at-step
  int64_t crash_at_step = -1;          // --crash-at-step
  int device = 0;                      // --device
  Entry entry = Entry::alloc;          // --entry
  Resolve resolve = Resolve::procaddress;  // --resolve
  Recovery recovery = Recovery::none;  // --recovery
  int max_retries = 3;                 // --max-retries
  bool skip_failed_batch = false;      // --skip-failed-batch (broken halving)
  bool retry_without_freeing = false;  // --retry-without-freeing (broken retry)
  bool retry_in_except = false;        // --retry-in-except (broken retry)
  bool like_pytorch = false;           // --like-pytorch: the allocator retries once, faulted steps flush
  bool resume_from_zero = false;       // --resume-from-zero (broken resume)
  std::string checkpoint;              // --checkpoint PATH
  int64_t checkpoint_every = 0;        // --checkpoint-every K
};

extern const char* const kUsage;

// Parses argv. On error returns std::nullopt and sets `error` to a message naming the flag.
std::optional<Options> parse_options(int argc, char** argv, std::string& error);

}  // namespace trainer
