// The checks for the advice that is about habits rather than recovery (issue 14): gradients cleared every
// optimizer step, evaluation without a graph, and the samples per optimizer step kept after halving.
// Each reads what the probe records (docs/events.md): `step`'s grads_cleared (Note [Cleared gradients] in
// python/oomharness/probe/grads.py), `eval_forward`, and `samples`.

#include <algorithm>

#include "checks.h"
#include "oomharness/events.h"
#include "oomharness/policies/findings.h"
#include "trace_view.h"

namespace oomh::checks {

namespace {

bool is_probe(const Event& e, const char* kind) { return e.src == events::kSrcProbe && e.kind == kind; }

// The finding of `rule`, as a clause to append, when one fired.
std::string finding_clause(const Trace& trace, const std::string& rule) {
  for (const Finding& f : diagnose(trace))
    if (f.rule == rule) return ": " + f.sentence;
  return {};
}

}  // namespace

Verdict zero_grad(const Trace& trace, const nlohmann::json&) {
  uint64_t asked = 0, uncleared = 0;
  std::vector<Evidence> ev;
  for (const Attempt& a : trace.attempts) {
    for (const Event& e : a.events) {
      if (!is_probe(e, events::kStep) || !e.has("grads_cleared")) continue;
      if (!a.thinned) ++asked;
      if (e.flag("grads_cleared", true)) continue;
      if (!a.thinned) ++uncleared;
      if (ev.size() < 3)
        ev.push_back({a.index, e.t, view::step_text(e.integer("step")) + " stepped without clearing the gradients"});
    }
    // Note [Thinned event logs] in event_log_reader.cpp: the counts of a thinned log come from every line.
    if (a.thinned) {
      asked += a.thinned->grads_asked;
      uncleared += a.thinned->grads_uncleared;
    }
  }
  if (asked == 0)
    return verdict(VerdictStatus::inconclusive,
                   "no optimizer step said whether the gradients were cleared: it takes the Python probe and at least two optimizer steps");
  if (uncleared > 0)
    return verdict(VerdictStatus::fail, std::to_string(uncleared) + " of " + std::to_string(asked) +
                                            " optimizer steps ran without the gradients being cleared since the previous one" +
                                            finding_clause(trace, "grads_not_cleared"), ev);
  return verdict(VerdictStatus::pass, "the gradients were cleared before each of the " + std::to_string(asked) +
                                          " optimizer steps after the first", ev);
}

Verdict eval_no_grad(const Trace& trace, const nlohmann::json&) {
  int evals = 0;
  std::vector<Evidence> ev;
  for (const Attempt& a : trace.attempts)
    for (const Event& e : a.events) {
      if (!is_probe(e, events::kEvalForward)) continue;
      ++evals;
      if (e.flag("grad", false)) {
        ev.push_back({a.index, e.t, "evaluation at " + view::step_text(e.integer("step")) + " ran with gradients enabled"});
        return verdict(VerdictStatus::fail, "an evaluation built an autograd graph" + finding_clause(trace, "eval_with_graph"), ev);
      }
    }
  if (evals == 0)
    return verdict(VerdictStatus::inconclusive,
                   "no evaluation was seen (the probe sees a forward of the model in eval mode or under no_grad)");
  return verdict(VerdictStatus::pass, "all " + std::to_string(evals) + " evaluations ran without building a graph", ev);
}

Verdict effective_batch(const Trace& trace, const nlohmann::json& args) {
  // Samples per optimizer step: each `samples` event belongs to the `step` event that follows it.
  // Note [Distinct samples] (python/oomharness/probe/batches.py): beside the count, how many of a step's
  // samples differ in content, where the probe fingerprinted them.
  struct Counted { int attempt; double t; int64_t step; int64_t samples; int64_t distinct; };
  std::vector<Counted> counted;
  for (const Attempt& a : trace.attempts) {
    int64_t pending = -1;
    for (const Event& e : a.events) {
      if (is_probe(e, events::kSamples)) pending = std::max<int64_t>(pending, 0) + std::max<int64_t>(0, e.integer("count", 0));
      if (is_probe(e, events::kStep) && pending >= 0) {
        counted.push_back({a.index, e.t, e.integer("step"), pending, view::batch_data(e).distinct});
        pending = -1;
      }
    }
  }
  if (counted.empty())
    return verdict(VerdictStatus::inconclusive,
                   "no samples were counted per optimizer step: it takes the Python probe (or probe.samples())");
  int64_t want = args.contains("samples") && args["samples"].is_number() ? args["samples"].get<int64_t>() : counted.front().samples;
  std::vector<Evidence> ev;
  ev.push_back({counted.front().attempt, counted.front().t, view::step_text(counted.front().step) + " took " +
                                                              std::to_string(counted.front().samples) + " samples"});
  auto ooms = view::ooms_of(trace);
  auto past_oom = [&](const Counted& c) {
    return std::any_of(ooms.begin(), ooms.end(), [&](const view::OomPoint& o) {
      return o.attempt < c.attempt || (o.attempt == c.attempt && o.t < c.t);
    });
  };
  // The fewest distinct samples a step took before any OOM: data with samples alike in content (duplicates in
  // the data set) sets the bar it has; without such a step, every sample counted must differ.
  int64_t want_distinct = want;
  for (const Counted& c : counted)
    if (!past_oom(c) && c.distinct >= 0) want_distinct = std::min(want_distinct, c.distinct);
  int after = 0;
  int64_t least_distinct = -1;
  for (const Counted& c : counted) {
    if (!past_oom(c)) continue;
    ++after;
    if (c.distinct >= 0 && c.distinct < c.samples && c.distinct < want_distinct) {
      ev.push_back({c.attempt, c.t, view::step_text(c.step) + " took " + std::to_string(c.samples) + " samples, " +
                                        std::to_string(c.distinct) + " of them distinct"});
      return verdict(VerdictStatus::fail, "after the OOM, " + view::step_text(c.step) + " took " + std::to_string(c.samples) +
                                              " samples but only " + std::to_string(c.distinct) +
                                              " distinct ones: the same samples were trained on more than once in one "
                                              "optimizer step (a redo that repeated part of the batch), so the effective batch was " +
                                              std::to_string(c.distinct) + ", not " + std::to_string(want_distinct), ev);
    }
    if (c.distinct >= 0) least_distinct = least_distinct < 0 ? c.distinct : std::min(least_distinct, c.distinct);
    if (c.samples < want) {
      ev.push_back({c.attempt, c.t, view::step_text(c.step) + " took " + std::to_string(c.samples) + " samples"});
      return verdict(VerdictStatus::fail, "after the OOM, " + view::step_text(c.step) + " took " + std::to_string(c.samples) +
                                              " samples per optimizer step instead of " + std::to_string(want) +
                                              ": halve the micro-batch and accumulate gradients over more of them "
                                              "(oomharness.recover.BatchHalving) to keep the effective batch", ev);
    }
  }
  if (after == 0)
    return verdict(VerdictStatus::inconclusive, "no optimizer step completed after the OOM: nothing to compare", ev);
  // Note [Thinned event logs] in event_log_reader.cpp: a dropped step took as many samples as the kept one before it.
  bool thinned = std::any_of(trace.attempts.begin(), trace.attempts.end(),
                             [](const Attempt& a) { return view::steps_thinned(a) != nullptr; });
  return verdict(VerdictStatus::pass, "each of the " + std::to_string(after) + " optimizer steps " +
                                          (thinned ? "kept (the event log was thinned) " : "") + "after the OOM took " +
                                          std::to_string(want) + " samples or more" +
                                          (least_distinct >= 0 ? ", " + std::to_string(std::min(least_distinct, want)) +
                                                                     " or more of them distinct in content"
                                                               : " (the probe did not fingerprint them: whether they were distinct is not known)"),
                 ev);
}

}  // namespace oomh::checks
