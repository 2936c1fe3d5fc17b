// The trace model: event readers, the event-log line parser and the JSON form of an event.

#include "oomharness/policies/trace.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <limits>
#include <map>
#include <set>

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
  // A job writes what it likes: a number past int64's range is clamped to it (casting 1e30 or a
  // 2^64-1 to int64 is undefined or wraps), and a NaN is no number.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  if (v->is_number_unsigned()) {  // before is_number_integer, which is true of unsigned numbers too
    const uint64_t u = v->get<uint64_t>();
    return u > static_cast<uint64_t>(kMax) ? kMax : static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isnan(d)) return fallback;
    if (d >= 9223372036854775808.0) return kMax;  // 2^63: the first double past kMax
    if (d < -9223372036854775808.0) return kMin;
    return static_cast<int64_t>(d);
  }
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
  return false;
}

// Note [Visible faults]
// An injected failure is *visible* when the training code saw an out-of-memory error because of it, and
// *absorbed* when the framework got past it unseen (PyTorch's caching allocator frees its cache and
// retries once; DESIGN.md). The trace does not link an OOM to the allocation that caused it, so the rule
// is about order, within one attempt: an `inject` event is visible when, after it and before the next
// completed step, the probe reported an `oom` (or `oom_caught`), or the attempt ended by an OOM
// (Attempt::ended_by_oom: exit with an OOM message or an uncaught probe `oom`) with no completed step in
// between. A completed step first means the code went on without seeing it: absorbed. Only a step at or
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
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<InjectedFault> out;
  size_t next_oom = kNone;
  std::vector<std::pair<int64_t, size_t>> steps;  // (step, position); the back is the earliest
  const bool died_of_oom = ended_by_oom();
  for (size_t i = events.size(); i-- > 0;) {
    const Event& e = events[i];
    if (e.src == events::kSrcShim && e.kind == events::kInject) {
      const int64_t at = e.integer("step");  // the step in progress; -1: unknown, any step counts
      // The earliest step event after i whose number is >= at: numbers grow from the back to the front.
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
    } else if (is_probe(e, events::kOom) || is_probe(e, events::kOomCaught)) {
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
}

void EventLogReader::take() {
  if (line_.empty()) return;
  if (nests_deeper_than(line_, limits_.max_depth)) {
    ++deep_;
  } else if (auto e = parse_event_line(line_)) {
    last_t_ = std::max(last_t_, e->t);
    if (e->src == events::kSrcShim && e->kind == events::kInject && ++injects_ > limits_.max_injects) ++injects_dropped_;
    else events_.push_back(std::move(*e));
  } else {
    ++bad_;
  }
  line_.clear();
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
  return out;
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

namespace oomh {

// Note [Ranks] in trace.h.
int rank_of(const Event& e) {
  if (!e.fields.is_object()) return -1;
  auto it = e.fields.find("rank");
  return it != e.fields.end() && it->is_number_integer() ? static_cast<int>(it->get<int64_t>()) : -1;
}

Attempt merge_ranks(std::vector<Attempt> ranks) {
  if (ranks.empty()) return {};
  auto failed = [](const Attempt& a) {
    return a.end_kind == AttemptEnd::failed_to_start || a.end_kind == AttemptEnd::signalled ||
           (a.end_kind == AttemptEnd::exited && a.exit_code && *a.exit_code != 0);
  };
  auto earliest = [&](auto pred) -> std::optional<size_t> {
    std::optional<size_t> best;
    for (size_t k = 0; k < ranks.size(); ++k)
      if (pred(ranks[k]) && (!best || ranks[k].end < ranks[*best].end)) best = k;
    return best;
  };
  std::optional<size_t> deciding = earliest([](const Attempt& a) { return a.end_kind == AttemptEnd::interrupted; });
  if (!deciding) deciding = earliest(failed);
  if (!deciding) deciding = earliest([](const Attempt& a) { return a.end_kind == AttemptEnd::timed_out; });
  size_t d = deciding.value_or(0);

  Attempt out;
  const Attempt& dec = ranks[d];
  out.index = dec.index;
  out.end_kind = dec.end_kind;
  out.exit_code = dec.exit_code;
  out.signal = dec.signal;
  out.oom_message = dec.oom_message;
  out.faults_enabled = dec.faults_enabled;
  out.log_path = dec.log_path;
  out.start = ranks[0].start;
  out.end = ranks[0].end;
  // The deciding rank's output first: it is the one a reader needs.
  out.output_tail = "[rank " + std::to_string(d) + "]\n" + dec.output_tail;
  for (size_t k = 0; k < ranks.size(); ++k) {
    Attempt& a = ranks[k];
    out.start = std::min(out.start, a.start);
    out.end = std::max(out.end, a.end);
    RankEnd re;
    re.rank = static_cast<int>(k);
    re.start = a.start;
    re.end = a.end;
    re.end_kind = a.end_kind;
    re.exit_code = a.exit_code;
    re.signal = a.signal;
    re.ended_by_oom = a.ended_by_oom();
    re.last_step = a.last_completed_step();
    re.log_path = a.log_path;
    out.ranks.push_back(std::move(re));
    if (k != d && !a.output_tail.empty()) out.output_tail += "[rank " + std::to_string(k) + "]\n" + a.output_tail;
    if (a.shim) {
      if (!out.shim) out.shim = ShimRecord{};
      out.shim->processes += a.shim->processes;
      out.shim->armed += a.shim->armed;
      out.shim->rejected += a.shim->rejected;
      out.shim->ways_in |= a.shim->ways_in;
      out.shim->driver_called = out.shim->driver_called || a.shim->driver_called;
      out.shim->allocations += a.shim->allocations;
    }
    for (Event& e : a.events) {
      if (e.fields.is_object() && !e.fields.contains("rank")) e.fields["rank"] = static_cast<int>(k);
      out.events.push_back(std::move(e));
    }
    out.samples.insert(out.samples.end(), a.samples.begin(), a.samples.end());
  }
  std::stable_sort(out.events.begin(), out.events.end(), [](const Event& x, const Event& y) { return x.t < y.t; });
  std::stable_sort(out.samples.begin(), out.samples.end(), [](const MemorySample& x, const MemorySample& y) { return x.t < y.t; });
  return out;
}

bool split_ranks_from_events(Attempt& a) {
  if (!a.ranks.empty()) return false;
  std::map<int, int> rank_of_pid;
  std::set<int> seen;
  for (const Event& e : a.events)
    if (e.src == events::kSrcProbe)
      if (int r = rank_of(e); r >= 0) {
        rank_of_pid[e.pid] = r;
        seen.insert(r);
      }
  if (seen.size() < 2) return false;
  for (Event& e : a.events) {
    if (e.src == events::kSrcRunner || rank_of(e) >= 0 || !e.fields.is_object()) continue;
    if (auto it = rank_of_pid.find(e.pid); it != rank_of_pid.end()) e.fields["rank"] = it->second;
  }
  for (int k = 0; k <= *seen.rbegin(); ++k) {
    // The rank's view: the launcher's end, the rank's own events (its OOM message, if any, is in the
    // shared output, which cannot say whose it was).
    Attempt own;
    own.end_kind = a.end_kind;
    own.exit_code = a.exit_code;
    own.signal = a.signal;
    for (const Event& e : a.events)
      if (rank_of(e) == k) own.events.push_back(e);
    RankEnd re;
    re.rank = k;
    re.start = a.start;
    re.end = a.end;
    re.end_kind = a.end_kind;
    re.exit_code = a.exit_code;
    re.signal = a.signal;
    re.ended_by_oom = own.ended_by_oom();
    re.last_step = own.last_completed_step();
    re.log_path = a.log_path;
    a.ranks.push_back(std::move(re));
  }
  return true;
}

int64_t steps_all_ranks_completed(const Attempt& a) {
  if (a.ranks.empty()) return a.last_completed_step();
  int64_t low = a.ranks.front().last_step;
  for (const RankEnd& r : a.ranks) low = std::min(low, r.last_step);
  return low;
}

// A faulthandler dump: blocks that start "Thread 0x... (most recent call first):" or "Current thread 0x...",
// then lines `  File "path", line N in function`, innermost first.
std::string innermost_frame(const std::string& stacks) {
  // The main thread is the one a hang is about: CPython lists threads newest first, so it is the last
  // block (the signal may land on any thread, so "Current thread" need not be it).
  size_t block = stacks.rfind("hread 0x");
  if (block == std::string::npos) block = 0;
  size_t at = stacks.find("File \"", block);
  if (at == std::string::npos) return {};
  size_t path_end = stacks.find('"', at + 6);
  size_t eol = stacks.find('\n', at);
  if (path_end == std::string::npos || (eol != std::string::npos && path_end > eol)) return {};
  std::string path = stacks.substr(at + 6, path_end - at - 6);
  std::string rest = stacks.substr(path_end + 1, (eol == std::string::npos ? stacks.size() : eol) - path_end - 1);
  std::string line, function;
  size_t ln = rest.find("line ");
  size_t in = rest.find(" in ");
  if (ln != std::string::npos) line = rest.substr(ln + 5, (in == std::string::npos ? rest.size() : in) - ln - 5);
  if (in != std::string::npos) function = rest.substr(in + 4);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  size_t slash = path.rfind('/');
  std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  return (function.empty() ? std::string("?") : function) + " (" + file + (line.empty() ? "" : ":" + line) + ")";
}

}  // namespace oomh
