#pragma once
// The rule book: one process's state of the fault plan's rules, and the decision whether a call fails.
//
// Note [Rule semantics]
// docs/fault-plan.md is the contract; this is how it is read here.
//  - A rule's filters are split into the target (entry, size, device, rank) and the window (step, steps,
//    phase, after). A call matches when it passes both.
//  - Matches are counted while the rule is idle (not inside its fail duration); the count restarts after each
//    trigger. `nth: N` triggers on the Nth such match, `every: K` on each Kth (it is nth with unlimited
//    repeat), no trigger key on the first, `probability: p` draws once per match from a splitmix64 stream
//    seeded with (plan seed, rule index), so the same plan gives the same failures for the same call order.
//  - Once triggered, the duration runs over target calls only (the window is not checked again): `times: N`
//    fails the trigger and the next N-1 target calls, `until_freed: B` fails target calls until the process
//    has freed B bytes since the trigger, `forever` fails every later target call.
//  - Counters are per process: a forked child or an exec'd child starts with fresh counters.
//  - Every rule sees every call of its layer (rules are independent; Note [Where a step fault fires] in
//    fault_plan.h says which layer asks a rule); the call fails when any rule fails it, and the first such
//    rule in plan order is the one reported.
//
// Cost: a rule whose target does not match costs a few compares and no lock; a matching rule takes its own
// SpinLock for a few instructions.

#include "fault_plan.h"
#include "spin_lock.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace oomh::inject {

// What the rule book needs to know about one allocation call.
struct CallFacts {
  MemoryKind memory = MemoryKind::device;  // Note [Host memory] in fault_plan.h
  Entry entry = Entry::mem_alloc;
  uint64_t size = 0;
  int device = 0;
  int rank = 0;
  int local_rank = 0;
  int64_t step = kUnknownStep;
  Phase phase = Phase::none;
  double elapsed_s = 0;      // since the process started
  uint64_t freed_total = 0;  // bytes the process has freed so far (only differences are used: see needs_freed)
  Layer layer = Layer::driver;     // who asks: the driver's entry point, or a request layer
  Layer requests = Layer::driver;  // the request layer the process registered (driver: none)
};

// What a rule met in its window: for the message of a fault that never fired (Note [Where a step fault fires]).
struct RuleSeen {
  uint64_t triggers = 0;
  uint64_t driver_calls = 0;   // driver allocations in its window
  uint64_t requests = 0;       // requests of the registered layer in its window
};

uint64_t splitmix64(uint64_t& state) noexcept;

class RuleBook {
 public:
  RuleBook() = default;
  RuleBook(std::vector<Rule> rules, uint64_t seed);

  // Index of the first rule that fails this call, or -1. Updates every matching rule's state.
  int decide(const CallFacts& call) noexcept;

  size_t size() const { return rules_.size(); }
  const Rule& rule(size_t i) const { return rules_[i]; }
  // True when some rule filters on time (the caller then measures elapsed_s).
  bool needs_time() const { return needs_time_; }
  // True when some rule fails `until_freed` (the caller then counts the bytes freed for freed_total).
  bool needs_freed() const { return needs_freed_; }

  RuleSeen seen(size_t i) const noexcept;

  // Fork safety (Note [Fork safety] in engine.h).
  void lock_all() noexcept;
  void unlock_all() noexcept;

 private:
  struct State {
    SpinLock lock;
    std::atomic<bool> active{false};  // inside the fail duration
    std::atomic<bool> done{false};    // triggered `repeat` times: only its duration is left
    uint64_t matches = 0;
    uint64_t triggers = 0;
    uint64_t remaining = 0;   // times: calls still to fail
    uint64_t freed_mark = 0;  // until_freed: freed_total at the trigger
    uint64_t rng = 0;
    std::atomic<uint64_t> window_driver{0};    // RuleSeen (step rules only: a relaxed add in their window)
    std::atomic<uint64_t> window_requests{0};
  };

  bool evaluate(size_t i, bool window, const CallFacts& call) noexcept;
  bool trigger_fires(const Rule& rule, State& s) noexcept;

  std::vector<Rule> rules_;
  std::unique_ptr<State[]> states_;
  bool needs_time_ = false;
  bool needs_freed_ = false;
};

bool target_matches(const RuleWhen& w, const CallFacts& call) noexcept;
bool window_matches(const RuleWhen& w, const CallFacts& call) noexcept;

}  // namespace oomh::inject
