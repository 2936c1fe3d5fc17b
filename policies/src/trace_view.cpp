// Views of a trace: steps, OOMs and injections per attempt (trace_view.h explains the merging rules).

#include "trace_view.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cctype>
#include <cstdlib>
#include <set>

#include "oomharness/events.h"
#include "oomharness/policies/oom_kinds.h"
#include "oomharness/units.h"

namespace oomh::view {

namespace {

bool is_probe(const Event& e, const char* kind) { return e.src == events::kSrcProbe && e.kind == kind; }
bool is_observed(const Event& e) { return e.src == events::kSrcRunner && e.kind == events::kObserved; }

// An observed value is whatever the regex captured: a number, or text holding one.
std::optional<double> observed_number(const Event& e) {
  if (!e.has("value")) return std::nullopt;
  const nlohmann::json& v = e.fields["value"];
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  std::string s = v.get<std::string>();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  if (start == s.size()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str() + start, &end);
  if (end != s.c_str() + s.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}

void set_known(StepPoint& p, const std::string& key, double value) {
  if (key == "batch_size") p.batch = job_integer(value);
  else if (key == "allocated") p.allocated = job_integer(value);
  else if (key == "reserved") p.reserved = job_integer(value);
  else p.metrics[key] = value;
}

}  // namespace

BatchData batch_data(const Event& e) {
  BatchData d;
  if (!e.has("data") || !e.fields["data"].is_object()) return d;
  const nlohmann::json& j = e.fields["data"];
  if (j.contains("samples") && j["samples"].is_number_integer()) d.samples = job_integer(j["samples"], -1);
  if (j.contains("digest") && j["digest"].is_string()) {
    const std::string hex = j["digest"].get<std::string>();
    char* end = nullptr;
    d.digest = std::strtoull(hex.c_str(), &end, 16);
    if (hex.empty() || end != hex.c_str() + hex.size()) d.samples = -1;  // unreadable: no evidence
  } else {
    d.samples = -1;
  }
  d.per_sample = j.contains("per_sample") && j["per_sample"].is_boolean() && j["per_sample"].get<bool>();
  if (j.contains("shape") && j["shape"].is_array())
    for (const auto& v : j["shape"])
      if (v.is_number_integer()) d.shape.push_back(v.get<int64_t>());
  if (j.contains("dim") && j["dim"].is_number_integer()) d.dim = j["dim"].get<int>();
  if (j.contains("from") && j["from"].is_string()) d.from = j["from"].get<std::string>();
  if (j.contains("loader") && j["loader"].is_string()) d.loader = j["loader"].get<std::string>();
  if (j.contains("distinct") && j["distinct"].is_number_integer()) {
    d.distinct = job_integer(j["distinct"], -1);
    if (d.distinct > d.samples || d.distinct < 0) d.distinct = -1;  // malformed: no evidence
  }
  if (j.contains("whole") && j["whole"].is_boolean()) d.whole = j["whole"].get<bool>();
  if (j.contains("parts") && j["parts"].is_array())
    for (const auto& v : j["parts"])
      if (v.is_string()) d.parts.push_back(std::strtoull(v.get<std::string>().c_str(), nullptr, 16));
  return d;
}

std::string BatchData::text() const {
  if (!loader.empty()) return "the batch of samples " + loader;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  return "a batch of " + std::to_string(samples) + " samples (fingerprint " + std::string(hex, 8) + ")";
}

std::optional<size_t> redone_by(const BatchData& failed, const std::vector<const StepPoint*>& after) {
  if (!failed.known()) return std::nullopt;
  int64_t samples = 0;
  uint64_t sum = 0;
  for (size_t k = 0; k < after.size(); ++k) {
    const BatchData& d = after[k]->data;
    if (!d.known()) return std::nullopt;
    if (k == 0 && d.same(failed)) return 1;
    if (k == 0 && !d.parts.empty()) {
      // Each failed forward among the step's forwards, or (per-sample digests) among the sums of runs of
      // them: a piece that failed and was redone as smaller pieces within the step.
      std::set<uint64_t> have(d.parts.begin(), d.parts.end());
      if (failed.per_sample && d.per_sample)
        for (size_t from = 0; from < d.parts.size(); ++from) {
          uint64_t run = d.parts[from];
          for (size_t to = from + 1; to < d.parts.size(); ++to) have.insert(run += d.parts[to]);
        }
      std::vector<uint64_t> want = failed.parts.empty() ? std::vector<uint64_t>{failed.digest} : failed.parts;
      bool all = true;
      for (uint64_t w : want) all = all && have.count(w) > 0;
      if (all) return 1;
    }
    if (!failed.per_sample || !d.per_sample) return 0;
    samples = std::min(samples + d.samples, kJobIntegerLimit);  // each at most the limit: the sum cannot overflow
    sum += d.digest;  // modulo 2^64, as the probe adds
    if (samples >= failed.samples) return samples == failed.samples && sum == failed.digest ? std::optional<size_t>(k + 1) : 0;
  }
  return 0;
}

namespace {

std::vector<StepPoint> probe_steps(const Attempt& a) {
  std::vector<StepPoint> out;
  for (const Event& e : a.events) {
    if (!is_probe(e, events::kStep) || !e.has("step")) continue;
    StepPoint p;
    p.attempt = a.index;
    p.t = e.t;
    p.step = e.integer("step");
    p.batch = e.integer("batch_size", -1);
    if (p.batch >= 0) p.batch_from = e.text("batch_from");
    p.allocated = e.integer("allocated", -1);
    p.reserved = e.integer("reserved", -1);
    p.data = batch_data(e);
    for (auto it = e.fields.begin(); it != e.fields.end(); ++it) {
      if (!it->is_number()) continue;
      const std::string& k = it.key();
      if (k == "step" || k == "batch_size" || k == "allocated" || k == "reserved") continue;
      p.metrics[k] = it->get<double>();
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Observed values of one output line arrive as consecutive events that share the line (Note [Two
// sources of steps]); a group with a `step` value is one completed step. `batch_size` is sticky: a job
// that prints "batch size now 32" once runs its later steps at 32.
std::vector<StepPoint> observed_steps(const Attempt& a) {
  std::vector<StepPoint> out;
  int64_t current_batch = -1;
  size_t i = 0;
  const auto& ev = a.events;
  while (i < ev.size()) {
    if (!is_observed(ev[i])) { ++i; continue; }
    std::map<std::string, double> group;
    std::string line = ev[i].text("line");
    double t = ev[i].t;
    size_t j = i;
    while (j < ev.size() && is_observed(ev[j]) && ev[j].text("line") == line && std::fabs(ev[j].t - t) < 0.01 &&
           !group.count(ev[j].text("key"))) {
      if (auto v = observed_number(ev[j])) group[ev[j].text("key")] = *v;
      ++j;
    }
    if (j == i) ++j;  // a repeated key on the same line: start a new group with it
    i = j;
    if (auto b = group.find("batch_size"); b != group.end()) current_batch = job_integer(b->second);
    auto s = group.find("step");
    if (s == group.end()) continue;
    StepPoint p;
    p.attempt = a.index;
    p.t = t;
    p.step = job_integer(s->second);
    for (const auto& [k, v] : group)
      if (k != "step") set_known(p, k, v);
    if (p.batch < 0) p.batch = current_batch;
    out.push_back(std::move(p));
  }
  return out;
}

bool oom_caught(const Attempt& a, size_t index) {
  const Event& e = a.events[index];
  if (e.flag("caught", false)) return true;
  for (size_t j = index + 1; j < a.events.size(); ++j) {
    const Event& c = a.events[j];
    if (is_probe(c, events::kOomCaught) && (!c.has("step") || c.integer("step") == e.integer("step"))) return true;
    if (is_probe(c, events::kOom)) break;  // the next OOM: this one was not reported caught
  }
  return false;
}

// Note [OOMs the code saw]: the output line an `observe:` regex with key `oom` read after a refusal of the
// shim and before the refused step (or, the step unknown, any step) completed: a job without a probe that
// caught the OOM and said so. nullptr when there is none: a refusal the allocator absorbed is followed by the
// step, and a message with no refusal before it is no OOM the trace records.
const Event* printed_after_refusal(const Attempt& a) {
  bool pending = false;
  int64_t at = -1;
  for (const Event& e : a.events) {
    if (is_refusal(e)) {
      if (!pending) at = e.integer("step");
      pending = true;
    } else if (pending && completes_a_step(e) && gets_past(at, completed_step(e))) {
      pending = false;
    } else if (pending && printed_oom(e)) {
      return &e;
    }
  }
  return nullptr;
}

double attempt_end_time(const Attempt& a) {
  if (a.end > 0) return a.end;
  return a.events.empty() ? a.start : a.events.back().t;
}

}  // namespace

std::vector<StepPoint> steps_of(const Attempt& attempt) {
  std::vector<StepPoint> probe = probe_steps(attempt);
  std::vector<StepPoint> observed = observed_steps(attempt);
  if (probe.empty()) return observed;
  for (StepPoint& p : probe) {
    for (auto it = observed.rbegin(); it != observed.rend(); ++it) {
      if (it->step != p.step) continue;
      if (p.batch < 0) p.batch = it->batch;
      if (p.allocated < 0) p.allocated = it->allocated;
      if (p.reserved < 0) p.reserved = it->reserved;
      for (const auto& [k, v] : it->metrics) p.metrics.emplace(k, v);
      break;
    }
  }
  return probe;
}

std::vector<OomPoint> ooms_of(const Attempt& attempt) {
  std::vector<StepPoint> steps = steps_of(attempt);
  std::vector<OomPoint> out;
  bool uncaught_probe_oom = false;
  for (size_t i = 0; i < attempt.events.size(); ++i) {
    const Event& e = attempt.events[i];
    if (!is_probe(e, events::kOom)) continue;
    OomPoint o;
    o.attempt = attempt.index;
    o.t = e.t;
    o.from_probe = true;
    o.caught = oom_caught(attempt, i);
    uncaught_probe_oom = uncaught_probe_oom || !o.caught;
    const StepPoint* before = step_before(steps, e.t);
    o.step = e.integer("step", -1);
    if (o.step < 0 && before) o.step = before->step + 1;
    o.batch = e.integer("batch_size", -1);
    o.batch_from = o.batch > 0 ? e.text("batch_from") : std::string();
    if (o.batch <= 0 && before) {
      o.batch = before->batch;
      o.batch_from = before->batch_from;
    }
    if (o.batch <= 0) o.batch = -1;
    o.phase = e.text("phase");
    o.kind = e.text("oom_kind");
    o.exception = e.text("exception");
    o.message = e.text("message");
    if (o.phase == "none") o.phase.clear();
    o.data = batch_data(e);
    out.push_back(std::move(o));
  }
  bool died = attempt.ended_by_oom();
  const Event* caught_line = out.empty() && !died ? printed_after_refusal(attempt) : nullptr;
  if ((died && !uncaught_probe_oom) || caught_line) {
    // No probe told us: the shim's refusal, with the attempt's end or its output saying the code saw it.
    OomPoint o;
    o.attempt = attempt.index;
    o.t = attempt_end_time(attempt);
    for (const Event& e : attempt.events)
      if (printed_oom(e)) { o.t = e.t; break; }
    if (caught_line) o.t = caught_line->t;
    o.caught = !died;
    const StepPoint* before = step_before(steps, o.t);
    o.step = before ? before->step + 1 : -1;
    o.batch = before ? before->batch : -1;
    o.phase = phase_at(attempt, o.t);
    out.push_back(std::move(o));
  }
  std::stable_sort(out.begin(), out.end(), [](const OomPoint& x, const OomPoint& y) { return x.t < y.t; });
  return out;
}

bool OomPoint::as_other_error() const {
  if (!from_probe || kind.empty()) return false;
  const oom::OomKind* k = oom::kind_named(kind);
  return k != nullptr && !k->catchable;
}

std::vector<OomPoint> ooms_of(const Trace& trace) {
  std::vector<OomPoint> out;
  for (const Attempt& a : trace.attempts) {
    auto o = ooms_of(a);
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}

std::vector<const Event*> injections_of(const Attempt& attempt) {
  std::vector<const Event*> out;
  for (const Event& e : attempt.events)
    if (is_refusal(e)) out.push_back(&e);
  return out;
}

size_t injection_count(const Trace& trace) {
  size_t n = 0;
  for (const Attempt& a : trace.attempts) n += injections_of(a).size();
  return n;
}

std::optional<int64_t> highest_step(const std::vector<StepPoint>& steps) {
  std::optional<int64_t> best;
  for (const StepPoint& s : steps)
    if (!best || s.step > *best) best = s.step;
  return best;
}

const StepPoint* step_before(const std::vector<StepPoint>& steps, double t) {
  const StepPoint* found = nullptr;
  for (const StepPoint& s : steps)
    if (s.t <= t) found = &s;
  return found;
}

const StepPoint* step_after(const std::vector<StepPoint>& steps, double t) {
  for (const StepPoint& s : steps)
    if (s.t > t) return &s;
  return nullptr;
}

int64_t held_at(const Attempt& attempt, const StepPoint& step) {
  if (step.allocated >= 0) return step.allocated;
  // The control block is sampled every 50 ms; a sample more than a second away says nothing about this step.
  // Samples are in time order (the runner appends them as it takes them): look only at the window.
  const auto& all = attempt.samples;
  auto it = std::lower_bound(all.begin(), all.end(), step.t - 1.0,
                             [](const MemorySample& s, double t) { return s.t < t; });
  std::map<int, const MemorySample*> nearest;
  for (; it != all.end() && it->t <= step.t + 1.0; ++it) {
    auto& best = nearest[it->device];
    if (!best || std::fabs(it->t - step.t) < std::fabs(best->t - step.t)) best = &*it;
  }
  if (nearest.empty()) return -1;
  uint64_t held = 0;
  for (const auto& [device, s] : nearest) held += s->held;
  return static_cast<int64_t>(held);
}

std::string phase_at(const Attempt& attempt, double t) {
  std::string phase;
  for (const Event& e : attempt.events) {
    if (e.t > t) break;
    if (e.kind != events::kPhase && e.kind != events::kOom && e.kind != events::kInject) continue;
    std::string p = e.text("phase");
    if (!p.empty() && p != "none") phase = p;
  }
  return phase;
}

std::string seconds_text(double seconds) {
  char buf[32];
  if (seconds < 1.0) std::snprintf(buf, sizeof buf, "%.0fms", seconds * 1e3);
  else if (std::fabs(seconds - std::round(seconds)) < 0.05 || seconds >= 10) std::snprintf(buf, sizeof buf, "%.0fs", seconds);
  else std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  return buf;
}

std::string step_text(int64_t step) { return step >= 0 ? "step " + std::to_string(step) : "an unknown step"; }

bool ended_normally(const Attempt& attempt) {
  return attempt.end_kind == AttemptEnd::exited && attempt.exit_code && *attempt.exit_code == 0;
}

namespace {
const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGPIPE: return "SIGPIPE";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
  }
}
}  // namespace

std::string end_text(const Attempt& attempt) {
  switch (attempt.end_kind) {
    case AttemptEnd::exited:
      return attempt.exit_code ? "exited with code " + std::to_string(*attempt.exit_code) : "exited";
    case AttemptEnd::signalled: {
      if (!attempt.signal) return "was killed by a signal";
      return "was killed by signal " + std::to_string(*attempt.signal) + " (" + signal_name(*attempt.signal) + ")";
    }
    case AttemptEnd::timed_out: return "timed out after " + seconds_text(attempt.duration()) + " and was stopped";
    case AttemptEnd::interrupted: return "was interrupted";
    case AttemptEnd::failed_to_start: return "failed to start";
  }
  return "ended";
}

}  // namespace oomh::view

namespace oomh {
std::string attempt_name(int index) { return "attempt " + std::to_string(index + 1); }
std::string attempt_end_text(const Attempt& attempt) { return view::end_text(attempt); }
}  // namespace oomh

namespace oomh::view {
std::string absorbed_reason(size_t injected) {
  return std::to_string(injected) + (injected == 1 ? " fault was" : " faults were") +
         " injected but the code never saw an out-of-memory error: PyTorch's caching allocator retried and "
         "absorbed " + (injected == 1 ? "it" : "them") + "; use a persistent fault (fail: {times: 2} or more) or a cap";
}
PlanSeen plan_seen(const Trace& trace) {
  PlanSeen p;
  auto lower_cap = [&](uint64_t cap) {
    if (cap > 0 && (p.cap == 0 || cap < p.cap)) p.cap = cap;
  };
  for (const Attempt& a : trace.attempts) {
    for (const Event& e : a.events) {
      if (e.src != events::kSrcShim || e.kind != events::kShimStart || e.text("plan") == "rejected") continue;
      p.known = true;
      p.rules = std::max<uint64_t>(p.rules, static_cast<uint64_t>(std::max<int64_t>(0, e.integer("rules", 0))));
      lower_cap(static_cast<uint64_t>(std::max<int64_t>(0, e.integer("cap", 0))));
    }
    for (const MemorySample& s : a.samples) {
      if (s.device == 0) lower_cap(s.cap);
      p.peak = std::max({p.peak, s.peak, s.held});
    }
  }
  return p;
}

std::string cap_never_reached(const PlanSeen& plan) {
  return "the job has no fault rules and never reached its cap of " + format_bytes(plan.cap) +
         (plan.peak > 0 ? " (it held " + format_bytes(plan.peak) + " at most)" : std::string()) +
         ": lower the cap, or add a fault rule";
}

std::vector<RuleSeen> rules_seen(const Trace& trace) {
  // Each figure is within 2^53 (Note [A job's integers] in trace.h): a sum of two cannot overflow, and stays there.
  auto add = [](int64_t sum, int64_t more) { return std::min<int64_t>(sum + std::max<int64_t>(0, more), int64_t{1} << 53); };
  std::vector<RuleSeen> out;
  for (const Attempt& a : trace.attempts)
    for (const Event& e : a.events) {
      if (e.src != events::kSrcShim || e.kind != events::kRuleSeen) continue;
      const std::string rule = e.text("rule");
      auto it = std::find_if(out.begin(), out.end(), [&](const RuleSeen& r) { return r.rule == rule; });
      if (it == out.end()) it = out.insert(out.end(), RuleSeen{rule, e.text("layer", "driver")});
      it->triggers = add(it->triggers, e.integer("triggers", 0));
      it->driver_calls = add(it->driver_calls, e.integer("driver_calls", 0));
      it->requests = add(it->requests, e.integer("requests", 0));
      if (e.text("layer", "driver") != "driver") it->layer = e.text("layer");
    }
  return out;
}

std::string unfired_reason(const Trace& trace) {
  std::optional<int64_t> reached;
  for (const Attempt& a : trace.attempts)
    if (auto h = highest_step(steps_of(a))) reached = std::max(reached.value_or(*h), *h);
  std::string out;
  for (const RuleSeen& r : rules_seen(trace)) {
    if (r.triggers > 0) continue;
    if (!out.empty()) out += "; ";
    out += "rule '" + r.rule + "' ";
    if (r.driver_calls == 0 && r.requests == 0) {
      out += "never met its steps" + (reached ? " (the job's steps went up to " + std::to_string(*reached) + ")"
                                                : std::string(" (no step was reported: does the job run under the probe?)"));
      continue;
    }
    out += "met " + std::to_string(r.driver_calls) + " driver call" + (r.driver_calls == 1 ? "" : "s");
    if (r.layer != "driver") out += " and " + std::to_string(r.requests) + " " + r.layer + " request" + (r.requests == 1 ? "" : "s");
    out += " in its steps and matched none (its phase or size filters, or its nth)";
  }
  if (out.empty()) return out;
  return out + ". A step rule is asked at every request of its step on the virtual device and at the probe's points of "
               "the step on a GPU; without the probe (a C++ program) only at the driver, which a caching allocator may not "
               "call in that step: `oomharness sweep --step N` lists the step's allocations";
}

std::string nothing_happened_reason(const Trace& trace) {
  std::string reason = "no out-of-memory error happened: nothing to recover from";
  const PlanSeen plan = plan_seen(trace);
  if (plan.cap > 0 && plan.rules == 0) reason += "; " + cap_never_reached(plan);
  for (const Attempt& a : trace.attempts) {
    if (!a.oom_message) continue;
    reason += "; " + attempt_name(a.index) + "'s output mentions an out-of-memory error, but neither the shim nor the probe "
              "recorded one, so it " + end_text(a) + " of something else as far as the trace shows";
    break;
  }
  return reason;
}

std::vector<StepPoint> steps_of_rank(const Attempt& attempt, int rank) {
  Attempt one;
  one.index = attempt.index;
  for (const Event& e : attempt.events)
    if (rank_of(e) == rank) one.events.push_back(e);
  return steps_of(one);
}

const LogFold* steps_thinned(const Attempt& attempt) {
  return attempt.thinned && attempt.thinned->steps_dropped > 0 ? &*attempt.thinned : nullptr;
}

bool growth_unjudged(const Attempt& attempt) {
  const LogFold* f = steps_thinned(attempt);
  return f && (f->merged || !f->growth_complete);
}

std::optional<Growth> held_growth(const Attempt& attempt) {
  struct Point { int64_t step; double held, t; };  // the step as steps_of gives it, so Growth takes it uncast
  std::vector<Point> pts;
  for (const auto& s : steps_of(attempt)) {
    int64_t held = held_at(attempt, s);
    if (held >= 0) pts.push_back({s.step, static_cast<double>(held), s.t});
  }
  if (pts.size() >= kGrowthWarmUpSteps) pts.erase(pts.begin(), pts.begin() + kGrowthWarmUpSteps);
  // The thirds' lows, from the steps kept (for a thinned log, a sample of them spread over the run).
  auto fill_thirds = [&](Growth& g) {
    if (pts.size() < 3) return;
    g.thirds = true;
    const size_t n = pts.size();
    for (size_t k = 0; k < 3; ++k) {
      const size_t lo = k * n / 3, hi = (k + 1) * n / 3;
      double low = pts[lo].held;
      for (size_t i = lo; i < hi; ++i) low = std::min(low, pts[i].held);
      g.low[k] = low;
    }
  };
  if (const LogFold* f = steps_thinned(attempt)) {
    if (growth_unjudged(attempt) || f->growth_points + kGrowthWarmUpSteps < kGrowthMinSteps || !f->growth_fit().sloped())
      return std::nullopt;
    const LineFit fit = f->growth_fit();
    Growth g{attempt.index, fit.slope(), f->growth_from, f->growth_to, f->growth_t};
    g.base = fit.at(static_cast<double>(g.from));
    fill_thirds(g);
    return g;
  }
  if (pts.size() + kGrowthWarmUpSteps < kGrowthMinSteps) return std::nullopt;
  LineFit fit;
  for (const Point& p : pts) fit.add(static_cast<double>(p.step), p.held);
  if (!fit.sloped()) return std::nullopt;  // every point at one step number (retries): no trend to fit
  Growth g{attempt.index, fit.slope(), pts.front().step, pts.back().step, pts.back().t};
  g.base = fit.at(static_cast<double>(pts.front().step));
  fill_thirds(g);
  return g;
}

LeakJudgement judge_leak(const Growth& g, const LeakRule& rule) {
  LeakJudgement j;
  j.base = std::max(0.0, g.base);
  j.horizon = std::max(rule.horizon, g.to);
  j.grown = g.slope * (static_cast<double>(j.horizon) - static_cast<double>(g.from));
  if (g.thirds) {
    const double first = g.low[1] - g.low[0], second = g.low[2] - g.low[1];
    j.steady = first >= kLeakGranule && second >= std::max(kLeakGranule, first / 2);
  }
  if (rule.cap > 0 && g.slope > 0 && g.thirds) {
    const double room = static_cast<double>(rule.cap) - g.low[2];
    // In doubles until it is known to fall within the horizon: a slope of a byte in a billion steps is
    // no step an int64 holds.
    const double steps_left = std::ceil(std::max(0.0, room) / g.slope);
    int64_t at = 0;
    if (steps_left < 9223372036854775808.0 && !__builtin_add_overflow(g.to, static_cast<int64_t>(steps_left), &at) &&
        at <= j.horizon)
      j.cap_step = at;
  }
  if (rule.limit) {
    j.leak = g.slope > *rule.limit;
    return j;
  }
  j.leak = j.steady && ((j.grown >= rule.share * j.base && j.grown >= kLeakFloor) || j.cap_step >= 0);
  return j;
}

LeakRule leak_rule(const Trace& trace, std::optional<double> limit, double share, int64_t steps) {
  LeakRule r;
  r.limit = limit;
  r.share = share;
  r.horizon = steps >= 0 ? steps : trace.target_step.value_or(-1);
  r.cap = plan_seen(trace).cap;
  return r;
}

std::vector<const Event*> breakdowns_of(const Attempt& attempt, const std::string& at) {
  std::vector<const Event*> out;
  for (const Event& e : attempt.events)
    if (is_probe(e, events::kMemoryBreakdown) && e.text("at") == at) out.push_back(&e);
  return out;
}

}  // namespace oomh::view

namespace oomh {

std::map<int64_t, uint64_t> held_at_steps(const Attempt& attempt) {
  std::map<int64_t, uint64_t> out;
  for (const auto& s : view::steps_of(attempt)) {
    int64_t held = view::held_at(attempt, s);
    if (held >= 0) out[s.step] = static_cast<uint64_t>(held);  // a retried step: its last figure
  }
  return out;
}

}  // namespace oomh
