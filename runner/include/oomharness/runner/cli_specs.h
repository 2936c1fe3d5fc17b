#pragma once
// What the command line adds to a suite: `--fault` and `--expect` specs (for `oomharness exec`) and the
// `-k` job filter. Each parser returns the value or an error message that quotes what was given; they
// never throw. docs/cli.md documents the syntax; tests/runner/app/specs_test.cpp holds the examples.

#include <memory>
#include <string>
#include <vector>

#include "oomharness/expected.h"
#include "oomharness/runner/suite.h"

namespace oomh {

// The parsers' errors are complete messages that name the flag and quote its text, with any suggestion in
// place: "bad --fault 'stpe=5': unknown key 'stpe' (did you mean 'step'?)". A flag's value is one word on
// the command line, not a tree, so there is no path to keep as data: E = std::string (Note [One result
// type] in oomharness/expected.h). Callers print the message after "oomharness COMMAND: ".

// `--fault step=5,times=4`: one rule of the fault plan (docs/fault-plan.md), sizes and times normalised
// to numbers. `name` is used as the rule's name unless the spec says `name=...`.
Expected<FaultSpec, std::string> parse_fault_spec(const std::string& text, const std::string& name);

// `--expect batch_halving:factor=0.5,min=8`, `--expect exit=0`, `--expect peak_below:8GiB`: a policy
// from the registry with its arguments checked and normalised by it.
Expected<ExpectSpec, std::string> parse_expect_spec(const std::string& text);

// `-k EXPR`, like pytest's: words joined by `and`, `or`, `not` and parentheses; each word matches a job
// whose `suite::job` name contains it (case-insensitive), or, when it has a glob character (* ? [),
// whose full name or job name matches it as a glob.
class JobFilter {
 public:
  static Expected<JobFilter, std::string> parse(const std::string& expression);
  bool matches(const std::string& suite, const std::string& job) const;
  const std::string& expression() const { return expression_; }

  struct Node;  // the parsed expression (cli_specs.cpp)

 private:
  std::string expression_;
  std::shared_ptr<const Node> root_;
};

}  // namespace oomh
