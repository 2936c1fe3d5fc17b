// memory_stable: held memory at step boundaries does not grow, and comes back after recovery.
//
// Note [Measuring a leak]
// Memory held at the same point of successive steps is flat for a healthy loop; the usual leaks (a loss kept
// with its graph, tensors appended to a list, eval without no_grad) add a roughly constant amount per step.
// The check fits a least-squares line of held bytes against the step number. The first two steps of each
// attempt are left out: the caching allocator and the optimizer state grow there by design. Fewer than three
// points left is too few to call anything a trend.
//
// Note [A leak is a trend]
// Issue 26: an absolute limit per step (the old default, 1 MiB) depends on the model's size: a CI-sized model
// that kept its loss with the graph grew 0.62 MiB per step and passed. A leak is judged instead by what does
// not depend on size (view::judge_leak, read by this check and by the kept_with_graph finding):
// - persistence: the lowest held bytes of each third of the fitted steps rises above the third before, by
//   more than PyTorch's 512-byte rounding, and the last third's rise is at least half the middle one's. A
//   warm-up (the allocator caching its working set, the optimizer creating its state) flattens out; a leak
//   goes on at its rate. Lows, not means: a step that briefly holds more is no trend.
// - share: at the fitted rate, the growth from the first fitted step to the job's length (its target step,
//   or `steps:` for the length of the real training a short CI run stands for) adds at least `share`
//   (default 10%) of what the steps held at the start (the fitted line at the first fitted step, the same
//   from a thinned log's fold), and at least one of the allocator's 2 MiB segments (kLeakFloor: 12 KiB on a
//   job holding 76 KiB is a share, not a leak), or reaches the job's cap before then.
// - no plateau (issue 42, class 7): without the user's `steps:`, steady growth that passed by its share over a
//   short CI run (5 MiB a step over a 6-step job: 3% of what it held) is a leak, because the training the run
//   stands for is longer: it fails once kLeakDecideSteps steps were fitted, and is inconclusive before that
//   ("too few steps to tell growth from warm-up: run N steps"). Only growth that adds up to less than one of
//   the allocator's 2 MiB segments over kShortRunStandsFor steps still passes (a trainer that holds 76 KiB and
//   grows 2 KiB a step).
// A user's `growth_per_step` stays an absolute limit, and `steps:` a horizon judged by share: given, they decide.
// What it cannot see: a leak that only starts late in the run (the first third's low stays, the later ones
// rise: judged by the thirds it spans), a leak of host memory (the held bytes are the device's), and growth
// between step boundaries that is freed before each step ends.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "checks.h"
#include "oomharness/policies/findings.h"
#include "oomharness/units.h"
#include "trace_view.h"

namespace oomh::checks {

namespace {

constexpr size_t kRecoverySteps = 3;
// Note [A leak is a trend], no plateau: the fitted steps that tell steady growth from a long warm-up, and the
// length of training a short run stands for when the user gives none.
constexpr int64_t kLeakDecideSteps = 8;
constexpr double kShortRunStandsFor = 1000;
// Without a user's limit, memory is back after recovery when it is within this share of the level before
// the fault (or kRecoverySlack, whichever is more): a failed step's tensors kept alive are far more.
constexpr double kRecoveryShare = 0.02;
constexpr double kRecoverySlack = 1024.0 * 1024.0;

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", share * 100.0);
  return buf;
}

using Trend = view::Growth;

}  // namespace

Verdict memory_stable(const Trace& trace, const nlohmann::json& args) {
  std::optional<double> limit;
  if (args.contains("growth_per_step") && args["growth_per_step"].is_number()) limit = args["growth_per_step"].get<double>();
  const double share = args.contains("share") && args["share"].is_number() ? args["share"].get<double>() : view::kLeakShare;
  const int64_t horizon = args.contains("steps") && args["steps"].is_number() ? args["steps"].get<int64_t>() : -1;
  const view::LeakRule rule = view::leak_rule(trace, limit, share, horizon);
  bool after_recovery = args.value("after_recovery", true);
  // The attempt to speak of: the leak with the steepest slope, else the steepest slope.
  std::optional<Trend> worst;
  view::LeakJudgement judged;
  for (const Attempt& a : trace.attempts) {
    auto tr = view::held_growth(a);
    if (!tr) continue;
    view::LeakJudgement j = view::judge_leak(*tr, rule);
    if (!worst || (j.leak && !judged.leak) || (j.leak == judged.leak && tr->slope > worst->slope)) {
      worst = tr;
      judged = j;
    }
  }
  std::vector<Evidence> ev;
  auto span = [&](const Trend& tr) {
    std::string s = "over steps " + std::to_string(tr.from) + "\xE2\x80\x93" + std::to_string(tr.to);
    if (trace.attempts.size() > 1) s += " of " + view::attempt_name(tr.attempt);
    return s;
  };
  // "11.20 MiB by step 20, 70% of the 16.00 MiB held at step 3" / "it reaches the cap of 64.00 MiB by step 71"
  auto extent = [&](const Trend& tr, const view::LeakJudgement& j) {
    if (j.cap_step >= 0)
      return "at that rate it reaches the job's cap of " + format_bytes(rule.cap) + " by step " + std::to_string(j.cap_step);
    std::string s = mib(j.grown) + " by step " + std::to_string(j.horizon);
    if (j.base > 0)
      s += ", " + percent(j.grown / j.base) + " of the " + format_bytes_figure(j.base) + " held at step " +
           std::to_string(tr.from);
    return s;
  };
  const std::string limit_words = limit ? " (limit " + mib(*limit) + ")" : std::string();
  // Note [Thinned event logs] in event_log_reader.cpp: an attempt whose fit the reader could not fold is not judged.
  const Attempt* unjudged = nullptr;
  for (const Attempt& a : trace.attempts)
    if (!unjudged && view::growth_unjudged(a)) unjudged = &a;
  if (worst) {
    ev.push_back({worst->attempt, worst->t, "held memory slope " + mib(worst->slope) + " per step"});
    if (judged.leak) {
      // Issue 14: the failure carries the finding that explains it, or says that none did.
      std::string why = "no finding matched (docs/diagnosis.md)";
      DiagnoseOptions options;
      if (limit) options.growth_per_step = static_cast<uint64_t>(*limit);
      options.leak_share = share;
      options.leak_steps = horizon;
      for (const Finding& f : diagnose(trace, options))
        if (f.rule == "kept_with_graph") { why = f.sentence; break; }
      std::string what = "held memory grew by " + mib(worst->slope) + " per step " + span(*worst);
      if (limit) what += limit_words;
      else what += " and went on growing through every third of them: " + extent(*worst, judged) + " (a leak: " +
                   percent(share) + " or more by the job's end)";
      return verdict(VerdictStatus::fail, what + ": " + why, ev);
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
          const double allowed = limit ? *limit * static_cast<double>(k + 1)
                                       : std::max(kRecoverySlack, kRecoveryShare * static_cast<double>(pre));
          back = back || static_cast<double>(after[k].second) <= static_cast<double>(pre) + allowed;
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
  // return-to-the-pre-fault-level checks above, which allow some slack, let a small one pass.
  std::string golden_words;
  if (args.contains("golden") && args["golden"].is_object() && !args["golden"].empty() && !trace.attempts.empty()) {
    const nlohmann::json& golden = args["golden"];
    // In uint64_t, as the suite gives them: a golden figure or tolerance near 2^64 must not wrap a sum.
    const uint64_t tolerance = args.value("golden_tolerance", uint64_t{64 * 1024});
    const Attempt& a = trace.attempts.back();
    auto steps = view::steps_of(a);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      auto g = golden.find(std::to_string(it->step));
      if (g == golden.end() || !g->is_number_unsigned()) continue;
      const int64_t h = view::held_at(a, *it);
      if (h < 0) continue;
      const uint64_t held = static_cast<uint64_t>(h), level = g->get<uint64_t>();
      ev.push_back({a.index, it->t, view::step_text(it->step) + ": " + format_bytes(held) +
                                         " held; the run without faults held " + format_bytes(level)});
      if (held > level && held - level > tolerance)
        return verdict(VerdictStatus::fail, "at " + view::step_text(it->step) + " the job held " +
                                                format_bytes(held - level) + " more than the same job "
                                                "without faults (" + format_bytes(held) + " against " +
                                                format_bytes(level) + ", tolerance " + format_bytes(tolerance) +
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
  // No plateau (Note [A leak is a trend]): steady growth is a leak in the longer training a short run stands for.
  if (!limit && horizon < 0 && judged.steady && worst->slope * kShortRunStandsFor >= view::kLeakFloor) {
    const int64_t fitted = worst->to - worst->from + 1;
    std::string what = "held memory grew by " + mib(worst->slope) + " per step " + span(*worst) +
                       " and went on growing through every third of them, with no plateau";
    if (fitted < kLeakDecideSteps)
      return verdict(VerdictStatus::inconclusive,
                     what + ": too few steps to tell growth from warm-up: run " +
                         std::to_string(kLeakDecideSteps + static_cast<int64_t>(view::kGrowthWarmUpSteps)) +
                         " steps or more, or give `steps:` the length of the real training (or `growth_per_step:` a limit)",
                     ev);
    return verdict(VerdictStatus::fail,
                   what + " (" + extent(*worst, judged) + "): the training this run stands for is longer, and memory that grows "
                          "at every step runs out (a leak; give `steps:` the length of the real training to judge it by its share)",
                   ev);
  }
  std::string trend;
  if (worst->slope <= view::kLeakGranule) trend = "held memory did not grow " + span(*worst) + limit_words;
  else if (limit) trend = "held memory grew by " + mib(worst->slope) + " per step " + span(*worst) + limit_words;
  else if (!judged.steady)
    trend = "held memory grew by " + mib(worst->slope) + " per step " + span(*worst) +
            ", but not steadily (warm-up or the allocator's caching: the lowest held in each third of them was " +
            format_bytes_figure(worst->low[0]) + ", " + format_bytes_figure(worst->low[1]) +
            ", " + format_bytes_figure(worst->low[2]) + ")";
  else if (judged.grown < view::kLeakFloor)
    trend = "held memory grew steadily by " + mib(worst->slope) + " per step " + span(*worst) + ", " + extent(*worst, judged) +
            ", less than one of the allocator's 2 MiB segments by the job's end (give `steps:` the length of the real "
            "training to extrapolate to it)";
  else
    trend = "held memory grew steadily by " + mib(worst->slope) + " per step " + span(*worst) + ", " + extent(*worst, judged) +
            ", under the " + percent(share) + " that makes a leak (give `steps:` the length of the real training to "
            "extrapolate to it)";
  return verdict(VerdictStatus::pass, trend + recovered + golden_words, ev);
}

}  // namespace oomh::checks
