// Findings (findings.h): each rule reads the probe's events and says, in one sentence, what held the memory
// or what the code did against the advice, with the fix.
//
// Note [Which line keeps a leak]
// A breakdown names, for the tensors that are not parameters, gradients or optimizer state, the user's lines
// that made them and how many bytes each line's tensors hold (`sites`, docs/events.md). A leak shows as a
// line whose tensors hold more at each step's end: the breakdowns the probe writes when held memory grew at
// a step's end (`at: "step"`, Note [The growth breakdown] in probe/memory.py) are compared, first and last, and
// the line that grew the most is named. It is the line that MADE the kept tensors (a forward, a
// loss), innermost first with its callers. Where the probe found the variable that keeps them (`kept_by`:
// a list the loop appends to, with the line that appends; Note [Which variable keeps them] in
// python/oomharness/_sites.py), that line is named too: the fix goes there.
//
// Note [Kept after the loop]
// Rule 5: references kept after the loop. The probe writes a breakdown `at: "after_loop"` when an evaluation
// starts after training steps (Note [After the loop] in probe/memory.py), before the evaluation allocates
// anything. There parameters, gradients and optimizer state are what a model needs; the evaluation's own
// arguments are counted apart (`inputs`); every other live tensor (`other` - `inputs`) was left alive by the
// code before it: the loop's last output or loss still bound, a list of the loop's tensors. More than
// DiagnoseOptions::kept_after_loop of them is the finding, naming the line that made the most of them and
// the variable that keeps them where the probe found it. The breakdown with the most such bytes is named.
//
// Note [The largest batch that fits]
// At an OOM, the bytes that grow with the batch are the activations and other live tensors (`other`); the
// rest (parameters, gradients, optimizer state, workspaces) stays. Per-sample cost is other / batch. An OOM
// comes in the middle of a step, so that figure is a lower bound: when a peak breakdown of an earlier
// completed step exists (within 1/16 of the true peak, Note [The peak breakdown] in probe/memory.py) its
// figures are used instead. The largest batch that fits is (total - fixed) / per-sample; from the lower bound
// it is capped at half the failed batch, since the failed batch did not fit. When the earlier peak's figures
// say that the failed batch itself fits, the batch is not what ran out (a leak grew since): no finding.
// Issue 26: an OOM before the first backward has no gradients (nor optimizer state) in its figures; they
// come later and need room too, so from such an OOM alone no batch is said to fit: "at most N samples
// could fit", fewer once they exist. When the fixed memory leaves no room at all, batch_halving says that
// nothing fits and what holds it (Note [When nothing fits] in checks_recovery.cpp).

#include "oomharness/policies/findings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "oomharness/events.h"
#include "oomharness/policies/oom_kinds.h"
#include "oomharness/json_number.h"
#include "oomharness/units.h"
#include "trace_view.h"

namespace oomh {

namespace {

std::string bytes_text(double b) { return format_bytes_figure(b); }

std::string mib_text(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024.0));
  return buf;
}

// The innermost line of a site ("train.py:79 < train.py:119" -> "train.py:79").
std::string innermost(const std::string& site) { return site.substr(0, site.find(" < ")); }

// Note [An OOM that is not called an OOM]
// Rule 0: an OOM that reached the code as another error than OutOfMemoryError (Note [Which errors are OOMs]
// in oom_kinds.h): cuBLAS's handle made at the first matmul, cuDNN's, NCCL's buffers, CUDA's code inside
// torch.AcceleratorError, the CPU allocator. Code that catches OutOfMemoryError (the usual advice, and
// Accelerate's, Transformers' and Lightning's helpers) lets such an OOM end the run, so whatever recovery it
// has never runs. The finding names the first one, what it reached the code as, whose allocation it was,
// and what the code must catch or allocate early (the table's advice).
std::optional<Finding> oom_as_other_error(const Trace& trace) {
  for (const Attempt& a : trace.attempts)
    for (const view::OomPoint& o : view::ooms_of(a)) {
      if (!o.as_other_error()) continue;
      const oom::OomKind* k = oom::kind_named(o.kind);
      std::string message = o.message.substr(0, o.message.find('\n'));
      if (message.size() > 160) message = message.substr(0, 157) + "...";
      std::string sentence = "the OOM at " + view::step_text(o.step) + " reached the code as " +
                             (o.exception.empty() ? std::string("another error") : o.exception) +
                             ", not torch.OutOfMemoryError (" + message + "; " + std::string(k->source) + " ran out of " +
                             std::string(k->memory) + " memory): " +
                             (o.caught ? std::string("the code caught it, but code that catches only OutOfMemoryError would not")
                                       : "it ended " + attempt_name(o.attempt) + ", past any handler of OutOfMemoryError") +
                             ". " + std::string(k->advice);
      return Finding{"oom_as_other_error", sentence, {}, a.index, o.t, {}};
    }
  return std::nullopt;
}

std::optional<Finding> grads_not_cleared(const Trace& trace) {
  for (const Attempt& a : trace.attempts) {
    const Event* first = nullptr;
    uint64_t uncleared = 0, asked = 0;
    for (const Event& e : a.events) {
      if (e.src != events::kSrcProbe || e.kind != events::kStep || !e.has("grads_cleared")) continue;
      ++asked;
      if (e.flag("grads_cleared", true)) continue;
      ++uncleared;
      if (!first) first = &e;
    }
    if (!first) continue;
    // Note [Thinned event logs] in event_log_reader.cpp: the counts of a thinned log come from every line.
    if (a.thinned) {
      asked = a.thinned->grads_asked;
      uncleared = a.thinned->grads_uncleared;
    }
    std::string site = first->text("site");
    std::string who = site.empty() ? std::string("optimizer.step()") : site + "'s optimizer.step()";
    return Finding{"grads_not_cleared",
                   who + " ran without the gradients being cleared since the previous step (" + std::to_string(uncleared) +
                       " of " + std::to_string(asked) + " steps, first " + view::step_text(first->integer("step")) +
                       "): each step adds its gradient to all earlier ones; call optimizer.zero_grad(set_to_none=True) once per optimizer step",
                   site, a.index, first->t, {}};
  }
  return std::nullopt;
}

std::map<std::string, double> site_bytes(const Event& e) {
  std::map<std::string, double> out;
  if (!e.has("sites") || !e.fields["sites"].is_array()) return out;
  for (const auto& s : e.fields["sites"])
    if (s.is_object() && s.contains("site") && s["site"].is_string() && s.contains("bytes") && s["bytes"].is_number())
      out[s["site"].get<std::string>()] += s["bytes"].get<double>();
  return out;
}

// The variable that keeps the tensors of `site` in breakdown `e` (Note [Which variable keeps them]), as
// {name, how, line}; empty when the probe did not find one.
struct Keeper {
  std::string name, how, line;
};

Keeper keeper_of(const Event& e, const std::string& site) {
  if (!e.has("sites") || !e.fields["sites"].is_array()) return {};
  for (const auto& s : e.fields["sites"]) {
    if (!s.is_object() || s.value("site", std::string()) != site || !s.contains("kept_by") || !s["kept_by"].is_object())
      continue;
    const auto& k = s["kept_by"];
    return Keeper{k.value("name", std::string()), k.value("how", std::string()), k.value("site", std::string())};
  }
  return {};
}

// " and appended to `history` at train.py:254", " and kept in `out` (assigned at train.py:291)", or "".
std::string keeper_words(const Keeper& k) {
  if (k.name.empty()) return "";
  if (k.how == "appends to" && !k.line.empty()) return " and appended to `" + k.name + "` at " + k.line;
  if (k.how == "assigns" && !k.line.empty()) return " and kept in `" + k.name + "` (assigned at " + k.line + ")";
  return " and kept in `" + k.name + "`";
}

std::optional<Finding> kept_with_graph(const Trace& trace, const DiagnoseOptions& options) {
  std::optional<Finding> best;
  double best_slope = 0;
  std::optional<double> limit;
  if (options.growth_per_step) limit = static_cast<double>(*options.growth_per_step);
  const view::LeakRule rule = view::leak_rule(trace, limit, options.leak_share, options.leak_steps);
  for (const Attempt& a : trace.attempts) {
    auto growth = view::held_growth(a);
    if (!growth || !view::judge_leak(*growth, rule).leak || growth->slope <= best_slope) continue;
    auto ends = view::breakdowns_of(a, "step");
    std::string site;
    double grew = 0, held = 0;
    Keeper keeper;
    if (ends.size() >= 2) {  // Note [Which line keeps a leak]
      auto first = site_bytes(*ends.front()), last = site_bytes(*ends.back());
      for (const auto& [s, b] : last) {
        double d = b - (first.count(s) ? first[s] : 0.0);
        if (d > grew) { grew = d; site = s; held = b; }
      }
      if (!site.empty()) keeper = keeper_of(*ends.back(), site);
    }
    std::string per_step = "+" + mib_text(growth->slope) + " per step over steps " + std::to_string(growth->from) + "-" +
                           std::to_string(growth->to);
    std::string sentence =
        site.empty() ? "tensors stay alive step after step (" + per_step +
                           ") and no line is known (no step-end breakdowns grew: the probe writes them on the virtual device): "
                           "look for losses or outputs kept without detach() (a list, a running total) and keep "
                           "loss.item() or loss.detach() instead"
                     : "tensors made at " + site + keeper_words(keeper) + " stay alive step after step (" + per_step + "; " +
                           bytes_text(held) +
                           " of them at the last step's end): a loss or output kept with its autograd graph keeps every activation "
                           "of its step; keep loss.item() or out.detach() instead";
    best = Finding{"kept_with_graph", sentence, innermost(site), a.index, growth->t, keeper.line};
    best_slope = growth->slope;
  }
  return best;
}

}  // namespace

std::string memory_holders(const Event& e, double* fixed_out) {
  const double fixed = e.number("parameters") + e.number("gradients") + e.number("optimizer_state") + e.number("workspace");
  if (fixed_out) *fixed_out = fixed;
  std::string s = "parameters " + bytes_text(e.number("parameters")) + ", gradients " + bytes_text(e.number("gradients")) +
                  ", optimizer state " + bytes_text(e.number("optimizer_state")) + " and workspaces " +
                  bytes_text(e.number("workspace")) + " (" + bytes_text(fixed) + " that no batch size changes) and " +
                  bytes_text(e.number("other")) + " of activations and other tensors";
  if (e.number("reserved") > e.number("allocated"))
    s += " (the allocator's segments held " + bytes_text(e.number("reserved")) + ")";
  if (e.number("total") > 0) s += ", under a total of " + bytes_text(e.number("total"));
  return s;
}

namespace {

std::optional<Finding> batch_too_large(const Trace& trace) {
  for (const Attempt& a : trace.attempts) {
    auto peaks = view::breakdowns_of(a, "peak");
    for (const Event* e : view::breakdowns_of(a, "oom")) {
      double allocated = e->number("allocated"), other = e->number("other"), total = e->number("total");
      int64_t batch = e->integer("batch_size");
      // A fault injected into a device with room to spare says nothing of the batch: the memory must have
      // been nearly full (reserved at least 3/4 of it) for the batch to be the cause.
      if (allocated <= 0 || batch <= 0 || total <= 0 || other < 0.5 * allocated || e->number("reserved") < 0.75 * total)
        continue;
      // Note [The largest batch that fits]
      const Event* full = nullptr;
      for (const Event* p : peaks)
        if (p->t < e->t && p->integer("step") < e->integer("step") && p->integer("batch_size") > 0) full = p;
      const Event& basis = full ? *full : *e;
      double per_sample = basis.number("other") / static_cast<double>(basis.integer("batch_size"));
      double fixed = basis.number("parameters") + basis.number("gradients") + basis.number("optimizer_state") +
                     basis.number("workspace");
      // Issue 26: the OOM's own figures hold no gradients or optimizer state when it came before the first
      // backward or optimizer step: those are still to come, so "a batch of N fits" would be a guess.
      const bool state_to_come = !full && e->number("gradients") <= 0;
      int64_t fits = per_sample > 0 ? job_integer(std::floor((total - fixed) / per_sample)) : 0;
      if (!full) fits = std::min<int64_t>(fits, batch / 2);
      fits = std::max<int64_t>(fits, 0);
      // A batch as large as the failed one fits by the earlier peak's figures: what grew since was not the
      // batch (a leak: kept_with_graph says so).
      if (fits >= batch) continue;
      std::string site;
      if (e->has("top") && e->fields["top"].is_array() && !e->fields["top"].empty() && e->fields["top"][0].is_object())
        site = e->fields["top"][0].value("site", std::string());
      std::string sentence =
          "at the OOM in " + view::step_text(e->integer("step")) + " (" + e->text("phase", "unknown phase") + ", batch " +
          std::to_string(batch) + ") activations and other live tensors held " + bytes_text(other) + " of " +
          bytes_text(allocated) + " allocated" + (site.empty() ? "" : ", most of them made at " + site) + ": " +
          (full ? "" : "at least ") + mib_text(per_sample) + " per sample, beside " + bytes_text(fixed) +
          " of parameters, gradients, optimizer state and workspaces; " +
          (fits <= 0
               ? "not even one sample fits under the " + bytes_text(total) +
                     " of memory: use activation checkpointing or a smaller model"
           : state_to_come
               ? "at most " + std::to_string(fits) + " samples could fit under the " + bytes_text(total) +
                     " of memory, fewer once the gradients and optimizer state of the first backward and optimizer "
                     "steps are counted (it ran out before they existed)"
               : "a batch of " + std::to_string(fits) + " fits under the " + bytes_text(total) +
                     " of memory: use it with " + std::to_string((batch + fits - 1) / fits) +
                     " gradient-accumulation steps to keep the effective batch of " + std::to_string(batch));
      return Finding{"batch_too_large", sentence, innermost(site), a.index, e->t, {}};
    }
  }
  return std::nullopt;
}

std::optional<Finding> eval_with_graph(const Trace& trace) {
  const Event* train_mode = nullptr;
  int train_mode_attempt = 0;
  for (const Attempt& a : trace.attempts)
    for (const Event& e : a.events) {
      if (e.src != events::kSrcProbe || e.kind != events::kEvalForward) continue;
      std::string site = e.text("site");
      std::string where = site.empty() ? "the evaluation" : "the evaluation at " + site;
      if (e.flag("grad", false))
        return Finding{"eval_with_graph",
                       where + " (" + view::step_text(e.integer("step")) +
                           ") ran with gradients enabled: every evaluation forward builds an autograd graph and keeps its "
                           "activations; run it under `with torch.no_grad():` (or torch.inference_mode()) after model.eval()",
                       site, a.index, e.t, {}};
      if (e.flag("training", false) && !train_mode) { train_mode = &e; train_mode_attempt = a.index; }
    }
  if (train_mode) {
    std::string site = train_mode->text("site");
    return Finding{"eval_with_graph",
                   (site.empty() ? std::string("the evaluation") : "the evaluation at " + site) +
                       " ran under no_grad but with the model in train mode: dropout and batch-norm updates stay on; call "
                       "model.eval() before it and model.train() after",
                   site, train_mode_attempt, train_mode->t, {}};
  }
  return std::nullopt;
}

std::optional<Finding> kept_after_loop(const Trace& trace, const DiagnoseOptions& options) {
  const Event* best = nullptr;
  int best_attempt = 0;
  double best_kept = 0;
  for (const Attempt& a : trace.attempts)
    for (const Event* e : view::breakdowns_of(a, "after_loop")) {  // Note [Kept after the loop]
      double kept = e->number("other") - e->number("inputs");
      if (kept > static_cast<double>(options.kept_after_loop) && kept > best_kept) {
        best = e;
        best_attempt = a.index;
        best_kept = kept;
      }
    }
  if (!best) return std::nullopt;
  std::string site, eval_site = best->text("site");
  double site_held = 0;
  if (best->has("sites") && best->fields["sites"].is_array())
    for (const auto& s : best->fields["sites"])
      if (s.is_object() && s.contains("bytes") && s["bytes"].is_number() && !s.value("site", std::string()).empty() &&
          s["bytes"].get<double>() > site_held) {
        site_held = s["bytes"].get<double>();
        site = s.value("site", std::string());
      }
  Keeper keeper = site.empty() ? Keeper{} : keeper_of(*best, site);
  int64_t steps = best->integer("completed", best->integer("step") - 1);
  std::string sentence =
      "after " + std::to_string(steps) + " training step" + (steps == 1 ? "" : "s") + ", when the evaluation" +
      (eval_site.empty() ? std::string() : " at " + eval_site) + " began, " + bytes_text(best_kept) +
      " of tensors made before it were still alive beside its inputs" +
      (site.empty() ? std::string()
                    : ", " + bytes_text(site_held) + " of them made at " + site + keeper_words(keeper)) +
      ": the loop's variables (its last output, loss or batch) and what it appended to stay bound after the loop and hold "
      "their memory through what follows; `del` them after the loop (or run the loop in a function of its own) and "
      "keep only loss.item() or detached copies";
  return Finding{"kept_after_loop", sentence, innermost(site), best_attempt, best->t, keeper.line};
}

}  // namespace

const std::vector<std::string>& finding_rules() {
  static const std::vector<std::string> rules = {"oom_as_other_error", "grads_not_cleared", "kept_with_graph", "batch_too_large",
                                                 "eval_with_graph", "kept_after_loop"};
  return rules;
}

std::vector<Finding> diagnose(const Trace& trace, const DiagnoseOptions& options) {
  std::vector<Finding> out;
  for (auto f : {oom_as_other_error(trace), grads_not_cleared(trace), kept_with_graph(trace, options), batch_too_large(trace), eval_with_graph(trace),
                 kept_after_loop(trace, options)})
    if (f) out.push_back(std::move(*f));
  return out;
}

void to_json(nlohmann::json& j, const Finding& f) {
  j = nlohmann::json{{"rule", f.rule}, {"sentence", f.sentence}, {"attempt", f.attempt}, {"t", f.t}};
  if (!f.site.empty()) j["site"] = f.site;
  if (!f.kept_at.empty()) j["kept_at"] = f.kept_at;
}

void from_json(const nlohmann::json& j, Finding& f) {
  f.rule = j.value("rule", std::string());
  f.sentence = j.value("sentence", std::string());
  f.site = j.value("site", std::string());
  f.kept_at = j.value("kept_at", std::string());
  f.attempt = whole_member(j, "attempt", 0);
  f.t = j.value("t", 0.0);
}

}  // namespace oomh
