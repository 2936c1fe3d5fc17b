#pragma once
// Note [Whole numbers from JSON]
// nlohmann::json's get<int>() of a number written 1e30 (or 3.5, or 4294967296 for an int) casts it
// unchecked: a double out of the integer's range is undefined behaviour, an integer out of range wraps.
// Every file the runner reads back was written by a process it does not trust (a job's event log, a
// results file from another run, a job's prediction), so every codec reads an integer field through
// whole_number: a number that is whole and fits T, or nothing, for the codec to name as the field's error.
// Header-only and free of the libraries the codecs live in: reports, policies and the runner's model
// codec include it.

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "oomharness/units.h"

namespace oomh {

template <class T>
std::optional<T> whole_number(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "whole_number reads integers");
  using Limits = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(Limits::max())) return std::nullopt;
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0 ? (!Limits::is_signed || i < static_cast<int64_t>(Limits::min()))
              : static_cast<uint64_t>(i) > static_cast<uint64_t>(Limits::max()))
      return std::nullopt;
    return static_cast<T>(i);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // [low, high): 2^digits is the first double past max; min is -2^digits for a signed T, exactly a double.
    const double high = std::ldexp(1.0, Limits::digits), low = Limits::is_signed ? -high : 0.0;
    if (!(d >= low && d < high) || std::floor(d) != d) return std::nullopt;
    return static_cast<T>(d);
  }
  return std::nullopt;
}

// What a codec says of a value whole_number refused: "expected a whole number from 0 to 4294967295, found 1e+30".
template <class T>
std::string whole_number_problem(const nlohmann::json& v) {
  using Limits = std::numeric_limits<T>;
  return "expected a whole number from " + std::to_string(Limits::min()) + " to " + std::to_string(Limits::max()) +
         ", found " + v.dump();
}

// For a codec: the value read by whole_number, or std::runtime_error with whole_number_problem's words. A
// runtime_error because every codec puts its path on one (the model codec catches no other kind).
template <class T>
T read_whole(const nlohmann::json& v) {
  if (auto n = whole_number<T>(v)) return *n;
  throw std::runtime_error(whole_number_problem<T>(v));
}

// The member `key` of object j read by read_whole; `fallback` when it is absent or null. The error it throws
// names the key.
template <class T>
T whole_member(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (auto n = whole_number<T>(*it)) return *n;
  throw std::runtime_error(std::string(key) + ": " + whole_number_problem<T>(*it));
}

// For a figure a job wrote (an event's nested field, a prediction), where a bad one is ignored rather than an
// error: the member read by whole_number, or `fallback` when j is not an object or the member is absent or
// not a whole number within T.
template <class T>
T whole_member_or(const nlohmann::json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it == j.end() ? fallback : whole_number<T>(*it).value_or(fallback);
}

// A byte figure a job wrote as a member of j (a breakdown's part, a prediction's peak), read through
// saturating_bytes (units.h); 0 when j is not an object or the member is absent or not a number.
inline uint64_t bytes_in(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? saturating_bytes(it->get<double>()) : 0;
}

}  // namespace oomh
