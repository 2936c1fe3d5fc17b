// A plain CUDA runtime program under the shim with OOMH_CAP=4GiB: cudaMemGetInfo reports the cap, and
// cudaMalloc / cudaMallocAsync past it fail with exactly cudaErrorMemoryAllocation.
// Built and run by tests/gpu/injector/run.sh; prints RESULT lines like the Python checks.
#include <cuda_runtime.h>

#include <cstdio>

namespace {
constexpr size_t kGiB = size_t{1} << 30;

void result(const char* check, bool ok, const char* detail) {
  std::printf("RESULT runtime default %s %s %s\n", check, ok ? "PASS" : "FAIL", detail);
}
}  // namespace

int main() {
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
  return 0;
}
