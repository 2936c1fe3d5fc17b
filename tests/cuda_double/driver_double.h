#pragma once
// The CUDA driver double: the state behind the entry points that entry_points.cpp exports as libcuda.so.1.
//
// Note [Why a driver double]
// CI has no GPU, yet the harness must be tested through the real preload path: a job that dlopens
// "libcuda.so.1", resolves cuGetProcAddress_v2 and allocates through what it hands out. This library stands
// in for the driver there (tests put its folder first in LD_LIBRARY_PATH). It must behave like the driver
// where the harness can tell: the same exported (versioned) symbol names, the same cuGetProcAddress
// mapping from base name and version to symbol, the same error codes (exactly CUDA_ERROR_OUT_OF_MEMORY when
// the device is full), and cuMemGetInfo figures that add up. It does not run kernels.
//
// Memory is host memory: every allocation is an anonymous MAP_NORESERVE mapping that is never touched here,
// so an 8 GiB "device" costs nothing until a program writes to it. Sizes are rounded up to 512 bytes the way
// the driver rounds cuMemAlloc, and each device's bytes in use are counted against CUDA_DOUBLE_MEMORY.
// One mutex guards the driver's shared state: the double is not the shim, and simple is worth more here than
// fast. Two things stay off it, as in the driver: the current context is per thread (a thread-local stack,
// so cuCtxGetDevice on a primary context takes no lock), and "is cuInit done" is one atomic flag that cuInit
// sets last. Every allocation asks both, and so does the shim's hook (for the device), so a lock there would
// be charged twice to every hooked call and make the shim look slower than it is against the real driver.
//
// Like the driver, a context takes device memory of its own: CUDA_DOUBLE_CONTEXT_MEMORY bytes from when a
// device's first context (primary or created) exists in the process until its last one goes, shown in
// cuMemGetInfo's free figure and in what the NVML double reports for the process (oomh_cuda_double_used).
//
// Environment: CUDA_DOUBLE_MEMORY (bytes per device, "8GiB" by default, any size oomh::parse_bytes reads),
// CUDA_DOUBLE_DEVICES (device count, 1 by default) and CUDA_DOUBLE_CONTEXT_MEMORY (0 by default). All are
// read once, by cuInit.
//
// Pinned host memory (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister, a host cuMemCreate) is real host
// memory here too, counted against CUDA_DOUBLE_HOST_MEMORY (the pinned limit, "64GiB" by default): past it
// the double answers CUDA_ERROR_OUT_OF_MEMORY as the driver does when it cannot pin. Freeing or
// unregistering a pointer the double did not pin, or twice, is CUDA_ERROR_INVALID_VALUE, as in the driver.

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace cuda_double {

inline constexpr int kDriverVersion = 13000;
inline constexpr size_t kAllocationRounding = 512;             // cuMemAlloc granularity of the driver
inline constexpr size_t kVmmGranularity = size_t{2} << 20;     // cuMemGetAllocationGranularity: 2 MiB
inline constexpr int kMaxDevices = 64;

struct Context {
  int device = 0;
  bool primary = false;
};

struct Stream {
  Context* context = nullptr;
};

struct Pool {
  int device = 0;
  bool is_default = false;
};

// What the program got from cuMemAlloc and friends.
struct Allocation {
  size_t size = 0;      // rounded, what counts against the device
  size_t mapped = 0;    // length of the host mapping behind it
  int device = 0;
};

// What cuMemCreate made: memory that counts against the device until it is released and unmapped.
struct PhysicalMemory {
  size_t size = 0;
  int device = 0;       // -1: host memory (a host location), counted against the pinned limit
  int fd = -1;          // a sparse memfd, so several mappings of one handle share the bytes
  int mappings = 0;
  bool released = false;
};

struct Mapping {
  size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  bool accessible = false;  // set by cuMemSetAccess; until then the range is PROT_NONE, as on the device
};

class Driver {
 public:
  static Driver& get();

  CUresult init(unsigned int flags);
  bool initialized() const;
  int device_count() const { return device_count_; }
  uint64_t total_memory() const { return total_memory_; }
  bool valid_device(CUdevice d) const { return d >= 0 && d < device_count_; }

  // Contexts. The current context is per thread, a stack as in the driver.
  Context* primary_context(CUdevice d);
  CUresult retain_primary(CUdevice d, CUcontext* out);
  CUresult release_primary(CUdevice d);
  CUresult reset_primary(CUdevice d);
  CUresult primary_state(CUdevice d, unsigned int* flags, int* active);
  CUresult create_context(CUdevice d, CUcontext* out);
  CUresult destroy_context(CUcontext ctx);
  bool valid_context(CUcontext ctx) {
    auto* c = reinterpret_cast<Context*>(ctx);
    return c && (is_primary(c) || valid_created_context(c));
  }
  // The current context's device, or CUDA_ERROR_INVALID_CONTEXT when there is none.
  CUresult current_device(int& device);

  CUresult create_stream(CUstream* out);
  CUresult destroy_stream(CUstream s);
  // The device a stream's work runs on (the current context's for the special streams).
  CUresult stream_device(CUstream s, int& device);

  CUresult default_pool(CUdevice d, CUmemoryPool* out);
  CUresult create_pool(CUmemoryPool* out, const CUmemPoolProps* props);
  CUresult destroy_pool(CUmemoryPool pool);
  CUresult pool_device(CUmemoryPool pool, int& device);

  // Allocates `bytes` on `device`. `low` asks for an address below 4 GiB (the legacy 32-bit entry points).
  CUresult allocate(int device, size_t bytes, CUdeviceptr* out, bool low = false);
  CUresult free(CUdeviceptr ptr);
  CUresult memory_info(int device, size_t* free_bytes, size_t* total_bytes);
  // Bytes this process holds on `device`: contexts, allocations, physical memory (0 before cuInit).
  uint64_t used(int device);

  // Virtual memory management.
  CUresult create_physical(CUmemGenericAllocationHandle* out, size_t size, const CUmemAllocationProp* prop);
  CUresult release_physical(CUmemGenericAllocationHandle handle);
  CUresult reserve_address(CUdeviceptr* out, size_t size, size_t alignment);
  CUresult free_address(CUdeviceptr ptr, size_t size);
  CUresult map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle);
  CUresult unmap(CUdeviceptr ptr, size_t size);
  CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count);

  // Pinned host memory (the comment at the top of this file).
  CUresult host_alloc(size_t bytes, void** out);
  CUresult host_free(void* p);
  CUresult host_register(void* p, size_t bytes);
  CUresult host_unregister(void* p);
  uint64_t host_used();

  // True when [ptr, ptr + bytes) lies inside one allocation or one accessible mapping: copies and memsets
  // outside them fail with CUDA_ERROR_INVALID_VALUE instead of crashing the program.
  bool addressable(CUdeviceptr ptr, size_t bytes);

 private:
  Driver() = default;
  bool is_primary(const Context* c) const { return c >= primaries_.data() && c < primaries_.data() + device_count_; }
  bool valid_created_context(Context* c);  // one cuCtxCreate made and nobody destroyed yet
  CUresult charge(int device, size_t bytes);  // counts bytes against the device, or OUT_OF_MEMORY
  void refund(int device, size_t bytes);
  // A device's contexts (primary retained or created) come and go: its context memory follows the count.
  CUresult add_context(int device);
  void drop_context(int device);
  void drop_physical_if_unused(CUmemGenericAllocationHandle handle);
  bool inside_reservation(CUdeviceptr ptr, size_t size) const;

  mutable std::mutex mu_;
  std::atomic<bool> initialized_{false};  // set last by init(), with release: what init wrote is then visible
  int device_count_ = 0;
  uint64_t total_memory_ = 0;
  uint64_t context_memory_ = 0;
  std::vector<int> live_contexts_ = std::vector<int>(kMaxDevices, 0);
  std::vector<uint64_t> used_;
  std::vector<Context> primaries_ = std::vector<Context>(kMaxDevices);
  std::vector<int> primary_refs_ = std::vector<int>(kMaxDevices, 0);
  std::vector<Pool> default_pools_ = std::vector<Pool>(kMaxDevices);
  std::set<Context*> contexts_;
  std::set<Stream*> streams_;
  std::set<Pool*> pools_;
  std::map<CUdeviceptr, Allocation> allocations_;
  std::map<CUmemGenericAllocationHandle, PhysicalMemory> physical_;
  CUmemGenericAllocationHandle next_handle_ = 1;
  std::map<CUdeviceptr, size_t> reservations_;
  std::map<CUdeviceptr, Mapping> mappings_;
  uint64_t host_limit_ = 0;
  uint64_t host_used_ = 0;
  std::map<uintptr_t, size_t> host_allocations_;  // cuMemHostAlloc, cuMemAllocHost: what was mapped
  std::map<uintptr_t, size_t> host_registered_;   // cuMemHostRegister
};

// The calling thread's context stack, under the driver's rules (cuCtxPushCurrent/PopCurrent push and pop,
// cuCtxSetCurrent replaces the top, NULL pops). Its top, the current context, is read by every allocation
// and by every cuCtxGetDevice (the shim asks it on each hooked allocation), so it is a plain thread-local
// pointer: reading it takes no lock and no thread-local guard (a thread_local with a destructor costs a
// guard check and a second TLS lookup on every access). The contexts below the top, which only a push or a
// pop touches, sit in a thread-local vector.
class ContextStack {
 public:
  Context* top() const { return top_; }  // nullptr: no current context
  void push(Context* c);
  void pop();
  void set_top(Context* c);  // on an empty stack, a push
  void remove(Context* c);   // every entry that is `c` (a destroyed context)

 private:
  static std::vector<Context*>& below();
  Context* top_ = nullptr;
};

ContextStack& context_stack();

}  // namespace cuda_double
