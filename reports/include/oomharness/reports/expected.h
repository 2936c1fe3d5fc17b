#pragma once
// The reports' error tier that a caller may handle: a value or a message that names the file.

#include <optional>
#include <string>
#include <utility>

namespace oomh {

// A value, or an error message a user can act on ("results.json:3:14: syntax error ...").
template <class T>
class Expected {
 public:
  static Expected success(T value) { Expected e; e.value_ = std::move(value); return e; }
  static Expected failure(std::string error) { Expected e; e.error_ = std::move(error); return e; }
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const std::string& error() const { return error_; }

 private:
  Expected() = default;
  std::optional<T> value_;
  std::string error_;
};

struct Written {};  // what a successful write returns

}  // namespace oomh
