#pragma once
// Reading YAML values with the checks and messages a suite's author needs: every problem becomes a
// SuiteError at the node's file:line:col that names the field and quotes the value, and reading goes on
// so that one run reports every problem (up to a limit).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "oomharness/runner/suite.h"

namespace oomh::suite {

class Diagnostics {
 public:
  static constexpr size_t max_errors = 20;

  explicit Diagnostics(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  SourceLocation at(const YAML::Mark& mark) const;
  SourceLocation at(const YAML::Node& node) const { return at(node.Mark()); }
  SourceLocation at_file() const { return SourceLocation{file_, 0, 0}; }

  void error(const SourceLocation& where, std::string message);
  bool empty() const { return errors_.empty(); }
  size_t count() const { return errors_.size() + dropped_; }
  // The errors in file order (then in the order found), with a last line when some were left out.
  std::vector<SuiteError> take();

 private:
  std::string file_;
  std::vector<SuiteError> errors_;
  size_t dropped_ = 0;
};

// One `key: value` of a map, with where both are. A value left empty (`key:`) is a null node whose mark
// is wherever the parser went next, so messages about it point at the key instead.
//
// Note [yaml-cpp assignment]: assigning one YAML::Node to another that already refers to a node makes
// the *referred node* share the other's data, editing the document. Nodes here are only ever
// copy-constructed or rebound with reset(); Entry's assignment does the latter.
struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
  SourceLocation key_at;
  SourceLocation value_at;

  Entry() = default;
  Entry(std::string k, YAML::Node kn, YAML::Node v, SourceLocation ka, SourceLocation va)
      : key(std::move(k)), key_node(std::move(kn)), value(std::move(v)), key_at(std::move(ka)), value_at(std::move(va)) {}
  Entry(const Entry&) = default;
  Entry& operator=(const Entry& o) {
    key = o.key;
    key_node.reset(o.key_node);
    value.reset(o.value);
    key_at = o.key_at;
    value_at = o.value_at;
    return *this;
  }
};

// How a value is named in messages: "timeout of job 'train'", "memory.limit of defaults".
struct Field {
  std::string owner;  // "job 'train'", "defaults", "" for the top level
  std::string path;   // "memory.limit", "faults[0].when"
  std::string str() const;
  Field operator/(const std::string& key) const;     // memory -> memory.limit
  Field operator[](size_t index) const;              // faults -> faults[0]
};

// "'abc'", "a list", "a map", "nothing".
std::string describe(const YAML::Node& node);

class Reader {
 public:
  explicit Reader(Diagnostics& diagnostics) : d_(diagnostics) {}
  Diagnostics& diagnostics() { return d_; }

  // The entries of a map, checking it is one, that keys are plain names, not repeated, and known
  // (`known` empty: any key). Unknown and repeated keys are reported and left out.
  std::optional<std::vector<Entry>> map(const YAML::Node& node, const SourceLocation& where, const Field& field,
                                        const std::vector<std::string>& known, const std::string& known_label = "known keys");
  // The items of a list, or nullopt (reported) when the value is not one.
  std::optional<std::vector<YAML::Node>> list(const YAML::Node& node, const SourceLocation& where, const Field& field);

  std::optional<std::string> string(const YAML::Node& node, const SourceLocation& where, const Field& field);
  std::optional<int64_t> integer(const YAML::Node& node, const SourceLocation& where, const Field& field,
                                 int64_t min = INT64_MIN);
  std::optional<double> number(const YAML::Node& node, const SourceLocation& where, const Field& field);
  std::optional<bool> boolean(const YAML::Node& node, const SourceLocation& where, const Field& field);
  std::optional<uint64_t> size(const YAML::Node& node, const SourceLocation& where, const Field& field);
  std::optional<double> duration(const YAML::Node& node, const SourceLocation& where, const Field& field);
  // One of `choices`, with a suggestion when it is none of them.
  std::optional<std::string> choice(const YAML::Node& node, const SourceLocation& where, const Field& field,
                                    const std::vector<std::string>& choices, const std::string& what);

  // Shorthands for a map entry.
  std::optional<std::string> string(const Entry& e, const Field& f) { return string(e.value, e.value_at, f); }
  std::optional<int64_t> integer(const Entry& e, const Field& f, int64_t min = INT64_MIN) { return integer(e.value, e.value_at, f, min); }
  std::optional<double> number(const Entry& e, const Field& f) { return number(e.value, e.value_at, f); }
  std::optional<bool> boolean(const Entry& e, const Field& f) { return boolean(e.value, e.value_at, f); }
  std::optional<uint64_t> size(const Entry& e, const Field& f) { return size(e.value, e.value_at, f); }
  std::optional<double> duration(const Entry& e, const Field& f) { return duration(e.value, e.value_at, f); }

  void error(const SourceLocation& where, std::string message) { d_.error(where, std::move(message)); }

 private:
  Diagnostics& d_;
};

// A YAML value as JSON, the way a YAML 1.2 reader types plain scalars (null, true/false, integers,
// floats); quoted scalars stay strings.
nlohmann::json to_json(const YAML::Node& node);

}  // namespace oomh::suite
