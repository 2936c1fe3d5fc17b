// The checks that read one fact off the trace: exit, completes, oom_visible, peak_below, no_hang.

#include <algorithm>
#include <cstdio>
#include <set>

#include "checks.h"
#include "oomharness/events.h"
#include "oomharness/units.h"
#include "trace_view.h"

namespace oomh::checks {

using view::attempt_name;

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::optional<std::string> target_missed(const Trace& trace) {
  if (trace.attempts.empty()) return std::string("the job never ran");
  const Attempt& last = trace.attempts.back();
  if (trace.target_step) {
    auto reached = view::highest_step(view::steps_of(last));
    if (!last.ranks.empty()) {  // Note [Ranks]: every rank must get there
      int64_t low = steps_all_ranks_completed(last);
      reached = low >= 0 ? std::optional<int64_t>(low) : std::nullopt;
    }
    if (reached && *reached >= *trace.target_step) return std::nullopt;
    std::string target = std::to_string(*trace.target_step);
    if (!reached) return "the last attempt (" + attempt_name(last.index) + ") reported no step and " + view::end_text(last) + " (target: step " + target + ")";
    return "training stopped at step " + std::to_string(*reached) + " of " + target + " (" + attempt_name(last.index) + " " + view::end_text(last) + ")";
  }
  if (view::ended_normally(last)) return std::nullopt;
  return "the last attempt (" + attempt_name(last.index) + ") " + view::end_text(last);
}

// Note [A pass that did not check completion]: without a target step, "training finished" means only that the
// last attempt exited 0; a job that quit at step 3 of 8 does that too (issue 42, class 8). The sentence says so.
std::string target_reached(const Trace& trace) {
  if (trace.target_step) return "reached step " + std::to_string(*trace.target_step);
  return "finished with exit code 0 (completion was not checked: the job has no target step; give it `completes: N` "
         "or target_step)";
}

Verdict exit_code(const Trace& trace, const nlohmann::json& args) {
  if (trace.attempts.empty()) return verdict(VerdictStatus::inconclusive, "the job never ran: the trace has no attempt");
  const Attempt& last = trace.attempts.back();
  int64_t expected = args.value("code", int64_t{0});
  Evidence ev{last.index, last.end, attempt_name(last.index) + " " + view::end_text(last)};
  if (last.end_kind == AttemptEnd::interrupted)
    return verdict(VerdictStatus::inconclusive, "the last attempt was interrupted, so its exit code says nothing", {ev});
  if (last.end_kind == AttemptEnd::exited && last.exit_code && *last.exit_code == expected)
    return verdict(VerdictStatus::pass, "the last attempt (" + attempt_name(last.index) + ") exited with code " +
                                            std::to_string(expected) + " as expected", {ev});
  std::string reason = "the last attempt (" + attempt_name(last.index) + ") " + view::end_text(last) +
                       ", expected exit code " + std::to_string(expected);
  // Note [An OOM is an event] (trace.cpp): a message alone is not an OOM the trace can vouch for.
  const bool ended_by_oom = last.ended_by_oom();
  if (ended_by_oom) {
    reason += ", after an out-of-memory error";
  } else if (last.oom_message) {
    // The job met OOMs the trace records and got past them (a caught `oom`, a refusal followed by a step):
    // whatever ended it, saying that nothing recorded them would be false.
    bool recorded = !view::injections_of(last).empty();
    for (const view::OomPoint& o : view::ooms_of(last)) recorded = recorded || o.from_probe;
    reason += recorded ? " (the out-of-memory errors it met were caught and it went on past them: it ended for another reason)"
                       : " (its output mentions an out-of-memory error that neither the shim nor the probe recorded)";
  }
  // A job that completed its last step and then failed did not fail in training: say so, for a user who would
  // otherwise look for the OOM handling's fault (a gloo worker ended during interpreter shutdown aborts so).
  if (!ended_by_oom && trace.target_step) {
    auto reached = view::highest_step(view::steps_of(last));
    if (reached && *reached >= *trace.target_step)
      reason += "; it had completed its last step (step " + std::to_string(*reached) + " of " +
                std::to_string(*trace.target_step) + "), so it failed in what runs after training (evaluation, "
                "saving, shutdown)";
  }
  return verdict(VerdictStatus::fail, reason, {ev});
}

Verdict completes(const Trace& trace, const nlohmann::json& args) {
  std::optional<int64_t> target = trace.target_step;
  if (args.contains("steps") && args["steps"].is_number()) target = args["steps"].get<int64_t>();
  if (!target)
    return verdict(VerdictStatus::inconclusive, "no step count to reach: write `completes: N` or set the job's target_step");
  if (trace.attempts.empty()) return verdict(VerdictStatus::inconclusive, "the job never ran: the trace has no attempt");
  bool any = false;
  for (const Attempt& a : trace.attempts) any = any || !view::steps_of(a).empty();
  if (!any)
    return verdict(VerdictStatus::inconclusive,
                   "no step was reported: add the probe or an `observe:` regex for `step` so progress can be seen");
  const Attempt& last = trace.attempts.back();
  auto steps = view::steps_of(last);
  auto reached = view::highest_step(steps);
  std::string goal = std::to_string(*target);
  if (!last.ranks.empty()) {
    // Note [Ranks] in trace.h: every rank must reach the target; the one that got least far is named.
    const RankEnd* lowest = &last.ranks.front();
    for (const RankEnd& r : last.ranks)
      if (r.last_step < lowest->last_step) lowest = &r;
    std::string all = std::to_string(last.ranks.size());
    if (lowest->last_step >= *target)
      return verdict(VerdictStatus::pass, "every rank of the last attempt (" + attempt_name(last.index) + ", " + all +
                                              " ranks) reached step " + goal + " or beyond",
                     {{last.index, last.end, "lowest rank step " + std::to_string(lowest->last_step)}});
    std::string where = lowest->last_step >= 0 ? "stopped at step " + std::to_string(lowest->last_step) : "reported no step";
    return verdict(VerdictStatus::fail, "rank " + std::to_string(lowest->rank) + " " + where + " of " + goal + " in " +
                                            attempt_name(last.index) + ", which " + view::end_text(last),
                   {{last.index, lowest->end, "rank " + std::to_string(lowest->rank) + " " + where}});
  }
  if (!reached)
    return verdict(VerdictStatus::fail, "the last attempt (" + attempt_name(last.index) + ") reported no step and " +
                                            view::end_text(last) + " (target: step " + goal + ")",
                   {{last.index, last.end, attempt_name(last.index) + " " + view::end_text(last)}});
  Evidence ev{last.index, steps.back().t, "highest step " + std::to_string(*reached)};
  if (*reached >= *target)
    return verdict(VerdictStatus::pass, "the last attempt (" + attempt_name(last.index) + ") reached step " +
                                            std::to_string(*reached) + " (target " + goal + ")", {ev});
  return verdict(VerdictStatus::fail, "training stopped at step " + std::to_string(*reached) + " of " + goal + ": " +
                                          attempt_name(last.index) + " " + view::end_text(last), {ev});
}

// Passes when some injected fault reached the code (Note [Visible faults] in trace.cpp): an OOM the code
// saw for another reason (a real one, beside a reservation) does not make an absorbed fault visible.
Verdict oom_visible(const Trace& trace, const nlohmann::json&) {
  size_t injected = 0, visible = 0;
  std::vector<Evidence> ev;
  for (const Attempt& a : trace.attempts)
    for (const InjectedFault& f : a.injected_faults()) {
      ++injected;
      visible += f.visible;
      if (ev.size() < 2 && (f.visible || visible == 0))
        ev.push_back({a.index, f.event->t, "fault injected into " + f.event->text("entry", "an allocation") +
                                               (f.visible ? ", seen by the code" : ", absorbed")});
    }
  auto ooms = view::ooms_of(trace);
  for (const auto& o : ooms)
    if (ev.size() < 4) ev.push_back({o.attempt, o.t, "the code saw an OOM at " + view::step_text(o.step)});
  if (injected == 0) {
    // Issue 26: a job with a cap and no rules has no fault plan to blame.
    const view::PlanSeen plan = view::plan_seen(trace);
    if (plan.known && plan.rules == 0)
      return verdict(VerdictStatus::inconclusive,
                     plan.cap == 0 ? std::string("no fault was injected: the job has neither fault rules nor a cap")
                                   : "no allocation was refused: " + view::cap_never_reached(plan),
                     ev);
    // Note [Where a step fault fires]: what the step rules met in their steps, where the shims said it.
    const std::string why = view::unfired_reason(trace);
    return verdict(VerdictStatus::inconclusive,
                   "no fault was injected: " + (why.empty() ? std::string("the fault plan never matched an allocation (check "
                                                                          "its step, phase and size filters)")
                                                            : why),
                   ev);
  }
  if (visible == 0) return verdict(VerdictStatus::fail, view::absorbed_reason(injected), ev);
  return verdict(VerdictStatus::pass, std::to_string(injected) + (injected == 1 ? " fault was" : " faults were") +
                                          " injected, " + std::to_string(visible) + " reached the code, and it saw " +
                                          std::to_string(ooms.size()) + (ooms.size() == 1 ? " out-of-memory error" : " out-of-memory errors"),
                 ev);
}

Verdict peak_below(const Trace& trace, const nlohmann::json& args) {
  uint64_t budget = args.at("bytes").get<uint64_t>();
  struct Peak { uint64_t bytes = 0; Evidence where; bool known = false; } peak;
  auto consider = [&](int64_t bytes, int attempt, double t, std::string what) {
    if (bytes < 0) return;
    if (!peak.known || static_cast<uint64_t>(bytes) > peak.bytes)
      peak = {static_cast<uint64_t>(bytes), {attempt, t, std::move(what)}, true};
  };
  for (const Attempt& a : trace.attempts) {
    for (const MemorySample& s : a.samples)
      consider(static_cast<int64_t>(std::max(s.peak, s.held)), a.index, s.t,
               "device " + std::to_string(s.device) + " sample" + (s.step >= 0 ? " at step " + std::to_string(s.step) : ""));
    for (const auto& st : view::steps_of(a)) {
      consider(st.reserved, a.index, st.t, "reserved at step " + std::to_string(st.step));
      consider(st.allocated, a.index, st.t, "allocated at step " + std::to_string(st.step));
    }
    for (const Event& e : a.events) {
      if (e.kind == events::kMemory) {
        consider(e.integer("reserved", -1), a.index, e.t, "reserved (memory event)");
        consider(e.integer("allocated", -1), a.index, e.t, "allocated (memory event)");
      } else if (e.kind == events::kShimExit) {
        consider(e.integer("peak", -1), a.index, e.t, "the shim's peak on device " + std::to_string(e.integer("device", 0)));
      }
    }
  }
  if (!peak.known)
    return verdict(VerdictStatus::inconclusive,
                   "no memory figures in the trace: neither control-block samples nor the probe's allocated/reserved");
  std::string where = " (" + attempt_name(peak.where.attempt) + ", " + peak.where.what + ")";
  peak.where.what = format_bytes(peak.bytes) + " " + peak.where.what;
  if (peak.bytes <= budget)
    return verdict(VerdictStatus::pass, "peak memory held was " + format_bytes(peak.bytes) + ", within the budget of " +
                                            format_bytes(budget), {peak.where});
  return verdict(VerdictStatus::fail, "peak memory held reached " + format_bytes(peak.bytes) + where +
                                          ", above the budget of " + format_bytes(budget), {peak.where});
}

namespace {
struct Stall {
  int attempt = 0;
  double from = 0, to = 0;
  int64_t after_step = -1;  // -1: no step before it
  bool at_end = false;
};
}  // namespace

// "rank 1 died of an out-of-memory error at step 5": how the rank that ended first ended.
static std::string rank_end_text(const Attempt& a, int rank, bool raised_oom) {
  if (rank < 0 || static_cast<size_t>(rank) >= a.ranks.size()) return "another rank ended";
  const RankEnd& r = a.ranks[static_cast<size_t>(rank)];
  std::string who = "rank " + std::to_string(rank);
  int64_t step = -1;
  for (const Event& e : a.events)
    if (rank_of(e) == rank && e.src == events::kSrcProbe && e.kind == events::kOom) step = e.integer("step");
  std::string at = step >= 0 ? " at step " + std::to_string(step) : "";
  if (r.ended_by_oom) return who + " died of an out-of-memory error" + at;
  if (raised_oom) return who + " raised an out-of-memory error" + at;
  if (r.end_kind == AttemptEnd::exited && r.exit_code && *r.exit_code == 0) return who + " finished";
  if (r.end_kind == AttemptEnd::exited && r.exit_code) return who + " exited with code " + std::to_string(*r.exit_code);
  if (r.end_kind == AttemptEnd::signalled && r.signal) return who + " was killed by signal " + std::to_string(*r.signal);
  return who + " ended";
}

Verdict no_hang(const Trace& trace, const nlohmann::json& args) {
  double limit = args.value("stall", 60.0);
  // Note [Hang detection] in job_runner_hangs.cpp: a rank the runner found stalled after another rank ended.
  for (const Attempt& a : trace.attempts)
    for (const Event& e : a.events) {
      if (e.src != events::kSrcRunner || e.kind != events::kHang) continue;
      int rank = static_cast<int>(e.integer("rank"));
      std::string where;
      if (rank >= 0 && static_cast<size_t>(rank) < a.ranks.size()) where = innermost_frame(a.ranks[static_cast<size_t>(rank)].stacks);
      // Note [One torchrun per node] (runner/src/exec/node_group.h): a node's torchrun stood for its ranks,
      // which share its control block: the node is named, and there are no stacks.
      const bool node = rank < 0 && e.has("node");
      std::string who = node ? "the ranks of node " + std::to_string(e.integer("node") + 1) + " (its torchrun)" : "rank " + std::to_string(rank);
      std::string after = rank_end_text(a, static_cast<int>(e.integer("after_rank")), e.text("after") == "oom");
      if (e.integer("after_rank") < 0 && e.has("after_node"))
        after = "a rank of node " + std::to_string(e.integer("after_node") + 1) +
                (e.text("after") == "oom" ? " raised an out-of-memory error" : "'s torchrun ended");
      std::string reason = who + " waited " + view::seconds_text(e.number("waited")) +
                           (node ? "" : where.empty() ? " (no stack: it did not answer)" : " in " + where) + " after " + after +
                           " (stall limit " + view::seconds_text(e.number("stall")) + "); the runner " +
                           (node ? "stopped every node's torchrun and ended " : "took every rank's stacks and ended ") + attempt_name(a.index);
      return verdict(VerdictStatus::fail, reason, {{a.index, e.t, (node ? "node " + std::to_string(e.integer("node") + 1) : "rank " + std::to_string(rank)) + " hung"}});
    }
  bool any_step = false;
  double longest = 0;
  std::optional<Stall> stall;
  const Attempt* unjudged = nullptr;
  for (const Attempt& a : trace.attempts) {
    auto steps = view::steps_of(a);
    any_step = any_step || !steps.empty();
    std::vector<Stall> gaps;
    if (const LogFold* f = view::steps_thinned(a)) {
      // Note [Thinned event logs] in event_log_reader.cpp: two kept steps are not consecutive; the reader measured the
      // longest gap on every step of the log (of one log: a merged attempt's ranks step in between).
      if (f->merged && !unjudged) unjudged = &a;
      if (!f->merged && f->has_gap) gaps.push_back({a.index, f->gap_from, f->gap_to, f->gap_after_step, false});
    } else {
      for (size_t i = 1; i < steps.size(); ++i) gaps.push_back({a.index, steps[i - 1].t, steps[i].t, steps[i - 1].step, false});
    }
    // The time after the last step counts unless the attempt ended normally having reached the target (a final
    // save or eval is fine): exit 0 at step 2 of 6, six seconds after an OOM, is a stall (issue 42, class 8). With
    // no target known, a normal end excuses it, and the pass sentence says that completion was not checked.
    const bool is_last = &a == &trace.attempts.back();
    const bool reached = !is_last || !trace.target_step || (!steps.empty() && view::highest_step(steps).value_or(0) >= *trace.target_step);
    if (!steps.empty() && !(view::ended_normally(a) && reached) && a.end > steps.back().t)
      gaps.push_back({a.index, steps.back().t, a.end, steps.back().step, true});
    // An attempt that never stepped counts only when the runner had to stop it: start-up may be slow.
    if (steps.empty() && a.end_kind == AttemptEnd::timed_out) gaps.push_back({a.index, a.start, a.end, -1, true});
    for (const Stall& g : gaps) {
      longest = std::max(longest, g.to - g.from);
      if (!stall && g.to - g.from > limit) stall = g;
    }
  }
  if (stall) {
    const Attempt& a = trace.attempts[static_cast<size_t>(stall->attempt)];
    std::string reason = stall->after_step >= 0 ? "no step after step " + std::to_string(stall->after_step)
                                                : "no step at all";
    reason += " for " + view::seconds_text(stall->to - stall->from) + " (stall limit " + view::seconds_text(limit) + ")";
    if (trace.attempts.size() > 1) reason += " in " + attempt_name(a.index);
    if (stall->at_end) reason += " before it " + view::end_text(a);
    std::string phase = view::phase_at(a, stall->to);
    reason += phase.empty() ? ": hung (no phase known; the probe reports phases)" : ": hung in phase " + phase;
    return verdict(VerdictStatus::fail, reason,
                   {{a.index, stall->from, stall->after_step >= 0 ? "step " + std::to_string(stall->after_step) : "attempt start"},
                    {a.index, stall->to, stall->at_end ? attempt_name(a.index) + " " + view::end_text(a) : "next step"}});
  }
  if (!any_step)
    return verdict(VerdictStatus::inconclusive,
                   "no step was reported: add the probe or an `observe:` regex for `step` so stalls can be seen");
  if (unjudged)
    return verdict(VerdictStatus::inconclusive, "could not judge: the event log of " + attempt_name(unjudged->index) +
                                                    " was thinned and its ranks' steps were not all kept, so the gaps between them are not known");
  // Note [A restart of every rank] in job_runner_hangs.cpp: the ranks the runner stopped to restart them all.
  std::string restarted;
  for (const Attempt& a : trace.attempts) {
    std::set<int> stopped;
    int after = -1;
    for (const Event& e : a.events)
      if (e.src == events::kSrcRunner && e.kind == events::kStoppedForRestart) {
        stopped.insert(static_cast<int>(e.integer("rank")));
        after = static_cast<int>(e.integer("after_rank"));
      }
    if (stopped.empty()) continue;
    std::string who;
    for (int r : stopped) who += (who.empty() ? "rank " : ", ") + std::to_string(r);
    restarted += "; in " + attempt_name(a.index) + " the runner stopped " + who + " after " +
                 rank_end_text(a, after, false) + ", to restart every rank as torchrun's agent does (" +
                 (stopped.size() == 1 ? "its" : "their") + " wait for it is not counted as a hang)";
  }
  return verdict(VerdictStatus::pass, "no gap between steps was longer than " + view::seconds_text(limit) +
                                          " (longest " + view::seconds_text(longest) + ")" + restarted +
                                          (trace.target_step ? std::string()
                                                             : "; completion was not checked (the job has no target step): the time "
                                                               "after the last step of an attempt that exited 0 is not counted"));
}

}  // namespace oomh::checks
