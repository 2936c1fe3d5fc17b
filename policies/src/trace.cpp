// The trace model: event readers, the event-log line parser and the JSON form of an event.

#include "oomharness/policies/trace.h"

#include <algorithm>
#include <csignal>

#include "oomharness/events.h"

namespace oomh {

namespace {
const nlohmann::json* field(const nlohmann::json& fields, const char* key) {
  if (!fields.is_object()) return nullptr;
  auto it = fields.find(key);
  if (it == fields.end() || it->is_null()) return nullptr;
  return &*it;
}
}  // namespace

int64_t Event::integer(const char* key, int64_t fallback) const {
  const nlohmann::json* v = field(fields, key);
  if (!v) return fallback;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_unsigned()) return static_cast<int64_t>(v->get<uint64_t>());
  if (v->is_number_float()) return static_cast<int64_t>(v->get<double>());
  return fallback;
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

// An OOM "ended" an attempt when the process failed (non-zero exit, or SIGABRT: an uncaught C++
// c10::OutOfMemoryError aborts) and something says the failure was an out-of-memory error: its output
// (the runner's detector) or a probe `oom` event the code did not catch.
bool Attempt::ended_by_oom() const {
  bool failed = (end_kind == AttemptEnd::exited && exit_code && *exit_code != 0) ||
                (end_kind == AttemptEnd::signalled && signal && *signal == SIGABRT);
  if (!failed) return false;
  if (oom_message) return true;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.src != events::kSrcProbe || e.kind != events::kOom || e.flag("caught", false)) continue;
    // A probe may report the catch as a separate `oom_caught` event after the `oom`.
    bool caught_later = false;
    for (size_t j = i + 1; j < events.size() && !caught_later; ++j)
      caught_later = events[j].kind == events::kOomCaught &&
                     (!events[j].has("step") || events[j].integer("step") == e.integer("step"));
    if (!caught_later) return true;
  }
  return false;
}

// Note [Visible faults]
// An injected failure is *visible* when the training code saw an out-of-memory error because of it, and
// *absorbed* when the framework got past it unseen (PyTorch's caching allocator frees its cache and
// retries once; DESIGN.md). The trace does not link an OOM to the allocation that caused it, so the rule
// is about order, within one attempt: an `inject` event is visible when, after it and before the next
// completed step, the probe reported an `oom` (or `oom_caught`), or the attempt ended by an OOM
// (Attempt::ended_by_oom: exit with an OOM message or an uncaught probe `oom`) with no completed step in
// between. A completed step first means the code went on without seeing it: absorbed. Several injects
// before one OOM (a `times: 4` fault) are all visible: together they made the error the code saw. The
// reports (which fault was visible) and the oom_visible check read this one rule.
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

int64_t Attempt::last_completed_step() const {
  int64_t last = -1;
  for (const Event& e : events) last = std::max(last, completed_step(e));
  return last;
}

std::vector<InjectedFault> Attempt::injected_faults() const {
  auto is_probe = [](const Event& e, const char* kind) { return e.src == events::kSrcProbe && e.kind == kind; };
  std::vector<InjectedFault> out;
  const bool died_of_oom = ended_by_oom();
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].src != events::kSrcShim || events[i].kind != events::kInject) continue;
    InjectedFault f{&events[i], died_of_oom};
    for (size_t j = i + 1; j < events.size(); ++j) {
      if (is_probe(events[j], events::kOom) || is_probe(events[j], events::kOomCaught)) { f.visible = true; break; }
      if (completes_a_step(events[j])) { f.visible = false; break; }
    }
    out.push_back(f);
  }
  return out;
}

std::vector<std::pair<int, const Event*>> Trace::all_events() const {
  std::vector<std::pair<int, const Event*>> out;
  for (const Attempt& a : attempts)
    for (const Event& e : a.events) out.emplace_back(a.index, &e);
  return out;
}

std::optional<Event> parse_event_line(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto t = j.find("t");
  auto kind = j.find("kind");
  if (t == j.end() || !t->is_number() || kind == j.end() || !kind->is_string() || kind->get<std::string>().empty())
    return std::nullopt;
  auto src = j.find("src");
  if (src != j.end() && !src->is_string()) return std::nullopt;
  auto pid = j.find("pid");
  if (pid != j.end() && !pid->is_number_integer()) return std::nullopt;
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
  e.pid = j.contains("pid") ? j.at("pid").get<int>() : 0;
  e.src = j.contains("src") ? j.at("src").get<std::string>() : std::string();
  e.fields = j.contains("fields") && j.at("fields").is_object() ? j.at("fields") : nlohmann::json::object();
}

}  // namespace oomh
