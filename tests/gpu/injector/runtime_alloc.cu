// The plain CUDA runtime row of docs/compatibility.md. Prints RESULT lines like the Python checks.
//
//   runtime_alloc               under the shim with OOMH_CAP=4GiB (tests/gpu/injector/run.sh):
//     cap_mem_get_info          cudaMemGetInfo reports the cap
//     cudaMalloc_over_cap, cudaMalloc_under_cap, cudaMallocAsync_over_cap
//                               past the cap both fail with exactly cudaErrorMemoryAllocation; under it, success
//     nth_persistent            from the 3rd cudaMalloc of 64 MiB on, every one fails (a plan published through
//                               the control block, as the runner would)
//     step_fault                every allocation of step 3 fails: steps 0-5 each cudaMalloc 64 MiB, the step
//                               written into the control block; only step 3's allocation fails
//   runtime_alloc reservation   with no shim, beside the oomh-reserve sidecar (tests/gpu/reservation_checks.sh):
//     reservation               cudaMalloc of 6 GiB fails with cudaErrorMemoryAllocation
//
// The control block is reached through include/oomharness/control_block.h (build with -I include), so its
// layout lives in one place.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "oomharness/control_block.h"

namespace {
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

void result(const char* check, bool ok, const char* detail) {
  std::printf("RESULT runtime default %s %s %s\n", check, ok ? "PASS" : "FAIL", detail);
  std::fflush(stdout);
}

// Replaces the shim's fault plan; the shim reads it at the next allocation. The OOMH_CAP cap stays.
void publish(oomh::ControlBlock* cb, const char* plan) {
  oomh::control_block_publish_plan(cb, plan, static_cast<uint32_t>(std::strlen(plan)));
}

void cap_checks() {
  char detail[256];
  size_t free_bytes = 0, total = 0;
  cudaError_t e = cudaMemGetInfo(&free_bytes, &total);
  std::snprintf(detail, sizeof detail, "rc=%d free=%zu total=%zu", static_cast<int>(e), free_bytes, total);
  result("cap_mem_get_info", e == cudaSuccess && total == 4 * kGiB, detail);

  void* p = nullptr;
  e = cudaMalloc(&p, 5 * kGiB);
  std::snprintf(detail, sizeof detail, "rc=%d (%s)", static_cast<int>(e), cudaGetErrorName(e));
  result("cudaMalloc_over_cap", e == cudaErrorMemoryAllocation, detail);
  if (e == cudaSuccess) cudaFree(p);
  cudaGetLastError();  // clear the sticky-free error state for the next check

  e = cudaMalloc(&p, 1 * kGiB);
  std::snprintf(detail, sizeof detail, "rc=%d (%s)", static_cast<int>(e), cudaGetErrorName(e));
  result("cudaMalloc_under_cap", e == cudaSuccess, detail);
  if (e == cudaSuccess) cudaFree(p);

  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  p = nullptr;
  e = cudaMallocAsync(&p, 5 * kGiB, stream);
  std::snprintf(detail, sizeof detail, "rc=%d (%s)", static_cast<int>(e), cudaGetErrorName(e));
  result("cudaMallocAsync_over_cap", e == cudaErrorMemoryAllocation, detail);
  if (e == cudaSuccess) cudaFreeAsync(p, stream);
  cudaGetLastError();
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

void nth_persistent(oomh::ControlBlock* cb) {
  publish(cb, R"({"rules":[{"name":"runtime-nth","when":{"nth":3,"min_size":"1MiB"},"fail":{"forever":true}}]})");
  constexpr int kCalls = 6;
  void* held[kCalls] = {};
  int succeeded = 0, first_failure = 0;  // first_failure: 1-based call number, 0 = none
  cudaError_t first_error = cudaSuccess;
  bool persistent = true;  // every call after the first failure failed too, with the same code
  for (int i = 0; i < kCalls; ++i) {
    cudaError_t e = cudaMalloc(&held[i], 64 * kMiB);
    if (e == cudaSuccess) {
      ++succeeded;
      if (first_failure) persistent = false;
      continue;
    }
    held[i] = nullptr;
    cudaGetLastError();
    if (!first_failure) {
      first_failure = i + 1;
      first_error = e;
    } else if (e != first_error) {
      persistent = false;
    }
  }
  for (void* p : held)
    if (p) cudaFree(p);
  publish(cb, "{}");
  char detail[256];
  std::snprintf(detail, sizeof detail, "allocations_before_oom=%d rc=%d (%s) from call %d of %d on, %s", succeeded,
                static_cast<int>(first_error), cudaGetErrorName(first_error), first_failure, kCalls,
                persistent ? "every later call failed too" : "NOT every later call failed");
  result("nth_persistent",
         succeeded == 2 && first_failure == 3 && first_error == cudaErrorMemoryAllocation && persistent, detail);
}

void step_fault(oomh::ControlBlock* cb) {
  publish(cb, R"({"rules":[{"name":"runtime-step-3","when":{"step":3,"every":1,"min_size":"1MiB"},"fail":{"times":1}}]})");
  constexpr int kSteps = 6;
  cudaError_t rc[kSteps];
  void* held[kSteps] = {};
  for (int step = 0; step < kSteps; ++step) {
    cb->step.store(step, std::memory_order_relaxed);  // what oomh::probe::begin_step does
    rc[step] = cudaMalloc(&held[step], 64 * kMiB);
    if (rc[step] != cudaSuccess) {
      held[step] = nullptr;
      cudaGetLastError();
    }
  }
  cb->step.store(oomh::kUnknownStep, std::memory_order_relaxed);
  for (void* p : held)
    if (p) cudaFree(p);
  publish(cb, "{}");
  bool ok = true;
  char failed[64] = "";
  for (int step = 0; step < kSteps; ++step) {
    ok = ok && (step == 3 ? rc[step] == cudaErrorMemoryAllocation : rc[step] == cudaSuccess);
    if (rc[step] != cudaSuccess)
      std::snprintf(failed + std::strlen(failed), sizeof failed - std::strlen(failed), "%s%d", *failed ? "," : "", step);
  }
  char detail[256];
  std::snprintf(detail, sizeof detail, "failed_steps=%s rc=%d (%s) at step 3; the other steps' cudaMalloc succeeded: %s",
                *failed ? failed : "none", static_cast<int>(rc[3]), cudaGetErrorName(rc[3]), ok ? "yes" : "no");
  result("step_fault", ok, detail);
}

void reservation() {
  size_t free_bytes = 0, total = 0;
  cudaError_t info = cudaMemGetInfo(&free_bytes, &total);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, 6 * kGiB);
  char detail[256];
  std::snprintf(detail, sizeof detail, "cudaMalloc(6 GiB) rc=%d (%s) with %.2f GiB free (cudaMemGetInfo rc=%d)",
                static_cast<int>(e), cudaGetErrorName(e), static_cast<double>(free_bytes) / kGiB, static_cast<int>(info));
  result("reservation", e == cudaErrorMemoryAllocation, detail);
  if (e == cudaSuccess) cudaFree(p);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "reservation") == 0) {
    reservation();
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: runtime_alloc [reservation]\n");
    return 2;
  }
  cap_checks();
  // The shim created its own control block and named it in OOMH_CONTROL before main.
  const char* name = std::getenv("OOMH_CONTROL");
  oomh::ControlBlock* cb = name && *name ? oomh::control_block_open(name) : nullptr;
  if (!cb) {
    char detail[200];
    std::snprintf(detail, sizeof detail, "cannot map the control block '%s' (is the shim preloaded?)", name ? name : "");
    result("nth_persistent", false, detail);
    result("step_fault", false, detail);
    return 0;
  }
  nth_persistent(cb);
  step_fault(cb);
  oomh::control_block_close(cb);
  return 0;
}
