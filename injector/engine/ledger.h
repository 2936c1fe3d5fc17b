#pragma once
// The ledger: what one process holds. Per device the bytes held now and their peak, and for every live
// device pointer or VMM handle the size and device behind it, so that a free knows what it gives back.
//
// Note [Ledger]
// Device pointers (cuMemAlloc*, cuMemAllocAsync*) and VMM handles (cuMemCreate) live in separate spaces:
// a handle is an opaque number that may equal some pointer value. Each space is split into 64 shards,
// each an open-addressing table (linear probing, backward-shift deletion, no tombstones) behind its own
// SpinLock: an insert costs no malloc until the shard grows, and 32 threads allocating at once rarely meet
// on one shard. Key 0 is never recorded (no allocation returns a null pointer or handle).
//
// The ledger does not know about caps or the control block: the engine mirrors its changes there.

#include "spin_lock.h"

#include <oomharness/control_block.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace oomh::inject {

enum class Space : uint8_t { device_pointer = 0, vmm_handle = 1 };

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

  // Records a live allocation and counts its bytes as held. When `key` was already live (it was freed
  // through a path the shim does not see), the old record is replaced, its bytes are given back, and it is
  // returned so that the caller can mirror that. A record that cannot be stored (out of host memory) is
  // dropped: the bytes are then never counted.
  std::optional<Allocation> record(Space space, uint64_t key, Allocation a) noexcept;

  // Removes a live allocation without giving its bytes back (the real free may still fail).
  std::optional<Allocation> take(Space space, uint64_t key) noexcept;
  // Puts back what take() removed, when the real free failed.
  void restore(Space space, uint64_t key, Allocation a) noexcept;
  // Gives back the bytes of an allocation that take() removed and the driver freed.
  void release(const Allocation& a) noexcept;

  uint64_t held(int device) const noexcept;
  uint64_t peak(int device) const noexcept;
  uint64_t freed_total() const noexcept { return freed_.load(std::memory_order_relaxed); }
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
  };

  static uint64_t mix(uint64_t key) noexcept;
  Table& table(Space space, uint64_t key) noexcept;
  static bool grow(Table& t) noexcept;
  static bool insert(Table& t, uint64_t key, const Allocation& a, std::optional<Allocation>& replaced) noexcept;
  static bool erase(Table& t, uint64_t key, Allocation& out) noexcept;
  void count_in(const Allocation& a) noexcept;

  Table tables_[2][kShards];
  std::atomic<uint64_t> held_[kMaxDevices]{};
  std::atomic<uint64_t> peak_[kMaxDevices]{};
  std::atomic<uint64_t> freed_{0};
};

}  // namespace oomh::inject
