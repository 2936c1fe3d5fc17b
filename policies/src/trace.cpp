// The trace model: event readers, the event-log line parser and the JSON form of an event.

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
// retries once; DESIGN.md). The trace does not link an OOM to the allocation that caused it, so the rule
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
    if (e.src != events::kSrcShim || e.kind != events::kInject) continue;
    const int64_t at = e.integer("step");
    const bool got_past = at < 0 ? any_step_after : highest_after >= at;
    if (!got_past) return &e;
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
//
// Note [Fast event lines]
// The lines a probe or the shim writes (include/oomharness/events.h) have one shape: "t", "pid", "src",
// "kind" and a flat "fields" object of numbers, plain strings, booleans and nulls, in that order, with or
// without blanks between the tokens. scan_line reads that shape without building JSON, enough to fold a routine line and decide its fate; any other line (escapes,
// nesting, non-ASCII text, other key orders, a float where a count is expected) goes to the JSON parser,
// and a kept line is parsed by it when kept. scan_line accepts only what the parser accepts, and reads the
// figures as Event's readers would.
struct EventLogReader::Facts {
  enum class Kind { other, step, phase, samples, memory };
  Kind kind = Kind::other;  // routine kinds (src "probe")
  bool inject = false;
  double t = 0;
  int pid = 0;
  bool has_step = false;
  int64_t step = -1, batch = -1, allocated = -1, reserved = -1, count = 0;
  int grads = -1;  // -1: not said, 0: not cleared, 1: said (cleared, or not a boolean)
};

namespace {

using Facts = EventLogReader::Facts;

Facts::Kind routine_kind(std::string_view src, std::string_view kind) {
  if (src != events::kSrcProbe) return Facts::Kind::other;
  if (kind == events::kStep) return Facts::Kind::step;
  if (kind == events::kPhase) return Facts::Kind::phase;
  if (kind == events::kSamples) return Facts::Kind::samples;
  if (kind == events::kMemory) return Facts::Kind::memory;
  return Facts::Kind::other;
}

Facts facts_of(const Event& e) {
  Facts f;
  f.kind = routine_kind(e.src, e.kind);
  f.inject = e.src == events::kSrcShim && e.kind == events::kInject;
  f.t = e.t;
  f.pid = e.pid;
  f.has_step = e.has("step");
  f.step = e.integer("step");
  f.batch = e.integer("batch_size", -1);
  f.allocated = e.integer("allocated", -1);
  f.reserved = e.integer("reserved", -1);
  f.count = e.integer("count", 0);
  f.grads = e.has("grads_cleared") ? (e.flag("grads_cleared", true) ? 1 : 0) : -1;
  return f;
}

struct Scanner {
  const char* p;
  const char* end;
  bool lit(std::string_view w) {
    if (static_cast<size_t>(end - p) < w.size() || std::memcmp(p, w.data(), w.size()) != 0) return false;
    p += w.size();
    return true;
  }
  // A string without escapes, control characters or non-ASCII bytes.
  bool str(std::string_view& out) {
    if (p >= end || *p != '"') return false;
    const char* b = ++p;
    for (; p < end; ++p) {
      const unsigned char c = static_cast<unsigned char>(*p);
      if (c == '"') {
        out = std::string_view(b, static_cast<size_t>(p - b));
        ++p;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
    }
    return false;
  }
  static bool digit(char c) { return c >= '0' && c <= '9'; }
  // A JSON number: `integer` when it is an integer literal within int64 (else the parser decides).
  bool num(double& d, bool& integer, int64_t& i) {
    const char* b = p;
    if (p < end && *p == '-') ++p;
    if (p >= end) return false;
    if (*p == '0') ++p;
    else if (*p >= '1' && *p <= '9') while (p < end && digit(*p)) ++p;
    else return false;
    integer = true;
    if (p < end && *p == '.') {
      ++p;
      if (p >= end || !digit(*p)) return false;
      while (p < end && digit(*p)) ++p;
      integer = false;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
      ++p;
      if (p < end && (*p == '+' || *p == '-')) ++p;
      if (p >= end || !digit(*p)) return false;
      while (p < end && digit(*p)) ++p;
      integer = false;
    }
    if (integer) {
      auto r = std::from_chars(b, p, i);
      if (r.ec != std::errc() || r.ptr != p) return false;
      d = static_cast<double>(i);
    } else {
      auto r = std::from_chars(b, p, d);
      if (r.ec != std::errc() || r.ptr != p || !std::isfinite(d)) return false;
    }
    return true;
  }
};

// Note [Fast event lines]: false sends the line to the JSON parser.
bool scan_line(std::string_view line, Facts& f) {
  Scanner s{line.data(), line.data() + line.size()};
  double d;
  bool integer;
  int64_t i;
  std::string_view src, kind;
  // JSON's blanks may stand between any two tokens (a writer with json.dumps' default separators).
  auto ws = [&] {
    while (s.p < s.end && (*s.p == ' ' || *s.p == '\t' || *s.p == '\r')) ++s.p;
  };
  auto tok = [&](char c) {
    ws();
    if (s.p >= s.end || *s.p != c) return false;
    ++s.p;
    return true;
  };
  auto key = [&](std::string_view k) {
    std::string_view got;
    ws();
    return s.str(got) && got == k && tok(':');
  };
  auto number = [&](double& out) {
    ws();
    return s.num(out, integer, i);
  };
  auto text = [&](std::string_view& out) {
    ws();
    return s.str(out);
  };
  if (!tok('{') || !key("t") || !number(f.t)) return false;
  if (!tok(',') || !key("pid") || !number(d) || !integer) return false;
  f.pid = static_cast<int>(i);
  if (!tok(',') || !key("src") || !text(src) || !tok(',') || !key("kind") || !text(kind) || kind.empty()) return false;
  f.kind = routine_kind(src, kind);
  f.inject = src == events::kSrcShim && kind == events::kInject;
  unsigned seen = 0;
  if (tok(',')) {
    if (!key("fields") || !tok('{')) return false;
    if (!tok('}')) {
      for (;;) {
        std::string_view name;
        if (!text(name) || !tok(':')) return false;
        int64_t* target = nullptr;
        unsigned bit = 0;
        if (name == "step") target = &f.step, bit = 1;
        else if (name == "batch_size") target = &f.batch, bit = 2;
        else if (name == "allocated") target = &f.allocated, bit = 4;
        else if (name == "reserved") target = &f.reserved, bit = 8;
        else if (name == "count") target = &f.count, bit = 16;
        else if (name == "grads_cleared") bit = 32;
        if (bit) {
          if (seen & bit) return false;  // a key twice: the parser's rule decides
          seen |= bit;
        }
        ws();
        if (s.p >= s.end) return false;
        const char c = *s.p;
        if (c == '"') {
          std::string_view v;
          if (!s.str(v) || target) return false;
          if (bit == 32) f.grads = 1;
        } else if (s.lit("null")) {
          // absent, as Event::has says
        } else if (s.lit("true") || s.lit("false")) {
          if (target) return false;
          if (bit == 32) f.grads = s.p[-1] == 'e' && s.p[-2] == 's' ? 0 : 1;
        } else {
          if (!s.num(d, integer, i)) return false;
          if (target) {
            if (!integer) return false;
            *target = i;
            if (bit == 1) f.has_step = true;
          }
          if (bit == 32) f.grads = 1;
        }
        if (tok(',')) continue;
        if (tok('}')) break;
        return false;
      }
    }
  }
  if (!tok('}')) return false;
  ws();
  return s.p == s.end;
}

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
  // Note [Measuring a leak] (checks_memory.cpp), with Welford's running sums instead of two passes.
  if (f.allocated < 0) {
    fold_.growth_complete = false;
  } else if (++growth_seen_ > view::kGrowthWarmUpSteps) {
    const double x = static_cast<double>(f.step), y = static_cast<double>(f.allocated);
    const double n = static_cast<double>(++fold_.growth_points);
    const double dx = x - fold_.growth_mx;
    fold_.growth_mx += dx / n;
    fold_.growth_my += (y - fold_.growth_my) / n;
    fold_.growth_sxx += dx * (x - fold_.growth_mx);
    fold_.growth_sxy += dx * (y - fold_.growth_my);
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

namespace {

// How rank `rank` ended: its process's times and end from `process`, its OOM and last step from `own` (its
// events; the same attempt when the rank had a process and log of its own).
RankEnd rank_end(int rank, const Attempt& process, const Attempt& own) {
  RankEnd re;
  re.rank = rank;
  re.start = process.start;
  re.end = process.end;
  re.end_kind = process.end_kind;
  re.exit_code = process.exit_code;
  re.signal = process.signal;
  re.ended_by_oom = own.ended_by_oom();
  re.last_step = own.last_completed_step();
  re.log_path = process.log_path;
  return re;
}

}  // namespace

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
  std::pair<uint64_t, uint64_t> unthinned_grads;  // gradient answers of the ranks whose logs were not thinned
  // The deciding rank's output first: it is the one a reader needs.
  out.output_tail = "[rank " + std::to_string(d) + "]\n" + dec.output_tail;
  for (size_t k = 0; k < ranks.size(); ++k) {
    Attempt& a = ranks[k];
    out.start = std::min(out.start, a.start);
    out.end = std::max(out.end, a.end);
    out.ranks.push_back(rank_end(static_cast<int>(k), a, a));
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
    if (!a.thinned) {
      for (const Event& e : a.events) {
        if (e.src != events::kSrcProbe || e.kind != events::kStep || !e.has("grads_cleared")) continue;
        ++unthinned_grads.first;
        if (!e.flag("grads_cleared", true)) ++unthinned_grads.second;
      }
    }
    for (Event& e : a.events) {
      if (e.fields.is_object() && !e.fields.contains("rank")) e.fields["rank"] = static_cast<int>(k);
      out.events.push_back(std::move(e));
    }
    out.samples.insert(out.samples.end(), a.samples.begin(), a.samples.end());
    if (a.thinned) {
      // Note [Thinned event logs] in trace.cpp: counts add up; a fit or a gap of one rank's log is not the
      // merged attempt's, so the checks that need those say they could not judge.
      if (!out.thinned) out.thinned = LogFold{};
      LogFold& f = *out.thinned;
      f.routine += a.thinned->routine;
      f.routine_dropped += a.thinned->routine_dropped;
      f.steps += a.thinned->steps;
      f.steps_dropped += a.thinned->steps_dropped;
      f.grads_asked += a.thinned->grads_asked;
      f.grads_uncleared += a.thinned->grads_uncleared;
      f.windows_missed += a.thinned->windows_missed;
      f.merged = true;
    }
  }
  if (out.thinned) {
    out.thinned->grads_asked += unthinned_grads.first;
    out.thinned->grads_uncleared += unthinned_grads.second;
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
    a.ranks.push_back(rank_end(k, a, own));
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
