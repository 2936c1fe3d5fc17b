#pragma once
// The emulated trainer's allocator: takes device memory through one entry point (--entry) and keeps freed
// blocks in a cache the way a framework's caching allocator does, until empty_cache gives them back.
//
// Reuse is by exact size only. That is on purpose: memory cached at one size (say an eval pass at a
// larger batch) cannot serve a training step at another, so it stays reserved until empty_cache, which is
// the situation "empty the cache and retry" exists for.
//
// With retry_once (--like-pytorch) a failed driver allocation empties the cache and is tried once more
// before OutOfMemory is raised, as PyTorch's caching allocator does: one injected failure is absorbed, and
// when the training code sees the error the cache is already empty.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "driver_api.h"

namespace trainer {

enum class Entry { alloc, async, vmm, managed, pitch };

// The driver said CUDA_ERROR_OUT_OF_MEMORY: the training code may recover.
struct OutOfMemory : std::runtime_error {
  size_t size;
  explicit OutOfMemory(size_t bytes) : std::runtime_error("CUDA_ERROR_OUT_OF_MEMORY"), size(bytes) {}
};

// Any other driver error: fatal.
struct DriverError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Block {
  CUdeviceptr ptr = 0;
  size_t size = 0;                         // what the program asked for
  size_t reserved = 0;                     // what it holds on the device (rounded for vmm and pitch)
  CUmemGenericAllocationHandle handle = 0; // vmm only
};

class DeviceMemory {
 public:
  DeviceMemory(const DriverApi& api, Entry entry, int device, bool retry_once = false);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  Block allocate(size_t bytes);   // from the cache, or the driver; throws OutOfMemory or DriverError
  void release(const Block& b);   // back to the cache
  void empty_cache();             // the cache goes back to the driver
  int64_t allocated() const { return static_cast<int64_t>(allocated_); }
  int64_t reserved() const { return static_cast<int64_t>(allocated_ + cached_bytes_); }
  int64_t cached() const { return static_cast<int64_t>(cached_bytes_); }  // what empty_cache gives back

 private:
  Block take(size_t bytes);
  void give_back(const Block& b);
  void check(CUresult r, const char* what, size_t bytes);

  const DriverApi& api_;
  Entry entry_;
  int device_;
  bool retry_once_;
  CUstream stream_ = nullptr;
  size_t granularity_ = 0;
  std::vector<Block> cache_;
  size_t allocated_ = 0;
  size_t cached_bytes_ = 0;
};

}  // namespace trainer
