// memory_stable: held memory at step boundaries does not grow, and comes back after recovery.
//
// Note [Measuring a leak]
// Memory held at the same point of successive steps is flat for a healthy loop; the usual leaks (a loss kept
// with its graph, tensors appended to a list, eval without no_grad) add a roughly constant amount per step.
// The check fits a least-squares line of held bytes against the step number and compares its slope with
// `growth_per_step`. The first two steps of each attempt are left out: the caching allocator and the
// optimizer state grow there by design. Fewer than three points left is too few to call anything a trend.

#include <algorithm>
#include <cstdio>
#include <optional>

#include "checks.h"
#include "oomharness/policies/findings.h"
#include "oomharness/units.h"
#include "trace_view.h"

namespace oomh::checks {

namespace {

constexpr size_t kRecoverySteps = 3;

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

using Trend = view::Growth;

}  // namespace

Verdict memory_stable(const Trace& trace, const nlohmann::json& args) {
  double limit = static_cast<double>(args.value("growth_per_step", uint64_t{1024 * 1024}));
  bool after_recovery = args.value("after_recovery", true);
  std::optional<Trend> worst;
  std::vector<Evidence> ev;
  for (const Attempt& a : trace.attempts) {
    auto tr = view::held_growth(a);
    if (tr && (!worst || tr->slope > worst->slope)) worst = tr;
  }
  auto span = [&](const Trend& tr) {
    std::string s = "over steps " + std::to_string(tr.from) + "\xE2\x80\x93" + std::to_string(tr.to);
    if (trace.attempts.size() > 1) s += " of " + view::attempt_name(tr.attempt);
    return s;
  };
  // Note [Thinned event logs] in trace.cpp: an attempt whose fit the reader could not fold is not judged.
  const Attempt* unjudged = nullptr;
  for (const Attempt& a : trace.attempts)
    if (!unjudged && view::growth_unjudged(a)) unjudged = &a;
  if (worst) {
    ev.push_back({worst->attempt, worst->t, "held memory slope " + mib(worst->slope) + " per step"});
    if (worst->slope > limit) {
      // Issue 14: the failure carries the finding that explains it, or says that none did.
      std::string why = "no finding matched (docs/diagnosis.md)";
      for (const Finding& f : diagnose(trace, {static_cast<uint64_t>(limit)}))
        if (f.rule == "kept_with_graph") { why = f.sentence; break; }
      return verdict(VerdictStatus::fail, "held memory grew by " + mib(worst->slope) + " per step " + span(*worst) + " (limit " +
                                              mib(limit) + "): " + why, ev);
    }
  }

  // After the last OOM the code went on from: memory must come back to where it was before the fault.
  std::string recovered;
  if (after_recovery) {
    std::optional<view::OomPoint> last;
    for (const auto& o : view::ooms_of(trace))
      if (o.caught) last = o;
    if (last) {
      const Attempt* a = nullptr;
      for (const Attempt& x : trace.attempts)
        if (x.index == last->attempt) a = &x;
      auto steps = view::steps_of(*a);
      const view::StepPoint* before = view::step_before(steps, last->t);
      int64_t pre = before ? view::held_at(*a, *before) : -1;
      std::vector<std::pair<const view::StepPoint*, int64_t>> after;
      for (const auto& s : steps) {
        if (s.t <= last->t || after.size() == kRecoverySteps) continue;
        int64_t h = view::held_at(*a, s);
        if (h >= 0) after.emplace_back(&s, h);
      }
      if (pre >= 0 && !after.empty()) {
        bool back = false;
        int64_t lowest = after.front().second;
        for (size_t k = 0; k < after.size(); ++k) {
          lowest = std::min(lowest, after[k].second);
          back = back || static_cast<double>(after[k].second) <= static_cast<double>(pre) + limit * static_cast<double>(k + 1);
        }
        ev.push_back({a->index, last->t, "OOM at " + view::step_text(last->step) + " with " +
                                              format_bytes(static_cast<uint64_t>(pre)) + " held before it"});
        if (!back)
          return verdict(VerdictStatus::fail, "after the OOM at " + view::step_text(last->step) + " held memory stayed at " +
                                                  format_bytes(static_cast<uint64_t>(lowest)) + " or more for " +
                                                  std::to_string(after.size()) + (after.size() == 1 ? " step" : " steps") + " (" +
                                                  format_bytes(static_cast<uint64_t>(pre)) +
                                                  " before the fault): the failed step's tensors are still referenced; drop them before going on", ev);
        recovered = " and returned to its pre-fault level after the OOM at " + view::step_text(last->step);
      }
    }
  }
  // Note [The golden level]: against a run of the same job without faults (`oomharness sweep`'s golden
  // run), the last step both completed must hold no more than the golden run did there. A one-off leak of
  // the recovery (a failed step's tensors kept once) stays flat afterwards, so the slope and the
  // return-to-the-pre-fault-level checks above, which allow growth_per_step, let one under 1 MiB pass.
  std::string golden_words;
  if (args.contains("golden") && args["golden"].is_object() && !args["golden"].empty() && !trace.attempts.empty()) {
    const nlohmann::json& golden = args["golden"];
    const int64_t tolerance = static_cast<int64_t>(args.value("golden_tolerance", uint64_t{64 * 1024}));
    const Attempt& a = trace.attempts.back();
    auto steps = view::steps_of(a);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      auto g = golden.find(std::to_string(it->step));
      if (g == golden.end() || !g->is_number_unsigned()) continue;
      int64_t held = view::held_at(a, *it);
      if (held < 0) continue;
      const int64_t level = static_cast<int64_t>(g->get<uint64_t>());
      ev.push_back({a.index, it->t, view::step_text(it->step) + ": " + format_bytes(static_cast<uint64_t>(held)) +
                                         " held; the run without faults held " + format_bytes(static_cast<uint64_t>(level))});
      if (held > level + tolerance)
        return verdict(VerdictStatus::fail, "at " + view::step_text(it->step) + " the job held " +
                                                format_bytes(static_cast<uint64_t>(held - level)) + " more than the same job "
                                                "without faults (" + format_bytes(static_cast<uint64_t>(held)) + " against " +
                                                format_bytes(static_cast<uint64_t>(level)) + ", tolerance " +
                                                format_bytes(static_cast<uint64_t>(tolerance)) +
                                                "): the recovery kept memory it should have freed", ev);
      golden_words = "; back to the level of the run without faults by " + view::step_text(it->step);
      break;
    }
  }
  if (unjudged)
    return verdict(VerdictStatus::inconclusive,
                   "could not judge: the event log of " + view::attempt_name(unjudged->index) +
                       " was thinned and its held memory per step is not known from every step (steps without the probe's "
                       "`allocated`, or several ranks' logs)", ev);
  if (!worst && recovered.empty())
    return verdict(VerdictStatus::inconclusive, "too few steps with memory figures: need at least " +
                                                    std::to_string(view::kGrowthMinSteps) +
                                                    " steps in an attempt with the probe's `allocated` or the shim's samples", ev);
  if (!worst) return verdict(VerdictStatus::pass, "held memory" + recovered.substr(std::string(" and").size()) + golden_words, ev);
  std::string trend = (worst->slope > 0 ? "held memory grew by " + mib(worst->slope) + " per step "
                                        : std::string("held memory did not grow ")) +
                      span(*worst) + " (limit " + mib(limit) + ")";
  return verdict(VerdictStatus::pass, trend + recovered + golden_words, ev);
}

}  // namespace oomh::checks
