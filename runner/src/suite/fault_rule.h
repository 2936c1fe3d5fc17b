#pragma once
// Checking a fault rule the way the shim will (Note [One rule schema] in injector/engine/fault_plan.h):
// the suite loader and `--fault` translate their syntax into a rule's JSON and hand it here; the shim's
// own parser decides, and its message is turned into one that names the field in the front end's words.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/expected.h"

namespace oomh::suite {

// The rule as the shim reads it (sizes in bytes, times in seconds), or the shim's Error (Note [One result
// type] in include/oomharness/expected.h): its path relative to the rule ({"when", "steps", "from"},
// {"fail"}, {"when", "entry", "1"}; for an unknown key, ending at the key), its words, and its suggestion:
// for a misspelt key, from the keys the shim's table allows; for a value outside a closed set (a phase, an
// entry point, a memory kind), the shim's own " (did you mean 'forward'?; use forward, backward, ...)".
Expected<nlohmann::json> check_fault_rule(const nlohmann::json& rule);

// Note [Step numbering] in job_fields.cpp: a rule whose steps all come before the job's first one (`step: 0`
// when steps count from 1) never fires; its Error names when.step or when.steps.to. nullopt: it may fire.
std::optional<Error> steps_before_first(const nlohmann::json& rule, int step_base);

// The whole plan of a job (its rules and caps), checked by the shim's parser: its problem, or nullopt.
std::optional<std::string> check_fault_plan(const nlohmann::json& plan);

// What a cap may count (`memory.counts`, `--cap-counts`, the plan's `cap_counts`): "allocations" (false)
// or "footprint" (true); nullopt for anything else.
std::optional<bool> cap_counts_footprint(const std::string& text);
std::vector<std::string> cap_counting_names();

// The keys a map at `path` of a rule may have (the shim's table): {} -> name, when, fail; {"when"} -> ...
std::vector<std::string> rule_keys_at(const std::vector<std::string>& path);

}  // namespace oomh::suite
