#include "rule_book.h"

namespace oomh::inject {

uint64_t splitmix64(uint64_t& state) noexcept {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool target_matches(const RuleWhen& w, const CallFacts& call) noexcept {
  return w.memory == call.memory && (w.entries & entry_bit(call.entry)) != 0 && call.size >= w.min_size && call.size <= w.max_size &&
         (w.device < 0 || w.device == call.device) && (w.rank < 0 || w.rank == call.rank) &&
         (w.local_rank < 0 || w.local_rank == call.local_rank);
}

bool window_matches(const RuleWhen& w, const CallFacts& call) noexcept {
  if (w.has_steps && (call.step == kUnknownStep || call.step < w.steps_from || call.step > w.steps_to)) return false;
  if (w.has_phase && call.phase != w.phase) return false;
  // Note [Where a step fault fires] in fault_plan.h: at a request layer a step without a phase is its training
  // work (forward, backward, the optimizer), the points the probe has on a GPU; the batch's copy before it
  // (`data`) is faulted with `phase: data`.
  if (call.layer != Layer::driver && !w.has_phase && !training_work(call.phase)) return false;
  if (w.after_s > 0 && call.elapsed_s < w.after_s) return false;
  return true;
}

RuleBook::RuleBook(std::vector<Rule> rules, uint64_t seed)
    : rules_(std::move(rules)), states_(std::make_unique<State[]>(rules_.size())) {
  for (size_t i = 0; i < rules_.size(); ++i) {
    // Each rule draws from its own stream, so adding a rule does not change another rule's draws.
    states_[i].rng = seed ^ ((i + 1) * 0xD1B54A32D192ED03ull);
    needs_time_ = needs_time_ || rules_[i].when.after_s > 0;
    needs_freed_ = needs_freed_ || rules_[i].fail.kind == Duration::until_freed;
  }
}

int RuleBook::decide(const CallFacts& call) noexcept {
  int first = -1;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const RuleWhen& w = rules_[i].when;
    // Note [Where a step fault fires]: a rule is asked at one layer only.
    if ((call.layer != Layer::driver) != at_request_layer(w, call.requests)) continue;
    if (!target_matches(w, call)) continue;
    State& s = states_[i];
    bool active = s.active.load(std::memory_order_relaxed);
    if (!active && s.done.load(std::memory_order_relaxed)) continue;
    bool window = window_matches(w, call);
    if (window && w.has_steps)
      (call.layer == Layer::driver ? s.window_driver : s.window_requests).fetch_add(1, std::memory_order_relaxed);
    if (!active && !window) continue;
    if (evaluate(i, window, call) && first < 0) first = static_cast<int>(i);
  }
  return first;
}

RuleSeen RuleBook::seen(size_t i) const noexcept {
  RuleSeen out;
  if (i >= rules_.size()) return out;
  const State& s = states_[i];
  out.triggers = s.triggers;
  out.driver_calls = s.window_driver.load(std::memory_order_relaxed);
  out.requests = s.window_requests.load(std::memory_order_relaxed);
  return out;
}

bool RuleBook::evaluate(size_t i, bool window, const CallFacts& call) noexcept {
  const Rule& rule = rules_[i];
  State& s = states_[i];
  SpinGuard guard(s.lock);
  if (s.active.load(std::memory_order_relaxed)) {
    switch (rule.fail.kind) {
      case Duration::times:
        if (--s.remaining == 0) s.active.store(false, std::memory_order_relaxed);
        return true;
      case Duration::until_freed:
        if (call.freed_total - s.freed_mark < rule.fail.until_freed) return true;
        s.active.store(false, std::memory_order_relaxed);  // paid back: the rule is idle again
        break;
      case Duration::forever:
        return true;
    }
  }
  if (!window || s.done.load(std::memory_order_relaxed) || !trigger_fires(rule, s)) return false;

  s.matches = 0;
  ++s.triggers;
  if (rule.when.repeat != 0 && s.triggers >= rule.when.repeat) s.done.store(true, std::memory_order_relaxed);
  switch (rule.fail.kind) {
    case Duration::times:
      s.remaining = rule.fail.times - 1;
      s.active.store(s.remaining > 0, std::memory_order_relaxed);
      break;
    case Duration::until_freed:
      s.freed_mark = call.freed_total;
      s.active.store(rule.fail.until_freed > 0, std::memory_order_relaxed);
      break;
    case Duration::forever:
      s.active.store(true, std::memory_order_relaxed);
      break;
  }
  return true;
}

bool RuleBook::trigger_fires(const Rule& rule, State& s) noexcept {
  if (rule.when.trigger == Trigger::probability) {
    double draw = static_cast<double>(splitmix64(s.rng) >> 11) * 0x1.0p-53;
    return draw < rule.when.probability;
  }
  return ++s.matches >= rule.when.n;
}

void RuleBook::lock_all() noexcept {
  for (size_t i = 0; i < rules_.size(); ++i) states_[i].lock.lock();
}

void RuleBook::unlock_all() noexcept {
  for (size_t i = rules_.size(); i-- > 0;) states_[i].lock.unlock();
}

}  // namespace oomh::inject
