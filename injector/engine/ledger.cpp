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

// `hash` is mix(key), computed once per call: its top 6 bits pick the shard, its low bits the slot.
Ledger::Table& Ledger::table(Space space, uint64_t hash) noexcept {
  return tables_[static_cast<int>(space)][hash >> 58];
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

bool Ledger::insert(Table& t, uint64_t key, uint64_t hash, const Allocation& a,
                    std::optional<Allocation>& replaced) noexcept {
  if ((!t.slots || (t.count + 1) * 4 > (t.mask + 1) * 3) && !grow(t)) return false;
  size_t i = hash & t.mask;
  while (t.slots[i].key != 0 && t.slots[i].key != key) i = (i + 1) & t.mask;
  if (t.slots[i].key == key) replaced = Allocation{t.slots[i].size, static_cast<int>(t.slots[i].device)};
  else ++t.count;
  t.slots[i] = Slot{key, a.size, a.device};
  return true;
}

bool Ledger::erase(Table& t, uint64_t key, uint64_t hash, Allocation& out) noexcept {
  if (!t.slots) return false;
  size_t i = hash & t.mask;
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

std::optional<Allocation> Ledger::record(Space space, uint64_t key, Allocation a) noexcept {
  std::optional<Allocation> replaced;
  if (key == 0) return replaced;
  uint64_t hash = mix(key);
  Table& t = table(space, hash);
  SpinGuard guard(t.lock);
  insert(t, key, hash, a, replaced);
  return replaced;
}

std::optional<Allocation> Ledger::take(Space space, uint64_t key) noexcept {
  if (key == 0) return std::nullopt;
  Allocation a;
  uint64_t hash = mix(key);
  Table& t = table(space, hash);
  SpinGuard guard(t.lock);
  if (!erase(t, key, hash, a)) return std::nullopt;
  if (valid_device(a.device)) {
    std::atomic<uint64_t>& n = t.taken[a.device];
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // the lock makes this exact
  }
  return a;
}

void Ledger::restore(Space space, uint64_t key, Allocation a) noexcept {
  std::optional<Allocation> replaced;
  uint64_t hash = mix(key);
  Table& t = table(space, hash);
  SpinGuard guard(t.lock);
  insert(t, key, hash, a, replaced);
}

uint64_t Ledger::taken(int device) const noexcept {
  if (!valid_device(device)) return 0;
  uint64_t n = 0;
  for (const auto& space : tables_)
    for (const auto& t : space) n += t.taken[device].load(std::memory_order_relaxed);
  return n;
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
      for (auto& n : t.taken) n.store(0, std::memory_order_relaxed);
    }
  }
}

}  // namespace oomh::inject
