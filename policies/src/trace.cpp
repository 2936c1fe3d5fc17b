// The trace model: event readers, the OOM and fault rules of an attempt (Note [An OOM is an event],
// Note [Visible faults]), the event-log line parser and the JSON form of an event. Reading a whole log
// (thinning it) is event_log_reader.cpp's; the views over ranks are trace_ranks.cpp's.

#include "oomharness/policies/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <csignal>
#include <limits>
#include <map>
#include <set>

#include "oomharness/events.h"
#include "oomharness/json_number.h"
#include "trace_view.h"

namespace oomh {

namespace {
const nlohmann::json* field(const nlohmann::json& fields, const char* key) {
  if (!fields.is_object()) return nullptr;
  auto it = fields.find(key);
  if (it == fields.end() || it->is_null()) return nullptr;
  return &*it;
}
}  // namespace

int64_t job_integer(double d, int64_t nan) {
  if (std::isnan(d)) return nan;
  if (d >= static_cast<double>(kJobIntegerLimit)) return kJobIntegerLimit;  // 2^53 is exactly a double
  if (d <= -static_cast<double>(kJobIntegerLimit)) return -kJobIntegerLimit;
  return static_cast<int64_t>(d);
}

int64_t job_integer(const nlohmann::json& v, int64_t fallback) {
  // Clamped to the limit whatever the JSON type (a 1e30, a 2^64-1); a NaN or a non-number is `fallback`.
  if (v.is_number_unsigned()) return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), kJobIntegerLimit));
  if (v.is_number_integer()) return std::clamp<int64_t>(v.get<int64_t>(), -kJobIntegerLimit, kJobIntegerLimit);
  if (v.is_number_float()) return job_integer(v.get<double>(), fallback);
  return fallback;
}

int64_t Event::integer(const char* key, int64_t fallback) const {
  const nlohmann::json* v = field(fields, key);
  return v ? job_integer(*v, fallback) : fallback;
}

double Event::number(const char* key, double fallback) const {
  const nlohmann::json* v = field(fields, key);
  if (!v || !v->is_number()) return fallback;
  return v->get<double>();
}

std::string Event::text(const char* key, const std::string& fallback) const {
  const nlohmann::json* v = field(fields, key);
  if (!v || !v->is_string()) return fallback;
  return v->get<std::string>();
}

bool Event::flag(const char* key, bool fallback) const {
  const nlohmann::json* v = field(fields, key);
  if (!v || !v->is_boolean()) return fallback;
  return v->get<bool>();
}

// Note [An OOM is an event]
// A check that needs an OOM to have happened rests on a record of it, never on a line of output: the probe's
// `oom` event (PyTorch's OOM observer, or an out-of-memory exception passing the probe), or the shim's
// refusal of an allocation (`inject`, by a rule or by the cap). The runner's output detector
// (Attempt::oom_message) only supports a record: a job that dies printing "CUDA out of memory" after a
// refusal it never got past (no step completed after it) died of that refusal; one that printed it with no
// refusal and no probe `oom` died of something else as far as the trace can tell (an unrelated error whose
// text mentions memory, a cap that was never reached). A real OOM beside a reservation (the sidecar's)
// fails in the driver without a refusal: the probe records it, output alone does not.
//
// An OOM "ended" an attempt when the process failed (non-zero exit, or SIGABRT: an uncaught C++
// c10::OutOfMemoryError aborts) and the trace records why: a probe `oom` event the code did not catch, or
// an unresolved refusal together with the runner's OOM message.
bool Attempt::ended_by_oom() const {
  bool failed = (end_kind == AttemptEnd::exited && exit_code && *exit_code != 0) ||
                (end_kind == AttemptEnd::signalled && signal && *signal == SIGABRT);
  if (!failed) return false;
  // A probe may report the catch as a separate `oom_caught` event after the `oom`: one backward pass
  // remembers the catches seen so far (after the current event), so that an attempt with 10^5 OOMs costs
  // 10^5 steps, not 10^10.
  bool caught_any_step = false;      // a later `oom_caught` without a step catches every `oom`
  std::set<int64_t> caught_steps;    // the steps of later `oom_caught` events
  for (size_t i = events.size(); i-- > 0;) {
    const Event& e = events[i];
    if (e.kind == events::kOomCaught) {
      if (!e.has("step")) caught_any_step = true;
      else caught_steps.insert(e.integer("step"));
      continue;
    }
    if (e.src != events::kSrcProbe || e.kind != events::kOom || e.flag("caught", false)) continue;
    if (!caught_any_step && !caught_steps.count(e.integer("step"))) return true;
  }
  return oom_message && unresolved_refusal() != nullptr;
}

// Note [Visible faults]
// An injected failure is *visible* when the training code saw an out-of-memory error because of it, and
// *absorbed* when the framework got past it unseen (PyTorch's caching allocator frees its cache and
// retries once; docs/design/DESIGN.md). The trace does not link an OOM to the allocation that caused it, so the rule
// is about order, within one attempt: an `inject` event is visible when, after it and before the next
// completed step, the probe reported an `oom` (or `oom_caught`), or the job printed one (an `observe:` key
// `oom`, a job without a probe), or the attempt ended by an OOM
// (Attempt::ended_by_oom, Note [An OOM is an event]) with no completed step in between. A completed step first means the code went on without seeing it: absorbed. Only a step at or
// after the one in progress at the injection counts: the line `step 4` that the runner reads from the
// job's output (an `observed` event) may be timed a millisecond after step 5's injections, and it says
// nothing about them (seen on the H100: a halving trainer's OOM judged absorbed, a false red). Several
// injects before one OOM (a `times: 4` fault) are all visible: together they made the error the code saw.
// The reports (which fault was visible) and the oom_visible check read this one rule.
bool completes_a_step(const Event& e) {
  if (e.src == events::kSrcProbe && e.kind == events::kStep) return true;
  return e.src == events::kSrcRunner && e.kind == events::kObserved && e.text("key") == "step";
}

int64_t completed_step(const Event& e) {
  if (!completes_a_step(e)) return -1;
  if (e.kind == events::kObserved) {
    if (e.has("value") && e.fields["value"].is_string()) {
      try { return std::stoll(e.text("value")); } catch (...) { return -1; }
    }
    return e.integer("value");
  }
  return e.integer("step");
}

bool printed_oom(const Event& e) {
  return e.src == events::kSrcRunner && e.kind == events::kObserved && e.text("key") == "oom";
}

bool is_refusal(const Event& e) { return e.src == events::kSrcShim && e.kind == events::kInject; }

bool gets_past(int64_t refused, int64_t completed) { return refused < 0 || completed >= refused; }

int64_t Attempt::last_completed_step() const {
  int64_t last = -1;
  for (const Event& e : events) last = std::max(last, completed_step(e));
  return last;
}

// The rule of Note [Visible faults] looks forward from each `inject` to the first OOM, and to the first
// step completed at or after the inject's step. Read backwards, that is one pass: the nearest OOM after
// the current event is one position, and the completed steps after it are kept on a stack whose step
// numbers grow from its top (an earlier step event with a larger or equal number hides every later one
// with a smaller or equal number, for any inject before both), so that the first step at or after S is a
// binary search. About n log n, so 10^5 injections cost milliseconds (scanning forward from each took 61 s).
std::vector<InjectedFault> Attempt::injected_faults() const {
  auto is_probe = [](const Event& e, const char* kind) { return e.src == events::kSrcProbe && e.kind == kind; };
  // A job without a probe that caught the OOM and printed it (printed_oom): Note [OOMs the code saw] in
  // trace_view.h counts that line after a refusal, so the refusal was visible.
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<InjectedFault> out;
  size_t next_oom = kNone;
  std::vector<std::pair<int64_t, size_t>> steps;  // (step, position); the back is the earliest
  const bool died_of_oom = ended_by_oom();
  for (size_t i = events.size(); i-- > 0;) {
    const Event& e = events[i];
    if (is_refusal(e)) {
      const int64_t at = e.integer("step");  // the step in progress; -1: unknown, any step counts
      // The earliest step event after i that gets past it (gets_past: its number is >= at, or any when at
      // is unknown): numbers grow from the back to the front.
      size_t step_pos = kNone;
      if (!steps.empty()) {
        if (at < 0) {
          step_pos = steps.back().second;
        } else {
          auto it = std::lower_bound(steps.rbegin(), steps.rend(), at,
                                     [](const std::pair<int64_t, size_t>& s, int64_t v) { return s.first < v; });
          if (it != steps.rend()) step_pos = it->second;
        }
      }
      bool visible;
      if (next_oom != kNone && (step_pos == kNone || next_oom < step_pos)) visible = true;
      else if (step_pos != kNone) visible = false;
      else visible = died_of_oom;
      out.push_back(InjectedFault{&e, visible});
    } else if (is_probe(e, events::kOom) || is_probe(e, events::kOomCaught) || printed_oom(e)) {
      next_oom = i;
    } else if (completes_a_step(e)) {
      const int64_t n = completed_step(e);
      while (!steps.empty() && steps.back().first <= n) steps.pop_back();
      steps.emplace_back(n, i);
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Note [An OOM is an event]. One backward pass: the highest step completed after the current event decides
// whether an `inject` was got past (a step at or after the refused one; any step when the shim did not know it).
const Event* Attempt::unresolved_refusal() const {
  bool any_step_after = false;
  int64_t highest_after = -1;
  for (size_t i = events.size(); i-- > 0;) {
    const Event& e = events[i];
    if (completes_a_step(e)) {
      any_step_after = true;
      highest_after = std::max(highest_after, completed_step(e));
      continue;
    }
    if (!is_refusal(e)) continue;
    if (!any_step_after || !gets_past(e.integer("step"), highest_after)) return &e;
  }
  return nullptr;
}

std::vector<std::pair<int, const Event*>> Trace::all_events() const {
  std::vector<std::pair<int, const Event*>> out;
  for (const Attempt& a : attempts)
    for (const Event& e : a.events) out.emplace_back(a.index, &e);
  return out;
}

bool nests_deeper_than(std::string_view json, size_t depth) {
  size_t level = 0;
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') {
      if (++level > depth) return true;
    } else if ((c == '}' || c == ']') && level > 0) --level;
  }
  return false;
}

std::optional<Event> parse_event_line(const std::string& line) {
  if (nests_deeper_than(line, kMaxEventDepth)) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto t = j.find("t");
  auto kind = j.find("kind");
  if (t == j.end() || !t->is_number() || kind == j.end() || !kind->is_string() || kind->get<std::string>().empty())
    return std::nullopt;
  auto src = j.find("src");
  if (src != j.end() && !src->is_string()) return std::nullopt;
  auto pid = j.find("pid");
  if (pid != j.end() && !(pid->is_number_integer() && whole_number<int>(*pid))) return std::nullopt;
  auto fields = j.find("fields");
  if (fields != j.end() && !fields->is_object()) return std::nullopt;
  Event e;
  from_json(j, e);
  return e;
}

void to_json(nlohmann::json& j, const Event& e) {
  j = nlohmann::json{{"t", e.t}, {"pid", e.pid}, {"src", e.src}, {"kind", e.kind},
                     {"fields", e.fields.is_object() ? e.fields : nlohmann::json::object()}};
}

void from_json(const nlohmann::json& j, Event& e) {
  e.t = j.at("t").get<double>();
  e.kind = j.at("kind").get<std::string>();
  e.pid = whole_member(j, "pid", 0);
  e.src = j.contains("src") ? j.at("src").get<std::string>() : std::string();
  e.fields = j.contains("fields") && j.at("fields").is_object() ? j.at("fields") : nlohmann::json::object();
}

}  // namespace oomh
