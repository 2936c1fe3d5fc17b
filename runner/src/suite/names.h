#pragma once
// Suggestions for misspelt names: "unknown key 'tiemout' (did you mean 'timeout'?)".

#include "oomharness/names.h"
#include <string>
#include <string_view>
#include <vector>

namespace oomh::suite {

// Edit distance with adjacent transpositions counted as one edit (optimal string alignment), so that
// 'tiemout' is one edit away from 'timeout', as a typist would count it.
using oomh::edit_distance;  // include/oomharness/names.h

// The candidate nearest to `name`, or "" when none is close enough to be a plausible typo.
std::string nearest_name(std::string_view name, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" when a candidate is near, otherwise " (known: a, b, c)" with `known_label`
// in place of "known" ("known keys", "policies", ...).
std::string suggestion(std::string_view name, const std::vector<std::string>& candidates,
                       std::string_view known_label = "known");

// "a, b, c".
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

}  // namespace oomh::suite
