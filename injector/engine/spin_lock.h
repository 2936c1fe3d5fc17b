#pragma once
// The one lock the shim takes inside a hook. It guards a few words (a rule's trigger state, a ledger shard)
// for a few instructions, so it spins, then yields (a job may run more threads than cores). It never calls
// into the C library's locks, which start-up or a fork might hold. Fork safety is the owner's job: the
// engine takes every SpinLock in pthread_atfork's prepare handler and releases them in parent and child.

#include <atomic>

#include <sched.h>

namespace oomh::inject {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0; !try_lock(); ++spins) {
      if (spins >= 64) sched_yield();
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

class SpinGuard {
 public:
  explicit SpinGuard(SpinLock& l) noexcept : lock_(l) { lock_.lock(); }
  ~SpinGuard() { lock_.unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock& lock_;
};

}  // namespace oomh::inject
