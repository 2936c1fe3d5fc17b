#pragma once
// Small text helpers shared by the command-line spec parsers (`--fault`, `--expect`, `-k`).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oomh::app {

// Splits "a=1,b=2,c" at commas that are not inside braces or brackets (an --expect argument may be JSON).
std::vector<std::string> split_items(std::string_view text);

// "key=value" -> ("key", "value"); "flag" -> ("flag", nullopt). Both parts trimmed.
std::pair<std::string, std::optional<std::string>> split_key_value(std::string_view item);

std::optional<int64_t> parse_integer(std::string_view text);
std::optional<double> parse_number(std::string_view text);
std::optional<bool> parse_boolean(std::string_view text);

// The closest of `known` to `word` when it is close enough to be a typo, for "did you mean ...?".
std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& known);

// "a, b, c".
std::string join(const std::vector<std::string>& items, const char* separator = ", ");

std::string to_lower(std::string s);

}  // namespace oomh::app
