#pragma once
// Byte sizes and durations as users write them in suites, on the command line and in OOMH_ variables.
//
//   bytes:    "8GiB", "512MiB", "1.5GB", "4096", "0", "64 KiB"  (binary KiB/MiB/GiB/TiB, decimal kB/KB/MB/GB/TB, B)
//   duration: "30s", "5m", "1h", "250ms", "1.5s", "0"            (ns, us, ms, s, m, h; a bare number is seconds)
//
// Parsing never throws: it returns the value or an Error (Note [One result type] in expected.h) whose message
// quotes what was given; it has no path, as the parser does not know which field it reads: the caller names it.
// Header-only on purpose: the injector includes it and must not pull in a library.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "oomharness/expected.h"

namespace oomh {

namespace detail {
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
// Splits "1.5GiB" into 1.5 and "GiB". Returns false when no number leads the text.
inline bool split_number(std::string_view s, double& number, std::string_view& unit) {
  size_t i = 0;
  bool digits = false, dot = false;
  while (i < s.size()) {
    char c = s[i];
    if (c >= '0' && c <= '9') { digits = true; ++i; }
    else if (c == '.' && !dot) { dot = true; ++i; }
    else break;
  }
  if (!digits) return false;
  std::string num(s.substr(0, i));
  char* end = nullptr;
  number = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size()) return false;
  unit = trim(s.substr(i));
  return true;
}
}  // namespace detail

// Parses a byte size. Fractions are allowed with a unit ("1.5GB") and rounded down to whole bytes.
// The error's message: "bad size '12XB': unknown unit 'XB' (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)".
inline Expected<double> parse_bytes(std::string_view text) {
  std::string_view s = detail::trim(text);
  auto bad = [&](std::string_view why) {
    return Expected<double>::failure(Error::of("bad size '" + std::string(text) + "': " + std::string(why)));
  };
  if (s.empty()) return bad("empty (write a size like 8GiB, 512MiB or 0)");
  if (s.front() == '-') return bad("a size cannot be negative");
  double n = 0;
  std::string_view unit;
  if (!detail::split_number(s, n, unit)) return bad("it does not start with a number (write a size like 8GiB, 512MiB or 0)");
  struct Unit { std::string_view name; double factor; };
  static constexpr Unit units[] = {
      {"", 1}, {"B", 1},
      {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024}, {"TiB", 1024.0 * 1024 * 1024 * 1024},
      {"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"K", 1024.0}, {"M", 1024.0 * 1024}, {"G", 1024.0 * 1024 * 1024}, {"T", 1024.0 * 1024 * 1024 * 1024},
  };
  for (const auto& u : units) {
    if (unit == u.name) {
      if (u.name.empty() && s.find('.') != std::string_view::npos) return bad("a size without a unit must be a whole number of bytes");
      double v = std::floor(n * u.factor);
      if (!(v < 18446744073709551616.0)) return bad("too large");
      // 0 means "no limit" wherever a size caps something: a fraction of a byte must not quietly become it.
      if (v == 0 && n > 0) return bad("it rounds down to 0 bytes (which means no limit); write at least 1B");
      return Expected<double>::success(v);
    }
  }
  return bad("unknown unit '" + std::string(unit) + "' (use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)");
}

// Parses a duration into seconds.
inline constexpr double kMaxDurationSeconds = 1e9;

inline Expected<double> parse_duration(std::string_view text) {
  std::string_view s = detail::trim(text);
  auto bad = [&](std::string_view why) {
    return Expected<double>::failure(Error::of("bad duration '" + std::string(text) + "': " + std::string(why)));
  };
  if (s.empty()) return bad("empty (write a duration like 30s, 5m or 250ms)");
  if (s.front() == '-') return bad("a duration cannot be negative");
  double n = 0;
  std::string_view unit;
  if (!detail::split_number(s, n, unit)) return bad("it does not start with a number (write a duration like 30s, 5m or 250ms)");
  struct Unit { std::string_view name; double factor; };
  static constexpr Unit units[] = {{"", 1}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {"m", 60}, {"min", 60}, {"h", 3600}};
  for (const auto& u : units) {
    if (unit != u.name) continue;
    // Beyond a billion seconds (about 31 years) a duration is a typo, and past 9.2e9 s it no longer fits
    // a clock's nanoseconds (a timeout that large fired at once).
    const double seconds = n * u.factor;
    if (!(seconds <= kMaxDurationSeconds)) return bad("longer than 1e9 seconds (about 31 years)");
    return Expected<double>::success(seconds);
  }
  return bad("unknown unit '" + std::string(unit) + "' (use ns, us, ms, s, m or h)");
}

// "8.00 GiB", "512.0 MiB", "17 B": for messages and reports.
inline std::string format_bytes(uint64_t bytes) {
  static constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (v >= 1024.0 && i < 4) { v /= 1024.0; ++i; }
  char buf[32];
  if (i == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, names[i]);
  return buf;
}

// A byte count that came as a double (a job's figure, a line fitted to them): casting one past 2^64
// or below 0 to uint64_t is undefined, so below 0 (and NaN) reads 0 and past the range reads its end.
inline uint64_t saturating_bytes(double bytes) {
  if (!(bytes > 0)) return 0;
  if (bytes >= 18446744073709551616.0) return UINT64_MAX;  // 2^64
  return static_cast<uint64_t>(bytes);
}
inline std::string format_bytes_figure(double bytes) { return format_bytes(saturating_bytes(bytes)); }

// "250ms", "1.5s", "2m05s".
// Minutes are printed from a double, never cast to int: a duration read from a file can be anything
// (2147483648m once overflowed an int here), and what does not fit a clock is printed as plain seconds.
inline std::string format_duration(double seconds) {
  char buf[48];
  if (std::isnan(seconds)) return "?";
  if (seconds < 1.0) std::snprintf(buf, sizeof buf, "%.0fms", seconds * 1e3);
  else if (seconds < 60.0) std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  else if (seconds < 1e12) std::snprintf(buf, sizeof buf, "%.0fm%02.0fs", std::floor(seconds / 60), std::floor(std::fmod(seconds, 60.0)));
  else std::snprintf(buf, sizeof buf, "%.3gs", seconds);
  return buf;
}

}  // namespace oomh
