#pragma once
// Note [Text for a terminal]
// Whatever a job printed, and whatever a results file says (names, messages, warnings, output tails), can
// hold escape sequences that retitle a window, clear the screen, move the cursor over earlier lines or hide
// text. The HTML report escapes it for HTML; this one function does the same for a terminal, and every
// command passes such text through it before printing (the summary table, explain, compare, messages that
// quote a job's output). Only printable text goes out: valid UTF-8 stays, and every control character
// (C0 but newline and tab, DEL, C1), bidirectional override (U+202A..U+202E, U+2066..U+2069) and
// invalid byte is written visibly as \xNN or \u{NNNN}, so a person sees that it was there and what it was.

#include <string>
#include <string_view>

namespace oomh {

std::string terminal_text(std::string_view s);

}  // namespace oomh
