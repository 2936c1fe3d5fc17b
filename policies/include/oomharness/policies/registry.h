#pragma once
// The policy registry: every recovery check by name, with the arguments it takes. The runner validates a
// suite's `expect:` entries against it (reporting bad ones as file:line:col) and evaluates them.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/evidence.h"
#include "oomharness/expected.h"
#include "oomharness/policies/trace.h"
#include "oomharness/policies/verdict.h"

namespace oomh {

enum class ArgType {
  integer,   // JSON integer
  number,    // JSON number
  boolean,
  string,
  bytes,     // "8GiB" or an integer: normalised to an integer number of bytes
  duration,  // "30s" or a number: normalised to seconds (number)
  object,    // a nested object the policy checks itself (checkpoint_resume's `reference`)
};

struct ArgSpec {
  std::string name;
  ArgType type = ArgType::string;
  bool required = false;
  std::string help;
  nlohmann::json default_value;  // filled in by normalise_args when the argument is absent; null: no default
};

struct PolicyInfo {
  std::string name;
  std::string summary;                        // one line for --help and docs
  std::vector<ArgSpec> args;
  bool scalar_arg = false;                     // accepts a bare value: `- exit: 0`, `- peak_below: 8GiB` (the first arg)
  bool needs_reference = false;                // wants the job run once more without faults
  std::function<Verdict(const Trace&, const nlohmann::json& args)> evaluate;
  std::vector<EvidenceKind> evidence = {};         // what the probe must gather for it (Note [A probe that pays for what is checked])
};

// All policies, in the order they are documented.
const std::vector<PolicyInfo>& policies();
const PolicyInfo* find_policy(const std::string& name);

// Checks and normalises a policy's arguments (sizes to bytes, durations to seconds, defaults filled in):
// the arguments as the checks read them, or an Error (Note [One result type] in include/oomharness/expected.h)
// whose path is the argument's ({"factor"}, {"reference", "metric"}, {"golden", "12"}; {} when the error is
// about the whole value).
// Note [A policy argument's error]
// The message already names the argument in the user's words ("batch_halving's 'factor' must be above 0 and
// at most 1, got 2"), as a `--expect` item and a suite's `expect:` entry both show it: front ends print
// Error::message, not Error::str(), which would put the path before it a second time. The path is for
// pointing: the suite loader reports the error at the YAML node of its outermost argument.
Expected<nlohmann::json> normalise_args(const PolicyInfo& policy, nlohmann::json args);

// Evaluates `policy` with `args` (already normalised) on `trace`. Recovery policies return inconclusive,
// saying so, when every injected fault was absorbed by the framework.
Verdict evaluate(const PolicyInfo& policy, const Trace& trace, const nlohmann::json& args);

// True when this use of the policy needs the job run once more without faults (Trace::reference):
// `needs_reference` says the policy can use one; the arguments say whether this use does
// (checkpoint_resume only with `reference`).
bool wants_reference(const PolicyInfo& policy, const nlohmann::json& args);

}  // namespace oomh
