#pragma once
// Note [One result type]
// A function that may fail in a way its caller handles returns Expected<T>: the value, or an Error that says
// which field was wrong (its path, as data), what was wrong, and what the user may have meant. Front ends
// put the path in their own words (the suite loader points at the YAML node it names, `--fault` names the
// key as written on the command line) instead of taking a message apart again (issue 30: the rule errors
// were once split at ": " and cut at a fixed offset to find the field and the suggestion).
// A parser of one value that does not know which field it reads (a size, a duration, a `run:` string, a
// template, OOMH_CAP) returns an Error with only its message (Error::of), and its caller names the field.
// A message that already names its file and needs no path (the reports' "results.json:3:14: ...", the
// shim's plan: Note [A plan's error is a line] in injector/engine/fault_plan.h) uses
// Expected<T, std::string>; the suite loader, which reports every problem at once, each at its own
// file:line:col, uses Expected<Suite, std::vector<SuiteError>>.
// Header-only and free of exceptions, like units.h: the shim's engine (injector/engine) returns it from
// start-up code; it allocates, as the std::string it replaced did, and is never made inside a hook.

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace oomh {

struct Error {
  enum class Kind {
    value,        // the value at `path` is wrong
    unknown_key,  // the last part of `path` is a key its map may not have
  };
  std::vector<std::string> path;  // outermost first: {"when", "steps", "from"}; an index is its digits: {"when", "entry", "1"}
  std::string message;            // "'from' is after 'to'", "unknown key 'stpe'"
  std::string suggestion;         // appended to the message as it is: " (did you mean 'step'?)"; "" for none
  Kind kind = Kind::value;

  // An error in words only, about a value whose field the caller names (a size, a duration, a `run:`
  // string): Error::of("unterminated double quote"); with the path where the callee knows it.
  static Error of(std::string message, std::vector<std::string> path = {}) {
    Error e;
    e.path = std::move(path);
    e.message = std::move(message);
    return e;
  }

  // "when.steps.from", "when.entry[1]".
  std::string path_text() const {
    std::string out;
    for (const std::string& part : path) {
      const bool index = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
      if (index) out += "[" + part + "]";
      else out += (out.empty() ? "" : ".") + part;
    }
    return out;
  }
  // The message with its suggestion, after the path when there is one: "when.steps: 'from' is after 'to'".
  std::string str() const {
    const std::string text = message + suggestion;
    return path.empty() ? text : path_text() + ": " + text;
  }
};

// "when.steps.from" -> {"when", "steps", "from"}; "when.entry[1]" -> {"when", "entry", "1"}: the inverse
// of Error::path_text, for a path that was built as text.
inline std::vector<std::string> split_path(const std::string& text) {
  std::vector<std::string> out;
  std::string part;
  for (char c : text) {
    if (c == '.' || c == '[' || c == ']') {
      if (!part.empty()) out.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  if (!part.empty()) out.push_back(part);
  return out;
}

template <class T, class E = Error>
class Expected {
 public:
  static Expected success(T value) {
    Expected e;
    e.value_ = std::move(value);
    return e;
  }
  static Expected failure(E error) {
    Expected e;
    e.error_ = std::move(error);
    return e;
  }
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }
  const E& error() const { return error_; }
  E& error() { return error_; }

 private:
  Expected() = default;
  std::optional<T> value_;
  E error_{};
};

}  // namespace oomh
