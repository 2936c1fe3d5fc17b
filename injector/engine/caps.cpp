#include "caps.h"

#include <algorithm>

namespace oomh::inject {

MemInfo capped_mem_info(uint64_t real_free, uint64_t real_total, uint64_t cap, uint64_t job_held) noexcept {
  if (cap == 0) return MemInfo{real_free, real_total};
  MemInfo m;
  m.total = std::min(cap, real_total);
  uint64_t room = cap > job_held ? cap - job_held : 0;
  m.free = std::min({real_free, room, m.total});
  return m;
}

bool reserve_bytes(DeviceCounters& device, uint64_t size, uint64_t cap, uint64_t* held_after) noexcept {
  uint64_t now = 0;
  if (cap == 0) {  // no cap: one add, nothing to check
    now = device.held.fetch_add(size, std::memory_order_relaxed) + size;
  } else {
    uint64_t held = device.held.load(std::memory_order_relaxed);
    do {
      now = held + size;
      if (now < held || now > cap) return false;
    } while (!device.held.compare_exchange_weak(held, now, std::memory_order_relaxed));
  }
  if (held_after) *held_after = now;
  return true;
}

void release_bytes(DeviceCounters& device, uint64_t size) noexcept {
  uint64_t before = device.held.fetch_sub(size, std::memory_order_relaxed);
  // Saturating: the runner may already have given back what a dead process held.
  if (before < size) device.held.fetch_add(size - before, std::memory_order_relaxed);
}

CapSchedule::CapSchedule(std::vector<CapEntry> entries)
    : entries_(std::move(entries)), reached_(std::make_unique<std::atomic<bool>[]>(entries_.size())) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    changes_ = changes_ || entries_[i].at != CapEntry::At::start;
    needs_time_ = needs_time_ || entries_[i].at == CapEntry::At::after;
    reached_[i].store(entries_[i].at == CapEntry::At::start, std::memory_order_relaxed);
    has_host_ = has_host_ || entries_[i].memory == MemoryKind::host;
  }
}

bool CapSchedule::covers(int device) const noexcept {
  for (const auto& e : entries_)
    if (e.memory == MemoryKind::device && (e.device < 0 || e.device == device)) return true;
  return false;
}

uint64_t CapSchedule::limit_for(int device, int64_t step, double job_elapsed_s, const char** why) noexcept {
  return limit_of(MemoryKind::device, device, step, job_elapsed_s, why);
}

uint64_t CapSchedule::host_limit(int64_t step, double job_elapsed_s) noexcept {
  return has_host_ ? limit_of(MemoryKind::host, -1, step, job_elapsed_s, nullptr) : 0;
}

uint64_t CapSchedule::limit_of(MemoryKind memory, int device, int64_t step, double job_elapsed_s, const char** why) noexcept {
  uint64_t limit = 0;
  const char* reason = "start";
  for (size_t i = 0; i < entries_.size(); ++i) {
    const CapEntry& e = entries_[i];
    if (e.memory != memory || (e.device >= 0 && e.device != device)) continue;
    bool reached = reached_[i].load(std::memory_order_relaxed);
    if (!reached) {
      reached = e.at == CapEntry::At::step ? (step != kUnknownStep && step >= e.at_step) : job_elapsed_s >= e.at_after_s;
      if (reached) reached_[i].store(true, std::memory_order_relaxed);
    }
    if (!reached) continue;
    limit = e.limit;
    reason = e.at == CapEntry::At::start ? "start" : e.at == CapEntry::At::step ? "step" : "time";
  }
  if (why) *why = reason;
  return limit;
}

}  // namespace oomh::inject
