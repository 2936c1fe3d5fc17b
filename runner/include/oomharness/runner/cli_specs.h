#pragma once
// What the command line adds to a suite: `--fault` and `--expect` specs (for `oomharness exec`) and the
// `-k` job filter. Each parser returns the value or an error message that quotes what was given; they
// never throw. docs/cli.md documents the syntax; tests/runner/app/specs_test.cpp holds the examples.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/runner/suite.h"

namespace oomh {

template <class T>
struct SpecResult {
  std::optional<T> value;
  std::string error;  // "bad --fault 'stpe=5': unknown key 'stpe' (did you mean 'step'?)"
  explicit operator bool() const { return value.has_value(); }
};

// `--fault step=5,times=4`: one rule of the fault plan (docs/fault-plan.md), sizes and times normalised
// to numbers. `name` is used as the rule's name unless the spec says `name=...`.
SpecResult<FaultSpec> parse_fault_spec(const std::string& text, const std::string& name);

// `--expect batch_halving:factor=0.5,min=8`, `--expect exit=0`, `--expect peak_below:8GiB`: a policy
// from the registry with its arguments checked and normalised by it.
SpecResult<ExpectSpec> parse_expect_spec(const std::string& text);

// `-k EXPR`, like pytest's: words joined by `and`, `or`, `not` and parentheses; each word matches a job
// whose `suite::job` name contains it (case-insensitive), or, when it has a glob character (* ? [),
// whose full name or job name matches it as a glob.
class JobFilter {
 public:
  static SpecResult<JobFilter> parse(const std::string& expression);
  bool matches(const std::string& suite, const std::string& job) const;
  const std::string& expression() const { return expression_; }

  struct Node;  // the parsed expression (cli_specs.cpp)

 private:
  std::string expression_;
  std::shared_ptr<const Node> root_;
};

}  // namespace oomh
