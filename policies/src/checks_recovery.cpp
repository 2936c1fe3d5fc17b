// The recovery checks: what the code did after an OOM it saw. Each runs only when the trace has one
// (registry.cpp, Note [Absorbed faults]).

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <re2/re2.h>

#include "checks.h"
#include "oomharness/events.h"
#include "oomharness/json_number.h"
#include "oomharness/policies/oom_kinds.h"
#include "oomharness/policies/findings.h"
#include "oomharness/units.h"
#include "trace_view.h"

namespace oomh::checks {

using view::attempt_name;
using view::OomPoint;
using view::StepPoint;

namespace {

// The steps of every attempt, indexed like trace.attempts.
std::vector<std::vector<StepPoint>> all_steps(const Trace& trace) {
  std::vector<std::vector<StepPoint>> out;
  for (const Attempt& a : trace.attempts) out.push_back(view::steps_of(a));
  return out;
}

size_t position_of(const Trace& trace, int attempt_index) {
  for (size_t i = 0; i < trace.attempts.size(); ++i)
    if (trace.attempts[i].index == attempt_index) return i;
  return trace.attempts.size();
}

// "OOM at step 5 (batch 64)"
std::string oom_text(const OomPoint& o) {
  std::string s = "OOM at " + view::step_text(o.step);
  if (o.batch > 0) s += " (batch " + std::to_string(o.batch) + ")";
  return s;
}

// "was caught" / "ended attempt 1"
std::string oom_outcome(const OomPoint& o) { return o.caught ? "was caught" : "ended " + attempt_name(o.attempt); }

// The first step completed after the OOM: in its attempt, or, when the OOM ended that attempt, the first
// step of a later one.
const StepPoint* next_step(const Trace& trace, const std::vector<std::vector<StepPoint>>& steps, const OomPoint& o) {
  size_t pos = position_of(trace, o.attempt);
  for (size_t i = pos; i < steps.size(); ++i)
    if (const StepPoint* s = view::step_after(steps[i], o.t)) return s;
  return nullptr;
}

std::string step_name(const StepPoint& s, const OomPoint& o) {
  std::string name = "step " + std::to_string(s.step);
  return s.attempt != o.attempt ? attempt_name(s.attempt) + "'s " + name : name;
}

// Samples processed after the OOM up to (and including) the first step completed after it, or -1 when
// the code reported no `samples` at all there.
int64_t samples_after(const Attempt& a, const OomPoint& o, const StepPoint* until) {
  int64_t n = -1;
  for (const Event& e : a.events) {
    if (e.t <= o.t || e.src != events::kSrcProbe || e.kind != events::kSamples) continue;
    if (until && until->attempt == a.index && e.t > until->t) break;
    n = std::max<int64_t>(n, 0) + std::max<int64_t>(0, e.integer("count", 0));
  }
  return n;
}

// Note [When nothing fits]
// Issue 26: a trainer that halves correctly under a cap whose fixed memory (parameters, gradients, optimizer
// state, workspaces) leaves no room for any batch completes no step after its first OOM: each retry, at a
// smaller batch, runs out again. That is no failure of its recovery, and "no step completed" would send the
// user looking for a bug that is not there. When the retries' OOMs show the batch going down by `factor`
// each time to the floor, or the last OOM's breakdown shows the fixed memory alone filling the device, the
// verdict is inconclusive and says that nothing fits and what holds the memory; otherwise it fails.
Verdict nothing_completed(const Trace& trace, const std::vector<OomPoint>& ooms, const OomPoint& o, double factor,
                          int64_t floor_batch, std::vector<Evidence>& ev) {
  const std::string head = oom_text(o) + " " + oom_outcome(o) + ", but no step completed afterwards";
  // The OOMs from this one on: the retries, each at a batch of its own.
  std::vector<int64_t> chain;
  bool halved = true;
  for (const OomPoint& later : ooms) {
    if (later.t < o.t) continue;
    if (later.batch <= 0) { halved = false; break; }
    if (!chain.empty()) {
      const double limit = std::max(static_cast<double>(chain.back()) * factor, static_cast<double>(floor_batch));
      if (static_cast<double>(later.batch) > limit + 1e-9 || (later.batch >= chain.back() && chain.back() > floor_batch))
        halved = false;
    }
    chain.push_back(later.batch);
  }
  const bool to_floor = halved && chain.size() > 1 && chain.back() <= floor_batch;
  // What held the memory at the last OOM, where the probe wrote a breakdown.
  const Event* last_breakdown = nullptr;
  for (const Attempt& a : trace.attempts)
    for (const Event* e : view::breakdowns_of(a, "oom")) last_breakdown = e;
  std::string holders;
  bool fixed_fills = false;
  if (last_breakdown) {
    double fixed = 0;
    holders = memory_holders(*last_breakdown, &fixed);
    const double total = last_breakdown->number("total");
    fixed_fills = total > 0 && fixed >= total;
  }
  const view::PlanSeen plan = view::plan_seen(trace);
  const std::string under = plan.cap > 0 ? " under the job's cap of " + format_bytes(plan.cap) : std::string();
  if (!to_floor && !fixed_fills) {
    std::string s = head;
    if (!holders.empty()) s += "; at the last OOM: " + holders;
    return verdict(VerdictStatus::fail, s, ev);
  }
  std::string batches;
  for (int64_t b : chain) batches += (batches.empty() ? "" : " -> ") + std::to_string(b);
  // Not "was caught" or "ended attempt 1": the retries' OOMs were caught, the last one ended it.
  std::string s = "no step completed after the " + oom_text(o) + ": nothing fits" + under + " (";
  if (to_floor) s += "the code halved the batch at each retry, " + batches + ", down to the floor of " +
                     std::to_string(floor_batch) + ", and still ran out";
  else s += "the memory no batch size changes fills it alone";
  s += "); " + (holders.empty() ? std::string("what held the memory is not known (the probe writes a breakdown at each OOM)")
                                : "at the last OOM " + holders) +
       ". The recovery cannot be judged here: give the job more memory, or make the model, its gradients and "
       "optimizer state smaller";
  ev.push_back({o.attempt, o.t, "no step completed after the " + oom_text(o)});
  return verdict(VerdictStatus::inconclusive, s, ev);
}

}  // namespace

Verdict batch_halving(const Trace& trace, const nlohmann::json& args) {
  double factor = args.value("factor", 0.5);
  int64_t floor_batch = args.value("min", int64_t{1});
  bool no_sample_loss = args.value("no_sample_loss", false);
  auto steps = all_steps(trace);
  auto ooms = view::ooms_of(trace);
  std::vector<Evidence> ev;
  std::string chain;
  // Note [The batch the code did not report] (probe/batches.py): the verdict says when the batches it compared were
  // the probe's inference.
  std::string inferred;
  auto note_inferred = [&](const std::string& from) {
    if (!view::batch_inferred(from) || !inferred.empty()) return;
    inferred = from == "loader" ? "the DataLoader's batches" : "the model's inputs";
  };
  auto say = [&](VerdictStatus status, std::string text, std::vector<Evidence> evidence) {
    if (!inferred.empty()) text += " (batch sizes inferred from " + inferred + ": the code reported none)";
    return verdict(status, std::move(text), std::move(evidence));
  };
  for (const OomPoint& seen : ooms) {
    OomPoint o = seen;
    ev.push_back({o.attempt, o.t, oom_text(o)});
    note_inferred(o.batch_from);
    if (o.batch <= 0)
      return say(VerdictStatus::inconclusive, "the OOM at " + view::step_text(o.step) +
                                                      " has no batch size: report batch_size with the probe's step() or an `observe:` regex",
                     ev);
    const StepPoint* next_found = next_step(trace, steps, o);
    if (!next_found) return nothing_completed(trace, ooms, o, factor, floor_batch, ev);
    const StepPoint* next = next_found;
    note_inferred(next->batch_from);
    ev.back().what = oom_text(o);
    ev.push_back({next->attempt, next->t, step_name(*next, o) + " ran at batch " + std::to_string(next->batch)});
    if (next->batch < 0)
      return say(VerdictStatus::inconclusive, step_name(*next, o) + " after the " + oom_text(o) +
                                                      " reported no batch size: report batch_size with the probe's step() or an `observe:` regex",
                     ev);
    // At the floor already, the code may go on at the floor; it cannot halve further.
    double limit = std::max(static_cast<double>(o.batch) * factor, static_cast<double>(floor_batch));
    std::string head = oom_text(o) + " " + oom_outcome(o) + ", but " + step_name(*next, o) + " ran at batch " +
                       std::to_string(next->batch);
    if (next->batch == o.batch && static_cast<double>(next->batch) > limit)
      return say(VerdictStatus::fail, head + " again: no halving", ev);
    if (next->batch > o.batch) return say(VerdictStatus::fail, head + ", larger than before: no halving", ev);
    if (static_cast<double>(next->batch) > limit + 1e-9)
      return say(VerdictStatus::fail, head + ", more than " + std::to_string(o.batch) + " x " + number_text(factor) +
                                              " = " + number_text(static_cast<double>(o.batch) * factor), ev);
    if (next->batch < floor_batch)
      return say(VerdictStatus::fail, oom_text(o) + " " + oom_outcome(o) + " and " + step_name(*next, o) +
                                              " ran at batch " + std::to_string(next->batch) + ", below the floor of " +
                                              std::to_string(floor_batch), ev);
    if (no_sample_loss) {
      // Note [A step is its data]: where the probe fingerprinted the data, the failed batch must be trained
      // on again, whole or in pieces that add up to it; counts of samples cannot tell it from other samples.
      std::vector<const StepPoint*> after;
      for (size_t i = position_of(trace, o.attempt); i < steps.size(); ++i)
        for (const StepPoint& s : steps[i])
          if (s.t > o.t) after.push_back(&s);
      if (auto redone = view::redone_by(o.data, after)) {
        if (*redone == 0)
          return say(VerdictStatus::fail, oom_text(o) + " " + oom_outcome(o) + " and the batch went down to " +
                                                  std::to_string(next->batch) + ", but the failed batch (" + o.data.text() +
                                                  ") was never trained on again: the steps after the OOM trained on other samples, so " +
                                                  std::to_string(o.data.samples) + " samples were dropped", ev);
        if (chain.empty()) chain = std::to_string(o.batch);
        chain += " -> " + std::to_string(next->batch);
        continue;
      }
      bool redone = false;
      for (size_t i = position_of(trace, o.attempt); i < steps.size() && !redone; ++i)
        for (const StepPoint& s : steps[i]) redone = redone || (s.t > o.t && s.step == o.step);
      // Sample counts, when the code reports them, are the evidence: a step number that completes says
      // nothing of how many samples it took (a trainer that counts optimizer steps "completes" the failed
      // step on half its batch). Without them, the failed step completing again has to do.
      int64_t processed = samples_after(trace.attempts[position_of(trace, o.attempt)], o, next);
      bool lost = processed >= 0 ? processed < o.batch : !redone;
      if (processed < 0) processed = 0;
      if (lost) {
        std::string why = redone ? view::step_text(o.step) + " completed again, but only " + std::to_string(processed) +
                                       " samples were reported after the OOM"
                                 : view::step_text(o.step) + " never completed, " + std::to_string(processed) +
                                       " samples reported after the OOM";
        return say(VerdictStatus::fail, oom_text(o) + " " + oom_outcome(o) + " and the batch went down to " +
                                                std::to_string(next->batch) + ", but the failed step's " +
                                                std::to_string(o.batch) + " samples were not processed again (" + why +
                                                "): samples were dropped", ev);
      }
    }
    if (chain.empty()) chain = std::to_string(o.batch);
    chain += " -> " + std::to_string(next->batch);
  }
  std::string what = ooms.size() == 1 ? "the OOM was followed by a smaller batch (" + chain + ")"
                                      : "each of the " + std::to_string(ooms.size()) + " OOMs was followed by a smaller batch (" + chain + ")";
  if (auto missed = target_missed(trace))
    return say(VerdictStatus::fail, what + ", but " + *missed, ev);
  return say(VerdictStatus::pass, what + " and training " + target_reached(trace), ev);
}

namespace {

// Note [What empty_cache could free]
// An empty_cache that frees nothing after an OOM used to mean one thing here: the failed attempt's tensors
// were still referenced, so their blocks could not go back. It can also mean that the cache was already
// empty: PyTorch's caching allocator gives its free blocks back itself before it raises an OOM (its own
// retry), and a second OOM in a row finds the cache that the first empty_cache emptied. Failing those was
// a false red. So the probes record, with each call, what the cache held free before it (freeable_before:
// bytes of free cached blocks the call could give back; allocated_before: bytes in live tensors), and a
// call that frees nothing fails only when there was something to free. A cache that was already empty is
// fine: whether the retry then worked is shown by the same step completing. A retry that holds the failed
// attempt's tensors and so never finds room still fails, by that step never completing; its fail sentence
// says how much more the code held than after the last step. Traces without freeable_before (older
// probes, or sizes from the shim's samples) keep the old rule: the cache must shrink.

struct CacheCall {
  int64_t before = 0, after = 0;  // reserved bytes, or the shim's held bytes without the probe's figures
  std::optional<int64_t> freeable;   // free cached bytes the call could give back, when the probe said
  std::optional<int64_t> allocated;  // bytes in live tensors as the call began, when the probe said
  int64_t freed() const { return before - after; }
};

std::string bytes_text(int64_t n) { return format_bytes(static_cast<uint64_t>(std::max<int64_t>(0, n))); }

// The probe's figures for an empty_cache call; without them, the bytes the shim saw held (what empty_cache
// gives back to the driver) across the call. nullopt: cannot tell.
std::optional<CacheCall> cache_call(const Attempt& a, const Event& e) {
  CacheCall c;
  if (e.has("reserved_before") && e.has("reserved_after")) {
    c.before = e.integer("reserved_before");
    c.after = e.integer("reserved_after");
    if (e.has("freeable_before")) c.freeable = std::max<int64_t>(0, e.integer("freeable_before"));
    if (e.has("allocated_before")) c.allocated = e.integer("allocated_before");
    return c;
  }
  std::map<int, const MemorySample*> before, after;
  for (const MemorySample& s : a.samples) {
    if (s.t <= e.t) before[s.device] = &s;
    else if (!after.count(s.device)) after[s.device] = &s;
  }
  if (before.empty() || after.empty()) return std::nullopt;
  for (const auto& [d, s] : before) c.before += static_cast<int64_t>(s->held);
  for (const auto& [d, s] : after) c.after += static_cast<int64_t>(s->held);
  return c;
}

// For a retry that never made room: when the code emptied the cache it held more than after the last step
// before the OOM (Note [What empty_cache could free]). Empty when the figures do not say so.
std::string held_note(const std::vector<StepPoint>& steps, const OomPoint& o, const CacheCall& call) {
  const StepPoint* last = view::step_before(steps, o.t);
  if (!call.allocated || !last || last->allocated < 0 || *call.allocated <= last->allocated) return "";
  return "; when it emptied the cache the code still held " + bytes_text(*call.allocated - last->allocated) +
         " more than after step " + std::to_string(last->step) +
         ", likely the failed attempt's tensors (a retry inside the except block keeps them referenced): "
         "leave the except block before retrying";
}

}  // namespace

Verdict empty_cache_retry(const Trace& trace, const nlohmann::json& args) {
  int64_t max_retries = args.value("max_retries", int64_t{3});
  std::vector<Evidence> ev;
  size_t checked = 0, already_empty = 0;
  int64_t freed_total = 0;
  bool any_data = false;  // some retried step was matched by its data, not only by its number
  for (const Attempt& a : trace.attempts) {
    auto steps = view::steps_of(a);
    auto ooms = view::ooms_of(a);
    size_t i = 0;
    while (i < ooms.size()) {
      const OomPoint& first = ooms[i];
      ev.push_back({a.index, first.t, oom_text(first)});
      if (!first.caught)
        return verdict(VerdictStatus::fail, "the " + oom_text(first) + " was not caught: " + attempt_name(a.index) + " " +
                                                view::end_text(a) + "; catch the out-of-memory error, empty the cache and retry the step", ev);
      if (first.step < 0)
        return verdict(VerdictStatus::inconclusive, "the OOM's step is unknown: report steps with the probe so the retry can be matched to it", ev);
      // The OOMs of one step, in a row: the first try and its retries.
      size_t j = i;
      while (j < ooms.size() && ooms[j].step == first.step && ooms[j].caught) ++j;
      int64_t count = static_cast<int64_t>(j - i);
      // The code's empty_cache after OOM k: before the next OOM or the retried step completing.
      auto call_after = [&](size_t k) -> const Event* {
        const OomPoint& o = ooms[k];
        double until = k + 1 < ooms.size() ? ooms[k + 1].t : std::numeric_limits<double>::infinity();
        for (const StepPoint& s : steps)
          if (s.t > o.t && s.step == o.step) { until = std::min(until, s.t); break; }
        for (const Event& e : a.events)
          if (e.t > o.t && e.t <= until && e.kind == events::kEmptyCache) return &e;
        return nullptr;
      };
      // What the code held when it first emptied the cache, for a retry that never made room.
      auto held = [&]() -> std::string {
        const Event* call = call_after(i);
        auto sizes = call ? cache_call(a, *call) : std::nullopt;
        return sizes ? held_note(steps, first, *sizes) : "";
      };
      if (count > max_retries)
        return verdict(VerdictStatus::fail, "step " + std::to_string(first.step) + " ran out of memory " + std::to_string(count) +
                                                " times (max_retries " + std::to_string(max_retries) +
                                                "): emptying the cache and retrying did not make room; lower the batch instead" + held(), ev);
      for (size_t k = i; k < j; ++k) {
        const OomPoint& o = ooms[k];
        const Event* call = call_after(k);
        if (!call)
          return verdict(VerdictStatus::fail, "after the " + oom_text(o) + " the code did not empty the cache before going on "
                                                  "(no empty_cache event): call torch.cuda.empty_cache() before the retry", ev);
        auto sizes = cache_call(a, *call);
        if (!sizes)
          return verdict(VerdictStatus::inconclusive, "the empty_cache call after the " + oom_text(o) +
                                                          " reported no sizes and no memory samples surround it: cannot tell whether the cache shrank", ev);
        ev.push_back({a.index, call->t, "empty_cache: " + bytes_text(sizes->before) + " -> " + bytes_text(sizes->after) +
                                            (sizes->freeable ? " (" + bytes_text(*sizes->freeable) + " free in the cache before)" : "")});
        if (sizes->freed() <= 0 && sizes->freeable && *sizes->freeable == 0) {
          ++already_empty;  // nothing was left to free (Note [What empty_cache could free])
        } else if (sizes->freed() <= 0) {
          std::string figures = "reserved " + bytes_text(sizes->before) + " before, " + bytes_text(sizes->after) + " after";
          std::string what = sizes->freeable ? " though " + bytes_text(*sizes->freeable) + " of the cache was free before it (" + figures + ")"
                                             : " (" + figures + ")";
          return verdict(VerdictStatus::fail, "after the " + oom_text(o) + " empty_cache freed nothing" + what +
                                                  ": the failed step's tensors were still referenced; drop them before emptying the cache", ev);
        } else {
          freed_total += sizes->freed();
        }
      }
      const OomPoint& last = ooms[j - 1];
      const StepPoint* done = nullptr;
      // Note [The retried step is its data]: where the probe fingerprinted the data, "the same step" is the
      // same batch; a step number completing again proves nothing (optimizer steps are counted, so the next
      // batch completes the failed step's number). Without data, the step number has to do.
      std::vector<const StepPoint*> after;
      for (const StepPoint& s : steps)
        if (s.t > last.t) after.push_back(&s);
      // (With no step after it, the step never completed: the sentence below says why, as without data.)
      if (auto redone = after.empty() ? std::nullopt : view::redone_by(last.data, after)) {
        if (*redone == 0)
          return verdict(VerdictStatus::fail, "after the " + oom_text(last) + " the code emptied the cache but never trained on the failed batch again: "
                                                  "the next step that completed (step " + std::to_string(after.front()->step) + ") trained on " +
                                                  after.front()->data.text() + ", so " + last.data.text() + " was dropped instead of retried", ev);
        done = after[*redone - 1];
        any_data = true;
      } else {
        for (const StepPoint& s : steps)
          if (s.t > last.t && s.step == last.step) { done = &s; break; }
      }
      if (!done) {
        const StepPoint* next = view::step_after(steps, last.t);
        std::string then = next ? "; it went on with step " + std::to_string(next->step) + ": it skipped the step instead of retrying it"
                                : ": " + attempt_name(a.index) + " " + view::end_text(a) + held();
        return verdict(VerdictStatus::fail, "after the " + oom_text(last) + " the code emptied the cache but step " +
                                                std::to_string(last.step) + " never completed" + then, ev);
      }
      ev.push_back({a.index, done->t, "step " + std::to_string(done->step) + " completed" +
                                          (last.data.known() ? " on the failed batch" : "")});
      checked += static_cast<size_t>(count);
      i = j;
    }
  }
  // "an empty_cache that freed 2.00 GiB", "an empty_cache, which freed 4.06 MiB in all (the cache held no
  // free blocks before 1 of them: nothing was left to free)"
  std::string what;
  if (already_empty == 0)
    what = "an empty_cache that freed " + bytes_text(freed_total) + (checked == 1 ? "" : " in all");
  else if (already_empty == checked)
    what = std::string("an empty_cache that found the cache already empty (no free blocks before ") +
            (checked == 1 ? "it" : "any of them") + ": nothing was left to free)";
  else
    what = "an empty_cache, which freed " + bytes_text(freed_total) + " in all (the cache held no free blocks before " +
            std::to_string(already_empty) + " of them: nothing was left to free)";
  return verdict(VerdictStatus::pass, (checked == 1 ? std::string("the OOM was") : "each of the " + std::to_string(checked) + " OOMs was") +
                                          " followed by " + what + ", and the same step then completed" + (any_data ? " on the same data" : "") + " within " +
                                          std::to_string(max_retries) + " retries", ev);
}

namespace {

struct Checkpoint {
  int attempt = 0;
  double t = 0;
  std::string path;
  int64_t step = -1;
  std::string digest;        // what was written (Note [A checkpoint is its content]); empty: not reported
  int64_t completed = -1;    // the saving process's count of completed steps when it saved
  int optimizer_state = -1;  // the job's optimizer held state when it saved: 1, 0; -1: not reported
};

Checkpoint checkpoint_of(const Attempt& a, const Event& e) {
  Checkpoint c{a.index, e.t, e.text("path"), e.integer("step"), e.text("digest"), e.integer("completed", -1)};
  if (e.has("optimizer_state") && e.fields["optimizer_state"].is_boolean()) c.optimizer_state = e.fields["optimizer_state"].get<bool>() ? 1 : 0;
  return c;
}

bool same_path(const std::string& a, const std::string& b) {
  return a == b || std::filesystem::path(a).lexically_normal() == std::filesystem::path(b).lexically_normal();
}

std::string checkpoint_text(const Checkpoint& c) { return c.path + " (step " + std::to_string(c.step) + ")"; }

// Per step, the metric as the combined run reported it: a resumed attempt's value replaces the one of the
// attempt that died (it redid the step).
std::map<int64_t, double> metric_by_step(const std::vector<Attempt>& attempts, const std::string& metric) {
  std::map<int64_t, double> out;
  for (const Attempt& a : attempts)
    for (const StepPoint& s : view::steps_of(a))
      if (auto it = s.metrics.find(metric); it != s.metrics.end()) out[s.step] = it->second;
  return out;
}

}  // namespace

namespace {
Verdict checkpoint_resume_one(const Trace& trace, const nlohmann::json& args);

// Rank k's view of a distributed job's trace (Note [Checkpoints per rank]).
Trace rank_view(const Trace& trace, int k) {
  Trace out = trace;
  for (std::vector<Attempt>* list : {&out.attempts, &out.reference})
    for (Attempt& a : *list) {
      if (a.ranks.empty()) continue;
      bool died = a.ended_by_oom();
      bool own_saves = false;
      for (const Event& e : a.events) own_saves = own_saves || (rank_of(e) == k && e.src == events::kSrcProbe && e.kind == events::kSave);
      // The attempt died of an OOM on some rank: so did every rank's view of it, with the records of that OOM
      // (another rank's `oom` or refusal: Note [An OOM is an event] in trace.cpp) beside its own events.
      auto records_oom = [](const Event& e) {
        return (e.src == events::kSrcProbe && e.kind == events::kOom) || is_refusal(e);
      };
      std::vector<Event> kept, others_ooms;
      for (Event& e : a.events) {
        if (rank_of(e) == k || (!own_saves && e.src == events::kSrcProbe && e.kind == events::kSave)) kept.push_back(std::move(e));
        else if (died && records_oom(e)) others_ooms.push_back(std::move(e));
      }
      // A save another rank made (rank 0's file, which every rank loads) at step N came after this rank's own
      // step N, whatever the clock says: the ranks are not in lockstep, and this rank may report its step N a
      // little after rank 0 saved. Placed after it, the save is followed by this rank's step N+1, as rank 0's
      // is (an attempt's step after the save is the batch a resume must train on next).
      if (!own_saves) {
        auto whole = [](const Event& e, const char* key) -> int64_t {
          auto it = e.fields.is_object() ? e.fields.find(key) : e.fields.end();
          return it != e.fields.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
        };
        bool moved = false;
        for (Event& save : kept) {
          if (save.src != events::kSrcProbe || save.kind != events::kSave || rank_of(save) == k) continue;
          const int64_t step = whole(save, "step");
          for (const Event& own : kept)
            if (own.src == events::kSrcProbe && own.kind == events::kStep && rank_of(own) == k && step >= 0 &&
                whole(own, "step") == step && own.t >= save.t) {
              save.t = std::nextafter(own.t, std::numeric_limits<double>::infinity());
              moved = true;
            }
        }
        if (moved)
          std::stable_sort(kept.begin(), kept.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
      }
      a.events = std::move(kept);
      a.ranks.clear();
      a.oom_message = died;
      // Another rank's OOM tells this rank that the attempt died, not what this rank trained on: its batch
      // is that rank's (DistributedSampler gives each rank its own), so it goes (ranks_test.cpp:
      // AnotherRanksBatchIsNotThisRanksData). This rank, stopped inside the step, is then judged by its step
      // numbers, or by its own data where it recorded the step.
      for (Event& e : others_ooms)
        if (e.fields.is_object()) e.fields.erase("data");
      if (died && !a.ended_by_oom()) {
        a.events.insert(a.events.end(), others_ooms.begin(), others_ooms.end());
        std::stable_sort(a.events.begin(), a.events.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
      }
    }
  return out;
}
}  // namespace

// Note [Checkpoints per rank]
// After a distributed job's attempt dies of an OOM, `restart` starts every rank again, and each rank must
// resume: load the newest checkpoint and go on at the step after it. So checkpoint_resume judges each
// rank on its own view of the trace: its own events, the attempt's death (any rank's OOM ends the attempt
// for all), and the checkpoints it saved itself, or, when it saved none (DDP code usually saves on rank 0
// only and every rank loads that file), those every rank saved. The job passes when every rank passes; the
// ranks that fail (or, short of that, the first that is inconclusive) give the verdict, named.
Verdict checkpoint_resume(const Trace& trace, const nlohmann::json& args) {
  int ranks = 0;
  for (const Attempt& a : trace.attempts) ranks = std::max(ranks, static_cast<int>(a.ranks.size()));
  if (ranks < 2) return checkpoint_resume_one(trace, args);
  std::optional<Verdict> first_inconclusive, failed;
  Verdict rank0;
  for (int k = 0; k < ranks; ++k) {
    Verdict v = checkpoint_resume_one(rank_view(trace, k), args);
    v.reason = "rank " + std::to_string(k) + ": " + v.reason;
    // Every failing rank is named: the first may fail only by the consequence (its peers' collectives broke
    // when rank 1 started from scratch) while a later one shows the cause.
    if (v.status == VerdictStatus::fail) {
      if (!failed) failed = v;
      else failed->reason += "; " + v.reason;
    }
    if (v.status != VerdictStatus::pass && v.status != VerdictStatus::fail && !first_inconclusive) first_inconclusive = v;
    if (k == 0) rank0 = v;
  }
  if (failed) return *failed;
  if (first_inconclusive) return *first_inconclusive;
  rank0.reason = "every rank resumed; " + rank0.reason;
  return rank0;
}

namespace {

// Note [A checkpoint is its content]
// Where the probe reported digests (python/oomharness/probe/evidence.py), a checkpoint is what was written, not
// where: the atomic save (torch.save to last.pt.tmp, os.replace to last.pt), a copy to best.pt, a save to an
// in-memory stream written out by the code, a relative path saved and an absolute one loaded are all the
// same state. The state saved last before the death is the newest save and every save of the same process
// made with no step completed between (shards, last.pt and best.pt). The restarted attempt passes when:
//   - among what it loaded before its first step is one of those states (a pretrained init loaded beside
//     it is fine; an older state or only a state this job never saved is not);
//   - its model's state at its first training forward holds that state (`model_state`: no tensor of the
//     model matches no loaded object, and none matches only objects outside the newest state): a file
//     loaded and then not put into the model fails, as a pretrained init put into it does;
//   - its first step trained on the data that followed the checkpoint in the attempt that saved it (the
//     first step, or the OOM, after the save there: Note [A step is its data]). A loop restarted at step 1
//     trains on step 1's batch again. Where the data is not fingerprinted, the step numbers have to do;
//     where the resumed batch matches no batch trained before (data drawn at random, unseeded), where it
//     went on cannot be told: inconclusive.
std::string short_digest(const std::string& d) { return d.substr(0, 8); }

std::string state_text(const Checkpoint& c) {
  return c.path + " (step " + std::to_string(c.step) + ", content " + short_digest(c.digest) + ")";
}

std::optional<Verdict> resume_by_content(const Trace& trace, size_t i, const std::vector<Checkpoint>& saves,
                                         std::vector<Evidence>& ev, int64_t& lost_total, std::string& resumed,
                                         std::optional<int64_t> max_lost) {
  const Attempt& a = trace.attempts[i];
  const Attempt& next = trace.attempts[i + 1];
  const Checkpoint& newest = saves.back();
  // The newest state: the newest save and those of its process with no step completed between.
  std::set<std::string> newest_digests;
  for (auto it = saves.rbegin(); it != saves.rend(); ++it) {
    if (it->attempt != newest.attempt || it->completed != newest.completed || it->digest.empty()) break;
    newest_digests.insert(it->digest);
  }
  auto next_steps = view::steps_of(next);
  double first_t = next_steps.empty() ? std::numeric_limits<double>::infinity() : next_steps.front().t;
  std::vector<Checkpoint> loads;
  // The model's state at its first training forward: the `model_state` of the attempt's first step. A module
  // run in training mode outside any step (Ultralytics builds its model again on resume and runs the Detect
  // head once to find its strides, before the state is put in) is not the model that trained; only when no
  // model_state names the first step is the first one taken.
  const Event* model_state = nullptr;
  const Event* first_model_state = nullptr;
  const int64_t first_step = next_steps.empty() ? -1 : next_steps.front().step;
  for (const Event& e : next.events) {
    if (e.src != events::kSrcProbe) continue;
    if (e.kind == events::kLoad && e.t <= first_t) loads.push_back(checkpoint_of(next, e));
    if (e.kind != events::kModelState) continue;
    if (!first_model_state) first_model_state = &e;
    if (!model_state && first_step >= 0 && e.integer("step", -1) == first_step) model_state = &e;
  }
  if (!model_state) model_state = first_model_state;
  const Event* state_at_first_step = model_state;  // what it restored is read there too, below
  std::string who = attempt_name(next.index);
  if (loads.empty())
    return verdict(VerdictStatus::fail, who + " started from scratch: it loaded no checkpoint, though " + state_text(newest) +
                                            " was saved before the OOM", ev);
  const Checkpoint* loaded = nullptr;
  for (const Checkpoint& l : loads)
    if (newest_digests.count(l.digest)) { loaded = &l; break; }
  std::string paths;
  for (const Checkpoint& l : loads) paths += (paths.empty() ? "" : ", ") + l.path;
  if (!loaded) {
    ev.push_back({next.index, loads.front().t, "loaded " + paths});
    for (const Checkpoint& l : loads)
      for (const Checkpoint& s : saves)
        if (!l.digest.empty() && s.digest == l.digest)
          return verdict(VerdictStatus::fail, who + " loaded " + l.path + ", which holds the state saved at step " + std::to_string(s.step) +
                                                  " (" + s.path + ", " + attempt_name(s.attempt) + "), not the newest state " +
                                                  state_text(newest) + " saved before the OOM", ev);
    return verdict(VerdictStatus::fail, who + " loaded only " + paths + ", which " + (loads.size() == 1 ? "holds" : "hold") +
                                            " no state this job saved (a pretrained init?), not the newest checkpoint " +
                                            state_text(newest) + " saved before the OOM", ev);
  }
  ev.push_back({next.index, loaded->t, "loaded " + loaded->path + ", the state saved as " + newest.path + " at step " + std::to_string(newest.step)});
  // The model's state at its first training forward. Tensors no loaded object names (`unseen`: weights
  // loaded by other means, safetensors beside an optimizer.pt) are not judged; when none is named at all,
  // there is nothing to compare.
  if (model_state && model_state->integer("unseen", 0) >= model_state->integer("tensors", 0)) model_state = nullptr;
  if (model_state) {
    int64_t tensors = model_state->integer("tensors", 0);
    int64_t unmatched = model_state->integer("unmatched", 0);
    if (unmatched > 0)
      return verdict(VerdictStatus::fail, who + " loaded " + loaded->path + " (step " + std::to_string(newest.step) + ") but " +
                                              std::to_string(unmatched) + " of its model's " + std::to_string(tensors) +
                                              " tensors at its first step match no loaded checkpoint: the state was read but not put "
                                              "into the model (load_state_dict), so training went on from the model's own weights", ev);
    const nlohmann::json& from = model_state->fields.contains("from") ? model_state->fields["from"] : nlohmann::json::array();
    for (const auto& group : from.is_array() ? from : nlohmann::json::array()) {
      bool in_newest = false;
      std::string other;
      if (group.is_object() && group.contains("digests") && group["digests"].is_array())
        for (const auto& d : group["digests"])
          if (d.is_string()) {
            if (newest_digests.count(d.get<std::string>())) in_newest = true;
            for (const Checkpoint& l : loads)
              if (l.digest == d.get<std::string>() && other.find(l.path) == std::string::npos) other += (other.empty() ? "" : ", ") + l.path;
          }
      if (!in_newest)
        return verdict(VerdictStatus::fail, who + " loaded " + loaded->path + " (step " + std::to_string(newest.step) + ") but " +
                                                std::to_string(whole_member_or(group, "tensors", int64_t{0})) + " of its model's " + std::to_string(tensors) +
                                                " tensors at its first step are those of " + (other.empty() ? "another checkpoint" : other) +
                                                ", not of the newest state: the model took an older or pretrained state", ev);
    }
    ev.push_back({next.index, model_state->t, "the model held the loaded state at its first step"});
  }
  // Note [What a resume restored] (python/oomharness/probe/checkpoints.py): the optimizer's state, when the job's
  // optimizer held one as it saved, must be restored: Adam without its moments starts over.
  std::string restored_words;
  auto has_restored = [](const Event* e) { return e && e->has("restored") && e->fields["restored"].is_array(); };
  const Event* restored_event = has_restored(state_at_first_step) ? state_at_first_step : nullptr;
  if (!restored_event)
    for (const Event& e : next.events)
      if (e.src == events::kSrcProbe && e.kind == events::kModelState && has_restored(&e)) {
        restored_event = &e;
        break;
      }
  if (restored_event) {
    std::set<std::string> parts;
    for (const auto& p : restored_event->fields["restored"])
      if (p.is_string()) parts.insert(p.get<std::string>());
    if (newest.optimizer_state == 1 && !parts.count("optimizer"))
      return verdict(VerdictStatus::fail, who + " loaded " + state_text(newest) + " but did not restore the optimizer's state, "
                                              "which the job's optimizer held when it saved: the optimizer started again from an empty state "
                                              "(Adam's moments at zero), so training after the resume is not the training before it; "
                                              "save optimizer.state_dict() with the model and load it back", ev);
    // The parts named in the user's words, in one order.
    restored_words = "model";
    for (const char* p : {"optimizer", "scheduler", "scaler", "rng"})
      if (parts.count(p))
        restored_words += std::string(", ") + (std::string(p) == "scaler" ? "GradScaler" : std::string(p) == "rng" ? "RNG state" :
                                               std::string(p) == "scheduler" ? "LR scheduler" : p);
    if (newest.optimizer_state == 0 && !parts.count("optimizer")) restored_words += " (the optimizer held no state)";
  }
  if (next_steps.empty())
    return verdict(VerdictStatus::fail, who + " loaded " + state_text(newest) + " but completed no step: it " + view::end_text(next), ev);
  const StepPoint& first = next_steps.front();
  ev.push_back({next.index, first.t, "first step " + std::to_string(first.step)});
  // The data that followed the checkpoint where it was saved: the first step (or OOM) after the save.
  const Attempt& saver = trace.attempts[position_of(trace, newest.attempt)];
  view::BatchData after_save;
  int64_t after_step = -1;
  double after_t = std::numeric_limits<double>::infinity();
  for (const StepPoint& s : view::steps_of(saver))
    if (s.t > newest.t) { after_save = s.data; after_step = s.step; after_t = s.t; break; }
  for (const OomPoint& o : view::ooms_of(saver))  // an OOM before that step: the batch it was training on
    if (o.t > newest.t) {
      if (o.t < after_t && o.data.known()) { after_save = o.data; after_step = o.step; }
      break;
    }
  bool by_data = after_save.known() && first.data.known();
  // A first batch that an earlier attempt trained on is evidence on its own, also where the batch after
  // the checkpoint was not recorded (a rank stopped inside that step: Note [Checkpoints per rank]).
  if (first.data.known() && !(by_data && first.data.same(after_save))) {
    int64_t expected = after_step >= 0 ? after_step : newest.step + 1;
    for (size_t k = 0; k <= i; ++k)
      for (const StepPoint& s : view::steps_of(trace.attempts[k]))
        if (s.data.same(first.data))
          return verdict(VerdictStatus::fail, who + " loaded " + state_text(newest) + " but its first step trained on the batch that " +
                                                  attempt_name(trace.attempts[k].index) + " trained on at its step " + std::to_string(s.step) +
                                                  ", not the one that followed the checkpoint (" + attempt_name(saver.index) + "'s " +
                                                  view::step_text(expected) + "): " +
                                                  (s.step < expected ? "its loop went back (restarted at step 1?)" : "its loop skipped ahead") +
                                                  "; restore the step and the data position with the weights", ev);
    if (by_data)
      return verdict(VerdictStatus::inconclusive, who + " loaded " + state_text(newest) + " but its first step trained on a batch that no earlier "
                                                      "attempt trained on, so whether it went on after the checkpoint cannot be told (is the data order seeded?)", ev);
  }
  if (!by_data && first.step != newest.step + 1)
    return verdict(VerdictStatus::fail, who + " resumed at step " + std::to_string(first.step) + ", expected step " +
                                            std::to_string(newest.step + 1) + " (the checkpoint was saved at step " + std::to_string(newest.step) + ")", ev);
  auto reached = view::highest_step(view::steps_of(a));
  int64_t lost = reached ? std::max<int64_t>(0, *reached - newest.step) : 0;
  if (max_lost && lost > *max_lost)
    return verdict(VerdictStatus::fail, attempt_name(a.index) + " reached step " + std::to_string(reached.value_or(0)) +
                                            " but its newest checkpoint was at step " + std::to_string(newest.step) + ": " +
                                            std::to_string(lost) + " steps lost (limit " + std::to_string(*max_lost) + "); checkpoint more often", ev);
  lost_total += lost;
  if (resumed.empty())
    resumed = who + " resumed from " + loaded->path + " (the state saved at step " + std::to_string(newest.step) +
              (loaded->digest != newest.digest ? ", with " + std::to_string(newest_digests.size() - 1) + " more saved beside it"
               : loaded->path != newest.path   ? " as " + newest.path
                                               : std::string()) +
              (model_state ? ", which its model held" : "") +
              ") " + (by_data ? "on the batch that followed it" : "at step " + std::to_string(first.step)) + " after the OOM ended " +
              attempt_name(a.index) + (restored_words.empty() ? std::string() : "; it restored: " + restored_words);
  return std::nullopt;
}

Verdict checkpoint_resume_one(const Trace& trace, const nlohmann::json& args) {
  std::optional<int64_t> max_lost;
  if (args.contains("max_lost_steps") && args["max_lost_steps"].is_number()) max_lost = args["max_lost_steps"].get<int64_t>();
  std::vector<Evidence> ev;
  std::vector<Checkpoint> saves;  // in time order, growing as attempts are walked
  bool any_died = false;
  std::string resumed;            // for the pass sentence
  int64_t lost_total = 0;
  for (size_t i = 0; i < trace.attempts.size(); ++i) {
    const Attempt& a = trace.attempts[i];
    for (const Event& e : a.events)
      if (e.src == events::kSrcProbe && e.kind == events::kSave) saves.push_back(checkpoint_of(a, e));
    if (!a.ended_by_oom()) continue;
    any_died = true;
    auto steps = view::steps_of(a);
    auto reached = view::highest_step(steps);
    auto ooms = view::ooms_of(a);
    std::string death = ooms.empty() ? "the OOM" : "the " + oom_text(ooms.back());
    ev.push_back({a.index, a.end, attempt_name(a.index) + " died of " + death});
    if (i + 1 >= trace.attempts.size())
      return verdict(VerdictStatus::fail, attempt_name(a.index) + " died of " + death +
                                              " but was not restarted: give the job `restart: {max: 1, on: [oom]}`", ev);
    if (saves.empty())
      return verdict(VerdictStatus::inconclusive, attempt_name(a.index) + " died of " + death +
                                                      " before any checkpoint was saved: nothing to resume from; inject the fault after the first checkpoint_save", ev);
    const Checkpoint& newest = saves.back();
    ev.push_back({newest.attempt, newest.t, "checkpoint " + checkpoint_text(newest) + " saved"});
    const Attempt& next = trace.attempts[i + 1];
    if (!newest.digest.empty()) {
      // Note [A checkpoint is its content]: the probe said what was written and what was loaded.
      std::optional<Verdict> v = resume_by_content(trace, i, saves, ev, lost_total, resumed, max_lost);
      if (v) return *v;
      continue;
    }
    const Event* load = nullptr;
    for (const Event& e : next.events)
      if (e.src == events::kSrcProbe && e.kind == events::kLoad) { load = &e; break; }
    if (!load)
      return verdict(VerdictStatus::fail, attempt_name(next.index) + " started from scratch: it loaded no checkpoint, though " +
                                              checkpoint_text(newest) + " was saved before the OOM", ev);
    Checkpoint loaded{next.index, load->t, load->text("path"), load->integer("step")};
    ev.push_back({next.index, load->t, "loaded " + checkpoint_text(loaded)});
    if (!same_path(loaded.path, newest.path))
      return verdict(VerdictStatus::fail, attempt_name(next.index) + " loaded " + checkpoint_text(loaded) +
                                              ", not the newest checkpoint " + checkpoint_text(newest) + " saved before the OOM", ev);
    if (loaded.step != newest.step)
      return verdict(VerdictStatus::fail, attempt_name(next.index) + " loaded " + newest.path + " but resumed its count at step " +
                                              std::to_string(loaded.step) + ", while it was saved at step " +
                                              std::to_string(newest.step) + ": the step counter was not restored", ev);
    auto next_steps = view::steps_of(next);
    if (next_steps.empty())
      return verdict(VerdictStatus::fail, attempt_name(next.index) + " loaded " + checkpoint_text(newest) +
                                              " but completed no step: it " + view::end_text(next), ev);
    const StepPoint& first = next_steps.front();
    ev.push_back({next.index, first.t, "first step " + std::to_string(first.step)});
    if (first.step != newest.step + 1)
      return verdict(VerdictStatus::fail, attempt_name(next.index) + " resumed at step " + std::to_string(first.step) +
                                              ", expected step " + std::to_string(newest.step + 1) +
                                              " (the checkpoint was saved at step " + std::to_string(newest.step) + ")", ev);
    int64_t lost = reached ? std::max<int64_t>(0, *reached - newest.step) : 0;
    if (max_lost && lost > *max_lost)
      return verdict(VerdictStatus::fail, attempt_name(a.index) + " reached step " + std::to_string(reached.value_or(0)) +
                                              " but its newest checkpoint was at step " + std::to_string(newest.step) + ": " +
                                              std::to_string(lost) + " steps lost (limit " + std::to_string(*max_lost) +
                                              "); checkpoint more often", ev);
    lost_total += lost;
    if (resumed.empty())
      resumed = attempt_name(next.index) + " resumed from " + checkpoint_text(newest) + " at step " + std::to_string(first.step) +
                " after the OOM ended " + attempt_name(a.index);
  }
  if (!any_died) {
    size_t seen = view::ooms_of(trace).size();
    return verdict(VerdictStatus::inconclusive, "the code saw " + std::to_string(seen) + (seen == 1 ? " OOM" : " OOMs") +
                                                    " but no attempt died of one, so there was nothing to resume; let the OOM end the process to test resuming");
  }
  if (auto missed = target_missed(trace))
    return verdict(VerdictStatus::fail, resumed + ", but " + *missed, ev);
  std::string reason = resumed + ", lost " + std::to_string(lost_total) + (lost_total == 1 ? " step" : " steps") +
                       " and " + target_reached(trace);
  if (args.contains("reference") && args["reference"].is_object()) {
    const nlohmann::json& ref = args["reference"];
    std::string metric = ref.value("metric", std::string("loss"));
    double rtol = ref.value("rtol", 1e-5), atol = ref.value("atol", 0.0);
    // Note [Shape-only mode] (python/oomharness/virtual_device/shape_only.py): a run whose values were stand-ins compares
    // nothing, so it can never pass a comparison of values.
    for (const auto* attempts : {&trace.attempts, &trace.reference})
      for (const Attempt& at : *attempts)
        for (const Event& e : at.events)
          if (e.kind == events::kShapeOnly || e.kind == events::kValuesNotComputed)
            return verdict(VerdictStatus::inconclusive, "resuming worked, but the run was shape-only (oomharness "
                                                        "predict): its " + metric + " values were not computed, so "
                                                        "they cannot be compared with the uninterrupted run's", ev);
    if (trace.reference.empty())
      return verdict(VerdictStatus::inconclusive, "resuming worked, but there is no reference run in the trace to compare " +
                                                      metric + " with: the runner did not run the job without faults", ev);
    // Note [A reference run that resumed] (issue 42, class 11): the reference run starts in an empty {workdir},
    // but a program that keeps its checkpoints elsewhere (a path relative to the suite's folder) finds the
    // faulted attempts' files and resumes from them: it trained nothing to compare with, so say which file.
    // (`saves` holds every attempt's saves by now: the loop above walked them all.)
    for (const Attempt& r : trace.reference)
      for (const Event& e : r.events) {
        if (e.src != events::kSrcProbe || e.kind != events::kLoad) continue;
        const Checkpoint load = checkpoint_of(r, e);
        const Checkpoint* saved = nullptr;  // the newest save of what it loaded (a path is written again and again)
        for (const Checkpoint& save : saves)
          if ((!load.digest.empty() && load.digest == save.digest) || (load.path != "<stream>" && same_path(load.path, save.path)))
            saved = &save;
        if (!saved) continue;
        ev.push_back({r.index, load.t, "the reference run loaded " + load.path});
        return verdict(VerdictStatus::inconclusive,
                       "resuming worked, but the reference run was not an uninterrupted one: it loaded " + load.path +
                           ", which " + attempt_name(saved->attempt) + " saved at step " + std::to_string(saved->step) +
                           ", and went on from there instead of training from the start, so there is nothing to "
                           "compare the " + metric + " with; keep the checkpoints under {workdir}, which the "
                           "reference run gets empty, or give the job `cwd: {workdir}`",
                       ev);
      }
    auto got = metric_by_step(trace.attempts, metric);
    auto want = metric_by_step(trace.reference, metric);
    size_t compared = 0;
    for (const auto& [step, expected] : want) {
      auto it = got.find(step);
      if (it == got.end()) continue;
      ++compared;
      if (std::fabs(it->second - expected) > atol + rtol * std::fabs(expected))
        return verdict(VerdictStatus::fail, "step " + std::to_string(step) + "'s " + metric + " " + number_text(it->second) +
                                                " differs from the uninterrupted run's " + number_text(expected) + " (rtol " +
                                                number_text(rtol) + ", atol " + number_text(atol) +
                                                "): the resume did not restore everything (optimizer, schedule, random or data-loader state)", ev);
    }
    if (compared == 0)
      return verdict(VerdictStatus::inconclusive, "resuming worked, but the resumed and the reference runs reported no " + metric +
                                                      " at the same steps", ev);
    reason += ", with " + metric + " matching the uninterrupted run at " + std::to_string(compared) + " steps";
  }
  return verdict(VerdictStatus::pass, reason, ev);
}
}  // namespace

Verdict graceful_exit(const Trace& trace, const nlohmann::json& args) {
  std::optional<double> within;
  if (args.contains("within") && args["within"].is_number()) within = args["within"].get<double>();
  std::string pattern = args.value("message", oom::message_pattern());
  // RE2, as every pattern a user or a job feeds (issue 12): linear in the output, no recursion.
  RE2::Options options;
  options.set_log_errors(false);
  options.set_case_sensitive(false);
  const RE2 message(pattern, options);
  if (!message.ok())  // the registry checked it with the same options; a direct call may not have
    return verdict(VerdictStatus::inconclusive, "graceful_exit's 'message' is not a valid regular expression: " + message.error());
  for (const Attempt& a : trace.attempts) {
    auto ooms = view::ooms_of(a);
    if (ooms.empty()) continue;
    const OomPoint& o = ooms.front();
    std::vector<Evidence> ev{{a.index, o.t, oom_text(o)}, {a.index, a.end, attempt_name(a.index) + " " + view::end_text(a)}};
    std::string who = attempt_name(a.index);
    switch (a.end_kind) {
      case AttemptEnd::interrupted:
        return verdict(VerdictStatus::inconclusive, who + " was interrupted after the " + oom_text(o) + ", so how it would have ended is unknown", ev);
      case AttemptEnd::timed_out:
        return verdict(VerdictStatus::fail, who + " hung after the " + oom_text(o) + ": it " + view::end_text(a) +
                                                "; on an OOM it cannot handle the job must exit with an error", ev);
      case AttemptEnd::signalled:
      case AttemptEnd::failed_to_start:
        return verdict(VerdictStatus::fail, who + " " + view::end_text(a) + " after the " + oom_text(o) +
                                                ": not a clean exit; let the error propagate and exit non-zero", ev);
      case AttemptEnd::exited: break;
    }
    if (!a.exit_code || *a.exit_code == 0)
      return verdict(VerdictStatus::fail, who + " exited with code 0 after the " + oom_text(o) +
                                              ": a job that gives up on an OOM must exit non-zero so that schedulers see the failure", ev);
    auto injections = view::injections_of(a);
    double from = injections.empty() ? a.start : injections.front()->t;
    std::string since = injections.empty() ? "its start" : "the first injected failure";
    double took = a.end - from;
    if (within && took > *within)
      return verdict(VerdictStatus::fail, who + " took " + view::seconds_text(took) + " to exit after " + since + " (limit " +
                                              view::seconds_text(*within) + ")", ev);
    // Note [An OOM is an event] (trace.cpp): the probe's record of the OOM and the exit code decide (issue 42,
    // class 12: a job that logs its OOM to a file and exits 1 exited gracefully); the output is asked for only
    // when the user gave a `message` to look for, or when no probe recorded the OOM.
    const bool asked = pattern != oom::message_pattern();  // the registry fills in the default
    const bool printed = a.oom_message || RE2::PartialMatch(a.output_tail, message);
    if (!printed && (asked || !o.from_probe))
      return verdict(VerdictStatus::fail, who + " " + view::end_text(a) + " after the " + oom_text(o) +
                                              " but printed no out-of-memory message (" +
                                              (pattern == oom::message_pattern() ? std::string("none of the OOM table's words")
                                                                                 : "looked for /" + pattern + "/") +
                                              "): let the error reach the log", ev);
    const std::string how = printed ? " with an out-of-memory message "
                                    : " " + std::string("(the probe recorded the OOM; the output did not mention it) ");
    return verdict(VerdictStatus::pass, who + " " + view::end_text(a) + how + view::seconds_text(took) + " after " + since +
                                            (within ? " (limit " + view::seconds_text(*within) + ")" : ""), ev);
  }
  // Unreachable through the registry (the absorption rule runs first), but a direct call may get here.
  return verdict(VerdictStatus::inconclusive, "no out-of-memory error happened: nothing to recover from");
}

// Note [Ranks recover together]
// A distributed job's ranks meet in collectives; after one rank's OOM they stay in step only when every rank
// takes the same recovery before the next collective: all halve (or all redo the step at one batch size),
// or all stop. From the first OOM any rank saw, each step number that several ranks completed must have one
// batch size on all of them; when a rank died of the OOM, every other rank must have ended within
// `within` seconds of it (a runner that found them hung ended them: that is a hang, never a recovery).
// Steps count from the OOM's step (the step in progress when it happened), by number: ranks' clocks agree,
// but a step number says "the same step" without relying on them.
Verdict ranks_recover_together(const Trace& trace, const nlohmann::json& args) {
  double within = args.value("within", 30.0);
  bool distributed = false, any_oom = false;
  for (const Attempt& a : trace.attempts) {
    if (a.ranks.size() < 2) continue;
    distributed = true;
    auto ooms = view::ooms_of(a);
    if (ooms.empty()) continue;
    any_oom = true;
    const view::OomPoint& first = ooms.front();
    int oom_rank = -1;
    for (const Event& e : a.events)
      if (e.src == events::kSrcProbe && e.kind == events::kOom && e.t == first.t) oom_rank = rank_of(e);
    std::string who = oom_rank >= 0 ? "rank " + std::to_string(oom_rank) + "'s" : "an";
    std::string at = " OOM at " + view::step_text(first.step);
    // Same batch size at every step from the OOM's on.
    std::map<int64_t, std::vector<std::pair<int, int64_t>>> batches;  // step -> (rank, batch)
    for (const RankEnd& r : a.ranks)
      for (const view::StepPoint& s : view::steps_of_rank(a, r.rank))
        if ((first.step >= 0 ? s.step >= first.step : s.t >= first.t) && s.batch >= 0) batches[s.step].push_back({r.rank, s.batch});
    for (const auto& [step, seen] : batches)
      for (const auto& [rank, batch] : seen)
        if (batch != seen.front().second)
          return verdict(VerdictStatus::fail,
                         "after " + who + at + ", step " + std::to_string(step) + " ran at batch " +
                             std::to_string(seen.front().second) + " on rank " + std::to_string(seen.front().first) + " but at batch " +
                             std::to_string(batch) + " on rank " + std::to_string(rank) + ": the ranks did not recover together",
                         {{a.index, first.t, "the first OOM"}});
    // A rank that died of it: the others end soon after, by themselves.
    for (const RankEnd& dead : a.ranks) {
      if (!dead.ended_by_oom) continue;
      for (const RankEnd& r : a.ranks) {
        if (r.rank == dead.rank) continue;
        bool stopped = r.end_kind == AttemptEnd::timed_out || r.end_kind == AttemptEnd::interrupted;
        if (stopped || r.end - dead.end > within)
          return verdict(VerdictStatus::fail,
                         "rank " + std::to_string(dead.rank) + " died of the OOM but rank " + std::to_string(r.rank) +
                             (stopped ? " did not end by itself (the runner stopped it)"
                                      : " ran on for " + view::seconds_text(r.end - dead.end) + " (limit " + view::seconds_text(within) + ")"),
                         {{a.index, dead.end, "rank " + std::to_string(dead.rank) + " died"}, {a.index, r.end, "rank " + std::to_string(r.rank) + " ended"}});
      }
    }
  }
  if (!distributed) return verdict(VerdictStatus::inconclusive, "not a distributed job: no attempt ran several ranks (`ranks: N`)");
  if (!any_oom) return verdict(VerdictStatus::inconclusive, "no rank saw an out-of-memory error, so there was no recovery to compare");
  return verdict(VerdictStatus::pass, "after every OOM, all ranks ran each later step at the same batch size");
}

}  // namespace oomh::checks
