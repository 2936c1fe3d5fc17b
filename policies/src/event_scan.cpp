// Note [Fast event lines] in event_scan.h.

#include "event_scan.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "oomharness/events.h"

namespace oomh {

using Facts = EventLogReader::Facts;

namespace {

Facts::Kind routine_kind(std::string_view src, std::string_view kind) {
  if (src != events::kSrcProbe) return Facts::Kind::other;
  if (kind == events::kStep) return Facts::Kind::step;
  if (kind == events::kPhase) return Facts::Kind::phase;
  if (kind == events::kSamples) return Facts::Kind::samples;
  if (kind == events::kMemory) return Facts::Kind::memory;
  return Facts::Kind::other;
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

}  // namespace

Facts facts_of(const Event& e) {
  Facts f;
  f.kind = routine_kind(e.src, e.kind);
  f.inject = is_refusal(e);
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

}  // namespace oomh
