#pragma once
// Small text helpers shared by the command-line spec parsers (`--fault`, `--expect`, `-k`).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "suite/items.h"

namespace oomh::app {

// Comma lists and whole numbers, as the job table's flag readers take them too (suite/items.h).
using suite::parse_integer;
using suite::split_items;

// "key=value" -> ("key", "value"); "flag" -> ("flag", nullopt). Both parts trimmed.
std::pair<std::string, std::optional<std::string>> split_key_value(std::string_view item);

std::optional<double> parse_number(std::string_view text);
std::optional<bool> parse_boolean(std::string_view text);

// The closest of `known` to `word` when it is close enough to be a typo, for "did you mean ...?".
std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& known);

// "a, b, c".
std::string join(const std::vector<std::string>& items, const char* separator = ", ");

std::string to_lower(std::string s);

}  // namespace oomh::app
