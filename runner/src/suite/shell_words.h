#pragma once
// Splitting a `run:` string into arguments the way a POSIX shell would, without running a shell:
// whitespace separates words, single quotes keep everything literally, double quotes keep spaces and
// honour \" \\ \$ \` escapes, a backslash outside quotes escapes the next character.
//
// Syntax that only a shell gives meaning to (pipes, redirections, `;`, `&&`, `$VAR`, globs, comments,
// sub-shells) is refused rather than passed on as literal arguments: the user clearly expected a shell,
// and silently running `python train.py | tee log` with "|" as an argument would be a confusing failure.

#include <string>
#include <string_view>
#include <vector>

#include "oomharness/expected.h"

namespace oomh::suite {

// The words, or an Error without a path (the caller names the field): "unterminated double quote".
Expected<std::vector<std::string>> split_shell_words(std::string_view text);

}  // namespace oomh::suite
