// The emulated trainer's caching allocator over one driver entry point (see device_memory.h).
#include "device_memory.h"

#include <algorithm>

namespace trainer {

namespace {
constexpr size_t kPitchWidth = 64 * 1024;  // --entry pitch: rows of 64 KiB
constexpr size_t kTouched = 64;            // bytes written into each new block, so the memory is used
}  // namespace

DeviceMemory::DeviceMemory(const DriverApi& api, Entry entry, int device, bool retry_once)
    : api_(api), entry_(entry), device_(device), retry_once_(retry_once) {
  if (entry_ == Entry::async) check(api_.stream_create(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate", 0);
  if (entry_ == Entry::vmm) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
    check(api_.mem_granularity(&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity", 0);
  }
}

DeviceMemory::~DeviceMemory() {
  try {
    empty_cache();
  } catch (const std::exception&) {
    // At exit the process gives everything back anyway; a failing free must not turn into terminate().
  }
  if (stream_) api_.stream_destroy(stream_);
}

void DeviceMemory::check(CUresult r, const char* what, size_t bytes) {
  if (r == CUDA_SUCCESS) return;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemory(bytes);
  throw DriverError(std::string(what) + ": " + error_name(api_, r));
}

Block DeviceMemory::allocate(size_t bytes) {
  auto it = std::find_if(cache_.begin(), cache_.end(), [&](const Block& b) { return b.size == bytes; });
  if (it != cache_.end()) {
    Block b = *it;
    cache_.erase(it);
    cached_bytes_ -= b.reserved;
    allocated_ += b.reserved;
    return b;
  }
  Block b;
  try {
    b = take(bytes);
  } catch (const OutOfMemory&) {
    if (!retry_once_) throw;
    empty_cache();
    b = take(bytes);
  }
  allocated_ += b.reserved;
  check(api_.memset_d8(b.ptr, 0x5a, std::min(bytes, kTouched)), "cuMemsetD8_v2", bytes);
  return b;
}

void DeviceMemory::release(const Block& b) {
  allocated_ -= b.reserved;
  cached_bytes_ += b.reserved;
  cache_.push_back(b);
}

void DeviceMemory::empty_cache() {
  for (const Block& b : cache_) give_back(b);
  cache_.clear();
  cached_bytes_ = 0;
}

Block DeviceMemory::take(size_t bytes) {
  Block b;
  b.size = bytes;
  b.reserved = bytes;
  switch (entry_) {
    case Entry::alloc:
      check(api_.mem_alloc(&b.ptr, bytes), "cuMemAlloc_v2", bytes);
      break;
    case Entry::async:
      check(api_.mem_alloc_async(&b.ptr, bytes, stream_), "cuMemAllocAsync", bytes);
      break;
    case Entry::managed:
      check(api_.mem_alloc_managed(&b.ptr, bytes, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged", bytes);
      break;
    case Entry::pitch: {
      size_t pitch = 0;
      size_t rows = (bytes + kPitchWidth - 1) / kPitchWidth;
      check(api_.mem_alloc_pitch(&b.ptr, &pitch, kPitchWidth, rows, 4), "cuMemAllocPitch_v2", bytes);
      b.reserved = pitch * rows;
      break;
    }
    case Entry::vmm: {
      size_t size = (bytes + granularity_ - 1) / granularity_ * granularity_;
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
      check(api_.mem_create(&b.handle, size, &prop, 0), "cuMemCreate", bytes);
      CUresult r = api_.mem_address_reserve(&b.ptr, size, 0, 0, 0);
      if (r == CUDA_SUCCESS) r = api_.mem_map(b.ptr, size, 0, b.handle, 0);
      if (r == CUDA_SUCCESS) {
        CUmemAccessDesc access{};
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = api_.mem_set_access(b.ptr, size, &access, 1);
      }
      if (r != CUDA_SUCCESS) {
        if (b.ptr) {
          api_.mem_unmap(b.ptr, size);
          api_.mem_address_free(b.ptr, size);
        }
        api_.mem_release(b.handle);
        check(r, "cuMemAddressReserve/cuMemMap/cuMemSetAccess", bytes);
      }
      b.reserved = size;
      break;
    }
  }
  return b;
}

void DeviceMemory::give_back(const Block& b) {
  switch (entry_) {
    case Entry::alloc:
    case Entry::managed:
    case Entry::pitch:
      check(api_.mem_free(b.ptr), "cuMemFree_v2", 0);
      break;
    case Entry::async:
      check(api_.mem_free_async(b.ptr, stream_), "cuMemFreeAsync", 0);
      check(api_.stream_synchronize(stream_), "cuStreamSynchronize", 0);
      break;
    case Entry::vmm:
      check(api_.mem_unmap(b.ptr, b.reserved), "cuMemUnmap", 0);
      check(api_.mem_release(b.handle), "cuMemRelease", 0);
      check(api_.mem_address_free(b.ptr, b.reserved), "cuMemAddressFree", 0);
      break;
  }
}

}  // namespace trainer
