// Reading an event log: EventLogReader, which thins a long one as it reads (Note [Thinned event logs]).

#include "oomharness/policies/trace.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "event_scan.h"
#include "oomharness/events.h"
#include "trace_view.h"

namespace oomh {

// Note [Thinned event logs]
// A long training writes a `step` event per step, and its phases, samples and memory figures: 10^7 lines
// are a few days of it. Held as Events that is gigabytes, so the reader keeps what the checks and the
// reports use, and folds the rest as it reads:
// - Routine events (probe `step`, `phase`, `samples`, `memory`) come in units: the events up to and
//   including one step, kept or dropped together, so a kept step keeps the samples counted for it
//   (effective_batch, batch_halving's no_sample_loss).
// - Every other event is significant and always kept (an OOM, an inject within max_injects, a checkpoint,
//   an empty_cache, a warning, anything unknown), with the unit before it and the units_after units after
//   it (1 after an `inject`: Note [Visible faults] needs the next step), up to max_pinned routine events.
// - A step is also pinned where something the checks compare changes: its number is not the previous
//   one plus 1 (a retry, a resume), its batch size or its samples count differ from the previous step's,
//   or it is one of the first three that did not clear the gradients (zero_grad's evidence).
// - The last unit is kept, and so are the lines with the largest step, `allocated` and `reserved`
//   (completes, peak_below).
// - The other units are kept by a stride: every unit while at most max_routine routine events are kept
//   that way, then every 2nd, 4th, ... (the kept ones thinned again each time the stride doubles), so the
//   reports' charts cover the whole run evenly.
// What needs every step is folded from every line into LogFold (Attempt::thinned): the number of steps and
// of gradient answers (zero_grad), the least-squares growth of held bytes (memory_stable) and the longest
// time between two steps (no_hang). A check that needs more than these says it could not judge. A unit of
// more than max_unit_events routine events without a step keeps its samples as one `samples` event with
// their sum. The thinning is said by a `warning` event (warnings()).
// Past max_pinned, significant events are kept without their windows (LogFold::windows_missed), and a
// distributed attempt merges logs each thinned around its own events (LogFold::merged): in both cases a
// check that would pass on the kept steps says it could not judge instead (registry.cpp's evaluate), and
// the fit and the gap of one rank's log are not taken for the merged attempt's.

namespace {

using Facts = EventLogReader::Facts;

std::string samples_line(double t, int pid, int64_t count) {
  char buf[160];
  std::snprintf(buf, sizeof buf, R"({"t":%.6f,"pid":%d,"src":"probe","kind":"samples","fields":{"count":%lld}})", t, pid,
                static_cast<long long>(count));
  return buf;
}

}  // namespace

void EventLogReader::feed(std::string_view chunk) {
  while (!chunk.empty()) {
    const size_t nl = chunk.find('\n');
    const std::string_view piece = chunk.substr(0, nl);
    if (!skipping_) {
      if (line_.size() + piece.size() > limits_.max_line_bytes) {
        // Never hold a line past the limit: drop what was gathered and skip to its newline.
        ++long_;
        skipping_ = true;
        std::string().swap(line_);
      } else {
        line_.append(piece);
      }
    }
    if (nl == std::string_view::npos) return;
    if (skipping_) skipping_ = false;
    else take();
    chunk.remove_prefix(nl + 1);
  }
}

void EventLogReader::finish() {
  if (!skipping_) take();  // a last line cut by a process that died mid-write is simply not an event
  skipping_ = false;
  if (finished_) return;
  finished_ = true;
  // The tail: the last units and what came after the last step.
  for (Unit& u : ring_) commit(u, true, true);
  ring_.clear();
  if (!pending_.events.empty()) {
    pending_.ordinal = units_++;
    commit(pending_, true, true);
    pending_ = Unit{};
  }
  // The extremes, wherever the stride left them.
  for (const std::optional<Raw>* keeper : {&max_step_, &max_allocated_, &max_reserved_}) {
    if (!*keeper) continue;
    const Raw& r = **keeper;
    auto at = std::lower_bound(seq_.begin(), seq_.end(), r.seq);
    if (at != seq_.end() && *at == r.seq) continue;
    std::optional<Event> e = parse_event_line(r.line);
    if (!e) continue;
    const size_t pos = static_cast<size_t>(at - seq_.begin());
    events_.insert(events_.begin() + static_cast<std::ptrdiff_t>(pos), std::move(*e));
    seq_.insert(at, r.seq);
    tag_.insert(tag_.begin() + static_cast<std::ptrdiff_t>(pos), 0);
    --fold_.routine_dropped;
    if (r.step) --fold_.steps_dropped;
  }
}

void EventLogReader::take() {
  if (line_.empty()) return;
  const uint64_t seq = ++lines_;
  Facts f;
  if (scan_line(line_, f)) {
    last_t_ = std::max(last_t_, f.t);
    if (f.kind != Facts::Kind::other) {
      routine(Raw{line_, seq, false, 0, f.t, f.pid, false}, f);
    } else if (f.inject && ++injects_ > limits_.max_injects) {
      ++injects_dropped_;
    } else if (auto e = parse_event_line(line_)) {
      significant(std::move(*e), seq, f.inject);
    } else {
      ++bad_;  // scan_line accepts only what the parser accepts: never reached
    }
  } else if (nests_deeper_than(line_, limits_.max_depth)) {
    ++deep_;
  } else if (auto e = parse_event_line(line_)) {
    last_t_ = std::max(last_t_, e->t);
    const Facts g = facts_of(*e);
    if (g.kind != Facts::Kind::other) routine(Raw{line_, seq, false, 0, g.t, g.pid, false}, g);
    else if (g.inject && ++injects_ > limits_.max_injects) ++injects_dropped_;
    else significant(std::move(*e), seq, g.inject);
  } else {
    ++bad_;
  }
  line_.clear();
}

void EventLogReader::fold_step(const Facts& f) {
  ++fold_.steps;
  if (f.grads >= 0) {
    ++fold_.grads_asked;
    if (f.grads == 0) ++fold_.grads_uncleared;
  }
  if (any_step_) {
    const double gap = f.t - last_step_t_;
    if (!fold_.has_gap || gap > fold_.gap_to - fold_.gap_from) {
      fold_.has_gap = true;
      fold_.gap_from = last_step_t_;
      fold_.gap_to = f.t;
      fold_.gap_after_step = last_step_no_;
    }
  }
  any_step_ = true;
  last_step_t_ = f.t;
  last_step_no_ = f.step;
  // Note [Measuring a leak] (checks_memory.cpp), folded one step at a time (LineFit).
  if (f.allocated < 0) {
    fold_.growth_complete = false;
  } else if (++growth_seen_ > view::kGrowthWarmUpSteps) {
    LineFit fit = fold_.growth_fit();
    fit.add(static_cast<double>(f.step), static_cast<double>(f.allocated));
    fold_.set_growth_fit(fit);
    if (fold_.growth_points == 1) fold_.growth_from = f.step;
    fold_.growth_to = f.step;
    fold_.growth_t = f.t;
  }
}

void EventLogReader::routine(Raw raw, const Facts& f) {
  ++fold_.routine;
  const bool counted_step = f.kind == Facts::Kind::step && f.has_step;
  raw.step = counted_step;
  if (counted_step || f.kind == Facts::Kind::memory) {
    if (counted_step && (!max_step_ || f.step > max_step_v_)) max_step_ = raw, max_step_v_ = f.step;
    if (f.allocated >= 0 && (!max_allocated_ || f.allocated > max_allocated_v_)) max_allocated_ = raw, max_allocated_v_ = f.allocated;
    if (f.reserved >= 0 && (!max_reserved_ || f.reserved > max_reserved_v_)) max_reserved_ = raw, max_reserved_v_ = f.reserved;
  }
  if (f.kind == Facts::Kind::samples) {
    raw.samples = true;
    raw.count = std::max<int64_t>(0, f.count);
    unit_samples_ = std::max<int64_t>(unit_samples_, 0) + raw.count;
  }
  pending_.events.push_back(std::move(raw));
  if (f.kind == Facts::Kind::step) {
    bool change = false;
    if (counted_step) {
      fold_step(f);
      if (prev_step_known_)
        change = f.step != prev_step_ + 1 || f.batch != prev_batch_ || unit_samples_ != prev_samples_;
      if (f.grads == 0 && uncleared_pinned_ < 3) {
        change = true;
        ++uncleared_pinned_;
      }
      prev_step_known_ = true;
      prev_step_ = f.step;
      prev_batch_ = f.batch;
      prev_samples_ = unit_samples_;
    }
    unit_samples_ = -1;
    close_unit(change);
    return;
  }
  if (pending_.events.size() < limits_.max_unit_events) return;
  // A unit too long: its other events go on by themselves; its samples stay, summed, for the step.
  Unit rest;
  std::optional<Raw> summed;
  for (Raw& r : pending_.events) {
    if (!r.samples) {
      rest.events.push_back(std::move(r));
    } else if (!summed) {
      summed = std::move(r);
    } else {
      summed->count += r.count;
      summed->t = r.t;
      summed->pid = r.pid;
      summed->seq = r.seq;
      ++fold_.routine_dropped;
    }
  }
  pending_.events.clear();
  if (summed) {
    summed->seq = std::max(summed->seq, rest.events.empty() ? 0 : rest.events.back().seq);
    summed->line = samples_line(summed->t, summed->pid, summed->count);
  }
  if (!rest.events.empty()) {
    // A unit without a step: the windows and the forced keep are for the unit that ends with the step.
    const bool force = force_next_;
    const uint64_t after = after_units_;
    force_next_ = false;
    after_units_ = 0;
    pending_ = std::move(rest);
    close_unit(false);
    force_next_ = force;
    after_units_ = after;
  }
  if (summed) pending_.events.push_back(std::move(*summed));
}

void EventLogReader::close_unit(bool pin) {
  pending_.ordinal = units_++;
  pending_.pinned = pin || force_next_;
  pending_.forced = force_next_;
  force_next_ = false;
  if (after_units_ > 0) {
    pending_.pinned = true;
    --after_units_;
  }
  ring_.push_back(std::move(pending_));
  pending_ = Unit{};
  while (ring_.size() > limits_.units_before) leave_ring();
}

void EventLogReader::leave_ring() {
  Unit u = std::move(ring_.front());
  ring_.erase(ring_.begin());
  commit(u, u.pinned, u.forced);
}

void EventLogReader::commit(Unit& u, bool pinned, bool force) {
  const bool never_thin = limits_.max_routine == 0;
  if (pinned && !force && !never_thin && pinned_kept_ >= limits_.max_pinned) {
    ++fold_.windows_missed;
    pinned = false;
  }
  if (pinned || never_thin) {
    for (const Raw& r : u.events) keep(r, 0);
    pinned_kept_ += u.events.size();
  } else if (u.ordinal % stride_ == 0) {
    for (const Raw& r : u.events) keep(r, 1 + u.ordinal);
    stride_kept_ += u.events.size();
    prune();
  } else {
    for (const Raw& r : u.events) {
      ++fold_.routine_dropped;
      if (r.step) ++fold_.steps_dropped;
    }
  }
}

void EventLogReader::keep(const Raw& r, uint64_t tag) {
  std::optional<Event> e = parse_event_line(r.line);
  if (!e) return;  // read once already: never reached
  events_.push_back(std::move(*e));
  seq_.push_back(r.seq);
  tag_.push_back(tag);
}

void EventLogReader::prune() {
  // One unit (the first: ordinal 0 is kept by every stride) may alone be over a small budget: stop there,
  // and never double the stride past what a unit count can reach.
  uint64_t units_kept = 2;
  while (stride_kept_ > limits_.max_routine && units_kept > 1 && stride_ < (uint64_t{1} << 62)) {
    stride_ *= 2;
    size_t out = 0;
    stride_kept_ = 0;
    units_kept = 0;
    for (size_t i = 0; i < events_.size(); ++i) {
      if (tag_[i] != 0 && (tag_[i] - 1) % stride_ != 0) {
        ++fold_.routine_dropped;
        if (completes_a_step(events_[i]) && events_[i].has("step")) ++fold_.steps_dropped;
        continue;
      }
      if (tag_[i] != 0) {
        ++stride_kept_;
        if (out == 0 || tag_[out - 1] != tag_[i]) ++units_kept;
      }
      if (out != i) {
        events_[out] = std::move(events_[i]);
        seq_[out] = seq_[i];
        tag_[out] = tag_[i];
      }
      ++out;
    }
    events_.resize(out);
    seq_.resize(out);
    tag_.resize(out);
  }
}

void EventLogReader::significant(Event e, uint64_t seq, bool is_inject) {
  // The steps before it, and what came since the last step: kept (Note [Thinned event logs]).
  const bool windows = limits_.max_routine == 0 || pinned_kept_ < limits_.max_pinned;
  if (!windows) ++fold_.windows_missed;
  for (Unit& u : ring_) commit(u, windows || u.pinned, u.forced);
  ring_.clear();
  if (!pending_.events.empty()) {
    // Samples counted here belong to the step that ends this unit: that unit is kept as well.
    pending_.ordinal = units_++;
    commit(pending_, true, true);
    pending_ = Unit{};
    force_next_ = true;
  }
  events_.push_back(std::move(e));
  seq_.push_back(seq);
  tag_.push_back(0);
  if (windows) after_units_ = std::max<uint64_t>(after_units_, is_inject ? 1 : limits_.units_after);
}

std::vector<Event> EventLogReader::warnings(const std::string& source) const {
  std::vector<Event> out;
  auto warn = [&](std::string message, nlohmann::json extra) {
    Event e;
    e.t = last_t_;
    e.src = events::kSrcRunner;
    e.kind = events::kWarning;
    e.fields = std::move(extra);
    e.fields["message"] = std::move(message);
    out.push_back(std::move(e));
  };
  const size_t mib = limits_.max_line_bytes >> 20;
  const std::string limit_text = mib > 0 && (limits_.max_line_bytes & ((size_t{1} << 20) - 1)) == 0
                                     ? std::to_string(mib) + " MiB"
                                     : std::to_string(limits_.max_line_bytes) + " bytes";
  if (long_ > 0)
    warn(std::to_string(long_) + " line(s) of " + source + " over " + limit_text + " were skipped", {{"long_lines", long_}});
  if (deep_ > 0)
    warn(std::to_string(deep_) + " line(s) of " + source + " nested deeper than " + std::to_string(limits_.max_depth) +
             " levels were skipped", {{"deep_lines", deep_}});
  if (injects_dropped_ > 0)
    warn(std::to_string(injects_) + " faults were injected; the first " + std::to_string(limits_.max_injects) +
             " are kept in the trace, " + std::to_string(injects_dropped_) + " more were counted only",
         {{"injects", injects_}, {"injects_dropped", injects_dropped_}});
  if (thinned())
    warn(std::to_string(fold_.routine_dropped) + " of " + std::to_string(fold_.routine) + " routine events of " + source +
             " (probe steps, phases, samples, memory) were thinned, " + std::to_string(fold_.steps_dropped) + " of " +
             std::to_string(fold_.steps) + " steps among them: every other event is kept with the steps around it, and the "
             "checks read step counts, memory growth and the longest gap between steps from the whole log",
         {{"routine", fold_.routine}, {"routine_dropped", fold_.routine_dropped}, {"steps", fold_.steps},
          {"steps_dropped", fold_.steps_dropped}});
  if (fold_.windows_missed > 0)
    warn("the steps around " + std::to_string(fold_.windows_missed) + " significant events of " + source +
             " were not kept (more than " + std::to_string(limits_.max_pinned) +
             " routine events kept around them already): checks that passed say they could not judge",
         {{"windows_missed", fold_.windows_missed}});
  return out;
}

}  // namespace oomh
