#pragma once
// Text written by hand on a command line: comma lists and whole numbers. The command line's spec parsers
// (app/spec_text.h: --fault, --expect, -k) and the job table's exec flag readers (job_table.cpp:
// --restart-on, --restart) read them with these, so that a list or a number means the same to both.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oomh::suite {

// `s` without the white space at either end.
std::string_view trim(std::string_view s);

// Splits "a=1,b=2,c" at commas that are not inside braces or brackets (an --expect argument may be JSON);
// each item trimmed.
std::vector<std::string> split_items(std::string_view text);

// A whole number in base 10, white space around it allowed; nullopt for anything else or out of range.
std::optional<int64_t> parse_integer(std::string_view text);

// A name an environment variable may have in a job's `env` and `--env`: letters, digits and '_', not
// starting with a digit (so never one holding '=', which would set another variable). [A-Za-z_][A-Za-z0-9_]*,
// without a regex engine (the name is the user's input).
bool is_variable_name(std::string_view s);

}  // namespace oomh::suite
