#include "suite/reader.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <set>

#include "oomharness/units.h"
#include "suite/limits.h"
#include "suite/names.h"

namespace oomh::suite {

SourceLocation Diagnostics::at(const YAML::Mark& mark) const {
  if (mark.line < 0 || mark.column < 0) return SourceLocation{file_, 0, 0};
  return SourceLocation{file_, mark.line + 1, mark.column + 1};
}

void Diagnostics::error(const SourceLocation& where, std::string message) {
  if (errors_.size() >= max_errors) {
    ++dropped_;
    return;
  }
  // Names and values are quoted in messages: a control character (an ANSI escape) must not reach the terminal raw.
  errors_.push_back(SuiteError{where, printable(message, SIZE_MAX)});
}

std::vector<SuiteError> Diagnostics::take() {
  std::vector<SuiteError> out = std::move(errors_);
  std::stable_sort(out.begin(), out.end(), [](const SuiteError& a, const SuiteError& b) {
    return std::make_pair(a.where.line, a.where.column) < std::make_pair(b.where.line, b.where.column);
  });
  if (dropped_)
    out.push_back(SuiteError{SourceLocation{file_, 0, 0},
                             std::to_string(dropped_) + " more error(s) not shown; fix the ones above first"});
  errors_.clear();
  dropped_ = 0;
  return out;
}

std::string Field::str() const {
  if (owner.empty()) return path;
  if (path.empty()) return owner;
  return path + " of " + owner;
}

Field Field::operator/(const std::string& key) const { return Field{owner, path.empty() ? key : path + "." + key}; }
Field Field::operator[](size_t index) const { return Field{owner, path + "[" + std::to_string(index) + "]"}; }

std::string describe(const YAML::Node& node) {
  if (!node || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "'" + printable(node.Scalar()) + "'";  // control characters escaped, long values cut
}

namespace {

bool is_plain(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "?"; }

// The shapes of YAML 1.2 numbers, scanned by hand: std::regex recursed once per character, so a long
// scalar could overflow the stack.
size_t digits(const std::string& s, size_t i) {
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i;
}
size_t sign(const std::string& s, size_t i) { return i < s.size() && (s[i] == '+' || s[i] == '-') ? i + 1 : i; }

// [-+]?[0-9]+
bool is_integer(const std::string& s) {
  const size_t start = sign(s, 0);
  const size_t end = digits(s, start);
  return end > start && end == s.size();
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_float(const std::string& s) {
  size_t i = sign(s, 0);
  if (i < s.size() && s[i] == '.') {
    const size_t end = digits(s, i + 1);
    if (end == i + 1) return false;
    i = end;
  } else {
    const size_t end = digits(s, i);
    if (end == i) return false;
    i = end;
    if (i < s.size() && s[i] == '.') i = digits(s, i + 1);
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const size_t start = sign(s, i + 1);
    const size_t end = digits(s, start);
    if (end == start) return false;
    i = end;
  }
  return i == s.size();
}

std::optional<int64_t> parse_integer(const std::string& s) {
  if (!is_integer(s)) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_float(const std::string& s) {
  if (!is_float(s)) return std::nullopt;
  const double v = std::strtod(s.c_str(), nullptr);
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<bool> parse_bool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<Entry>> Reader::map(const YAML::Node& node, const SourceLocation& where, const Field& field,
                                              const std::vector<std::string>& known, const std::string& known_label) {
  if (!node.IsMap()) {
    error(where, field.str() + ": expected a map of keys, got " + describe(node));
    return std::nullopt;
  }
  std::vector<Entry> out;
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: it-> returns a temporary proxy
    const SourceLocation key_at = d_.at(key);
    if (!key.IsScalar()) {
      error(key_at, "in " + field.str() + ": a key must be a plain name, got " + describe(key));
      continue;
    }
    const std::string name = key.Scalar();
    if (!seen.insert(name).second) {
      error(key_at, "key '" + printable(name) + "' appears twice in " + field.str());
      continue;
    }
    if (!known.empty() && std::find(known.begin(), known.end(), name) == known.end()) {
      error(key_at, "unknown key '" + printable(name) + "' in " + field.str() + suggestion(name, known, known_label));
      continue;
    }
    const YAML::Node value = it->second;
    const SourceLocation value_at = value.IsNull() ? key_at : d_.at(value);
    out.push_back(Entry{name, key, value, key_at, value_at});
  }
  return out;
}

std::optional<std::vector<YAML::Node>> Reader::list(const YAML::Node& node, const SourceLocation& where, const Field& field) {
  if (!node.IsSequence()) {
    error(where, field.str() + ": expected a list, got " + describe(node));
    return std::nullopt;
  }
  std::vector<YAML::Node> out;
  for (const auto& item : node) out.push_back(item);
  return out;
}

std::optional<std::string> Reader::string(const YAML::Node& node, const SourceLocation& where, const Field& field) {
  if (!node.IsScalar()) {
    error(where, field.str() + ": expected a string, got " + describe(node));
    return std::nullopt;
  }
  return node.Scalar();
}

std::optional<int64_t> Reader::integer(const YAML::Node& node, const SourceLocation& where, const Field& field, int64_t min) {
  std::optional<int64_t> v;
  if (is_plain(node)) v = parse_integer(node.Scalar());
  if (!v) {
    error(where, field.str() + ": expected an integer, got " + describe(node));
    return std::nullopt;
  }
  if (*v < min) {
    error(where, field.str() + ": must be at least " + std::to_string(min) + ", got " + describe(node));
    return std::nullopt;
  }
  return v;
}

std::optional<double> Reader::number(const YAML::Node& node, const SourceLocation& where, const Field& field) {
  std::optional<double> v;
  if (is_plain(node)) v = parse_float(node.Scalar());
  if (!v) error(where, field.str() + ": expected a number, got " + describe(node));
  return v;
}

std::optional<bool> Reader::boolean(const YAML::Node& node, const SourceLocation& where, const Field& field) {
  std::optional<bool> v;
  if (is_plain(node)) v = parse_bool(node.Scalar());
  if (!v) error(where, field.str() + ": expected true or false, got " + describe(node));
  return v;
}

std::optional<uint64_t> Reader::size(const YAML::Node& node, const SourceLocation& where, const Field& field) {
  if (!node.IsScalar()) {
    error(where, field.str() + ": expected a size like 8GiB or 512MiB, got " + describe(node));
    return std::nullopt;
  }
  const Expected<double> r = parse_bytes(node.Scalar());
  if (!r) {
    error(where, field.str() + ": " + r.error().str());
    return std::nullopt;
  }
  return static_cast<uint64_t>(*r);
}

std::optional<double> Reader::duration(const YAML::Node& node, const SourceLocation& where, const Field& field) {
  if (!node.IsScalar()) {
    error(where, field.str() + ": expected a duration like 30s or 10m, got " + describe(node));
    return std::nullopt;
  }
  const Expected<double> r = parse_duration(node.Scalar());
  if (!r) {
    error(where, field.str() + ": " + r.error().str());
    return std::nullopt;
  }
  return *r;
}

std::optional<std::string> Reader::choice(const YAML::Node& node, const SourceLocation& where, const Field& field,
                                          const std::vector<std::string>& choices, const std::string& what) {
  if (!node.IsScalar()) {
    error(where, field.str() + ": expected one of " + join(choices) + ", got " + describe(node));
    return std::nullopt;
  }
  const std::string v = node.Scalar();
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
  const std::string near = nearest_name(v, choices);
  error(where, field.str() + ": unknown " + what + " '" + v + "'" +
                   (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; expected one of " + join(choices));
  return std::nullopt;
}

nlohmann::json to_json(const YAML::Node& node) {
  if (!node || node.IsNull()) return nullptr;
  if (node.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& item : node) a.push_back(to_json(item));
    return a;
  }
  if (node.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (auto it = node.begin(); it != node.end(); ++it) o[it->first.Scalar()] = to_json(it->second);
    return o;
  }
  const std::string& s = node.Scalar();
  if (!is_plain(node)) return s;
  if (s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (auto b = parse_bool(s)) return *b;
  if (auto i = parse_integer(s)) return *i;
  if (auto f = parse_float(s)) return *f;
  return s;
}

}  // namespace oomh::suite
