#include "ledger.h"

#include <cstdlib>
#include <new>

namespace oomh::inject {

namespace {
bool valid_device(int d) { return d >= 0 && d < kMaxDevices; }
}  // namespace

Ledger::~Ledger() {
  for (auto& space : tables_)
    for (auto& t : space) std::free(t.slots);
}

uint64_t Ledger::mix(uint64_t key) noexcept {
  key ^= key >> 33;
  key *= 0xFF51AFD7ED558CCDull;
  key ^= key >> 33;
  key *= 0xC4CEB9FE1A85EC53ull;
  key ^= key >> 33;
  return key;
}

Ledger::Table& Ledger::table(Space space, uint64_t key) noexcept {
  return tables_[static_cast<int>(space)][mix(key) >> 58];  // top 6 bits: shard; low bits: slot
}

// calloc/free rather than new: the table must not throw inside a hook.
bool Ledger::grow(Table& t) noexcept {
  size_t capacity = t.slots ? (t.mask + 1) * 2 : 64;
  auto* slots = static_cast<Slot*>(std::calloc(capacity, sizeof(Slot)));
  if (!slots) return false;
  size_t mask = capacity - 1;
  if (t.slots) {
    for (size_t i = 0; i <= t.mask; ++i) {
      if (t.slots[i].key == 0) continue;
      size_t j = mix(t.slots[i].key) & mask;
      while (slots[j].key != 0) j = (j + 1) & mask;
      slots[j] = t.slots[i];
    }
    std::free(t.slots);
  }
  t.slots = slots;
  t.mask = mask;
  return true;
}

bool Ledger::insert(Table& t, uint64_t key, const Allocation& a, std::optional<Allocation>& replaced) noexcept {
  if ((!t.slots || (t.count + 1) * 4 > (t.mask + 1) * 3) && !grow(t)) return false;
  size_t i = mix(key) & t.mask;
  while (t.slots[i].key != 0 && t.slots[i].key != key) i = (i + 1) & t.mask;
  if (t.slots[i].key == key) replaced = Allocation{t.slots[i].size, static_cast<int>(t.slots[i].device)};
  else ++t.count;
  t.slots[i] = Slot{key, a.size, a.device};
  return true;
}

bool Ledger::erase(Table& t, uint64_t key, Allocation& out) noexcept {
  if (!t.slots) return false;
  size_t i = mix(key) & t.mask;
  while (t.slots[i].key != key) {
    if (t.slots[i].key == 0) return false;
    i = (i + 1) & t.mask;
  }
  out = Allocation{t.slots[i].size, static_cast<int>(t.slots[i].device)};
  // Backward-shift deletion: move later members of the probe run into the hole so lookups stay correct.
  size_t hole = i;
  for (size_t j = (i + 1) & t.mask; t.slots[j].key != 0; j = (j + 1) & t.mask) {
    size_t home = mix(t.slots[j].key) & t.mask;
    bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
    if (movable) {
      t.slots[hole] = t.slots[j];
      hole = j;
    }
  }
  t.slots[hole] = Slot{0, 0, 0};
  --t.count;
  return true;
}

void Ledger::count_in(const Allocation& a) noexcept {
  if (!valid_device(a.device)) return;
  uint64_t now = held_[a.device].fetch_add(a.size, std::memory_order_relaxed) + a.size;
  raise_peak(peak_[a.device], now);
}

std::optional<Allocation> Ledger::record(Space space, uint64_t key, Allocation a) noexcept {
  if (key == 0) return std::nullopt;
  std::optional<Allocation> replaced;
  bool stored = false;
  {
    Table& t = table(space, key);
    SpinGuard guard(t.lock);
    stored = insert(t, key, a, replaced);
  }
  if (replaced) release(*replaced);
  if (stored) count_in(a);
  return replaced;
}

std::optional<Allocation> Ledger::take(Space space, uint64_t key) noexcept {
  if (key == 0) return std::nullopt;
  Allocation a;
  Table& t = table(space, key);
  SpinGuard guard(t.lock);
  if (!erase(t, key, a)) return std::nullopt;
  return a;
}

void Ledger::restore(Space space, uint64_t key, Allocation a) noexcept {
  std::optional<Allocation> replaced;
  Table& t = table(space, key);
  SpinGuard guard(t.lock);
  insert(t, key, a, replaced);
}

void Ledger::release(const Allocation& a) noexcept {
  freed_.fetch_add(a.size, std::memory_order_relaxed);
  if (valid_device(a.device)) held_[a.device].fetch_sub(a.size, std::memory_order_relaxed);
}

uint64_t Ledger::held(int device) const noexcept {
  return valid_device(device) ? held_[device].load(std::memory_order_relaxed) : 0;
}

uint64_t Ledger::peak(int device) const noexcept {
  return valid_device(device) ? peak_[device].load(std::memory_order_relaxed) : 0;
}

uint64_t Ledger::live_count() noexcept {
  uint64_t n = 0;
  for (auto& space : tables_) {
    for (auto& t : space) {
      SpinGuard guard(t.lock);
      n += t.count;
    }
  }
  return n;
}

void Ledger::lock_all() noexcept {
  for (auto& space : tables_)
    for (auto& t : space) t.lock.lock();
}

void Ledger::unlock_all() noexcept {
  for (auto& space : tables_)
    for (auto& t : space) t.lock.unlock();
}

void Ledger::clear() noexcept {
  for (auto& space : tables_) {
    for (auto& t : space) {
      SpinGuard guard(t.lock);
      std::free(t.slots);
      t.slots = nullptr;
      t.mask = 0;
      t.count = 0;
    }
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    held_[d].store(0, std::memory_order_relaxed);
    peak_[d].store(0, std::memory_order_relaxed);
  }
  freed_.store(0, std::memory_order_relaxed);
}

}  // namespace oomh::inject
