#include "text.h"

#include "oomharness/reports/terminal_text.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace oomh::text {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 character at s[i], or 0 when the bytes there are not one.
size_t utf8_char(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF) return 0;  // overlong, too large
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;                                        // surrogates
  if (cp == 0xFFFE || cp == 0xFFFF) return 0;                                        // not characters in XML
  return n;
}

// Skips a terminal escape sequence starting at s[i] == ESC; returns the index after it.
size_t skip_escape(std::string_view s, size_t i) {
  ++i;
  if (i >= s.size()) return i;
  if (s[i] == '[') {  // CSI: parameters, then one final byte in @..~
    for (++i; i < s.size(); ++i) {
      if (s[i] >= '@' && s[i] <= '~') return i + 1;
    }
    return i;
  }
  if (s[i] == ']') {  // OSC: up to BEL or ESC backslash
    for (++i; i < s.size(); ++i) {
      if (s[i] == '\a') return i + 1;
      if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '\\') return i + 2;
    }
    return i;
  }
  return i + 1;  // a two-byte escape
}

}  // namespace

size_t utf8_char_length(std::string_view s, size_t i) { return utf8_char(s, i); }

std::string sanitize_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == 0x1b) { i = skip_escape(s, i); continue; }
    if (c == '\r') {
      if (i + 1 >= s.size() || s[i + 1] != '\n') out += '\n';
      ++i;
      continue;
    }
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) { ++i; continue; }
    const size_t n = utf8_char(s, i);
    if (n == 0) { out += kReplacement; ++i; continue; }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string xml_escape(std::string_view s) {
  const std::string clean = sanitize_text(s);
  std::string out;
  out.reserve(clean.size() + clean.size() / 8);
  for (char c : clean) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string utf8_prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // s[n] continues a character
  return std::string(s.substr(0, n));
}

std::string tail(std::string_view s, size_t max_lines, size_t max_bytes) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  if (max_lines == 0) return "";
  size_t start = 0, pos = s.size(), lines = 0;
  while (pos > 0) {
    const size_t nl = s.rfind('\n', pos - 1);
    if (nl == std::string_view::npos) break;
    if (++lines == max_lines) { start = nl + 1; break; }
    pos = nl;
  }
  std::string_view t = s.substr(start);
  if (t.size() > max_bytes) {
    size_t cut = t.size() - max_bytes;
    while (cut < t.size() && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) ++cut;
    t = t.substr(cut);
  }
  return std::string(t);
}

std::string iso8601_utc(double epoch_seconds) {
  // A results file may say anything: NaN, below 0 or after the year 9999 (253402300800 s) is no time to
  // print (and past time_t's range the cast would be undefined).
  if (!(epoch_seconds > 0 && epoch_seconds < 253402300800.0)) return "";
  const std::time_t t = static_cast<std::time_t>(epoch_seconds);
  std::tm tm{};
  if (!gmtime_r(&t, &tm)) return "";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

std::string seconds(double s, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, s);
  return buf;
}

std::optional<uint64_t> job_peak(const JobResult& job) {
  std::optional<uint64_t> peak;
  for (const auto& [device, bytes] : job.peak) peak = std::max(peak.value_or(0), bytes);
  if (!peak) {  // no recorded peak: the timeline's highest point
    for (const auto& [device, points] : job.timeline)
      for (const TimelinePoint& p : points) peak = std::max(peak.value_or(0), p.held);
  }
  return peak;
}

std::string verdict_list(const JobResult& job) {
  if (job.verdicts.empty()) return "-";
  std::string out;
  for (const Verdict& v : job.verdicts) {
    if (!out.empty()) out += ", ";
    out += v.policy + ": " + verdict_word(v);
  }
  return out;
}

const char* verdict_word(const Verdict& v) {
  if (v.must_fail && v.status != VerdictStatus::inconclusive) return v.status == VerdictStatus::fail ? "xfail" : "xpass";
  return to_string(v.status);
}

const char* status_word(JobStatus s) {
  switch (s) {
    case JobStatus::passed: return "passed";
    case JobStatus::failed: return "FAILED";
    case JobStatus::error: return "ERROR";
    case JobStatus::skipped: return "skipped";
    case JobStatus::inconclusive: return "inconclusive";
    case JobStatus::interrupted: return "interrupted";
  }
  return "ERROR";
}

const char* status_word(const JobResult& job) {
  if (job.expected_failure()) return "XFAIL";
  if (job.unexpected_pass()) return "XPASS";
  return status_word(job.status);
}

}  // namespace oomh::text

namespace oomh {

// Note [Text for a terminal] in oomharness/reports/terminal_text.h.
std::string terminal_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n' || c == '\t') {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
      continue;
    }
    const size_t n = text::utf8_char_length(s, i);
    if (n == 0) {  // not UTF-8: the byte, visibly
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
      continue;
    }
    uint32_t cp = 0;
    if (n == 2) cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    else if (n == 3)
      cp = ((c & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
           (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    const bool c1 = cp >= 0x80 && cp <= 0x9F;
    const bool bidi = (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
    if (c1 || bidi) {
      std::snprintf(buf, sizeof buf, "\\u{%04X}", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace oomh
