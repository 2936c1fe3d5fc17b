#pragma once
// The ledger: what one process holds. For every live device pointer or VMM handle the size and device
// behind it, so that a free knows what it gives back.
//
// Note [Ledger]
// Device pointers (cuMemAlloc*, cuMemAllocAsync*) and VMM handles (cuMemCreate) live in separate spaces:
// a handle is an opaque number that may equal some pointer value. Each space is split into 64 shards,
// each an open-addressing table (linear probing, backward-shift deletion, no tombstones) behind its own
// SpinLock: an insert costs no malloc until the shard grows, and 32 threads allocating at once rarely meet
// on one shard. Key 0 is never recorded (no allocation returns a null pointer or handle).
//
// The ledger does not count bytes: the process's bytes held per device are its slot's `held` in the
// control block (the engine keeps them there, where other processes of the job can see them), and a
// second count here would cost an atomic read-modify-write per allocation and per free for the same
// number. What it does count is the frees it served, per device: under the shard lock that a take already
// holds, with a plain add, so the count costs nothing extra (Note [Counters on the hot path] in engine.h).
//
// The ledger does not know about caps or the control block.

#include "spin_lock.h"

#include <oomharness/control_block.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace oomh::inject {

// host_pointer: pinned host memory (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister), recorded with device
// kHostDevice (Note [Host memory] in fault_plan.h); a host cuMemCreate handle lives with the other handles.
enum class Space : uint8_t { device_pointer = 0, vmm_handle = 1, host_pointer = 2 };
inline constexpr int kHostDevice = -1;

struct Allocation {
  uint64_t size = 0;
  int device = 0;
};

class Ledger {
 public:
  static constexpr int kShards = 64;

  Ledger() = default;
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Records a live allocation. When `key` was already live (it was freed through a path the shim does not
  // see), the old record is replaced and returned, so that the caller can give its bytes back. A record
  // that cannot be stored (out of host memory) is dropped: a later free of `key` then finds nothing.
  std::optional<Allocation> record(Space space, uint64_t key, Allocation a) noexcept;

  // Removes a live allocation (the real free may still fail) and counts it as taken on its device.
  std::optional<Allocation> take(Space space, uint64_t key) noexcept;
  // Puts back what take() removed, when the real free failed (it stays counted as taken: a free call
  // happened).
  void restore(Space space, uint64_t key, Allocation a) noexcept;

  // Allocations of `device` that take() removed so far. Sums the shards: for exit reports, not per call.
  uint64_t taken(int device) const noexcept;
  uint64_t live_count() noexcept;

  // Fork safety: lock every shard before fork(), unlock in both parent and child.
  void lock_all() noexcept;
  void unlock_all() noexcept;
  // A forked child holds none of its parent's allocations (its CUDA context is not the parent's).
  void clear() noexcept;

 private:
  struct Slot {
    uint64_t key;
    uint64_t size;
    int64_t device;
  };
  struct Table {
    SpinLock lock;
    Slot* slots = nullptr;
    size_t mask = 0;  // capacity - 1, capacity a power of two
    size_t count = 0;
    // Written under `lock` only (a load and a store, no read-modify-write); read by taken() without it.
    std::atomic<uint64_t> taken[kMaxDevices]{};
  };

  static uint64_t mix(uint64_t key) noexcept;
  Table& table(Space space, uint64_t hash) noexcept;
  static bool grow(Table& t) noexcept;
  static bool insert(Table& t, uint64_t key, uint64_t hash, const Allocation& a,
                     std::optional<Allocation>& replaced) noexcept;
  static bool erase(Table& t, uint64_t key, uint64_t hash, Allocation& out) noexcept;

  Table tables_[3][kShards];
};

}  // namespace oomh::inject
