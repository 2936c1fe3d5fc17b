#pragma once
// Internal: text handling the writers share. Job output is arbitrary bytes (invalid UTF-8, terminal
// colour codes, progress bars redrawn with \r); every format gets it through sanitize_text first.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "oomharness/reports/result.h"

namespace oomh::text {

// Valid UTF-8 holding only characters XML 1.0 allows: invalid bytes become U+FFFD, terminal escape
// sequences (ESC [ ... , ESC ] ... BEL) are dropped, \r\n and lone \r become \n, other control characters
// are dropped. Tab and newline stay.
std::string sanitize_text(std::string_view s);

// sanitize_text, then & < > " ' as entities: safe in XML/HTML text and in quoted attributes.
std::string xml_escape(std::string_view s);

// The last `max_lines` lines of s, at most `max_bytes` bytes (cut at a character boundary).
std::string tail(std::string_view s, size_t max_lines, size_t max_bytes);

// Length of the valid UTF-8 character at s[i] (one XML allows), or 0 when the bytes there are not one.
size_t utf8_char_length(std::string_view s, size_t i);

// At most `max_bytes` bytes of s, never cutting a UTF-8 character.
std::string utf8_prefix(std::string_view s, size_t max_bytes);

// "2024-05-01T12:00:00" (UTC), as JUnit wants it; "" for 0 (unknown).
std::string iso8601_utc(double epoch_seconds);
std::string seconds(double s, int decimals = 3);  // "12.345"

std::optional<uint64_t> job_peak(const JobResult& job);  // largest over devices
// "batch_halving: fail, peak_below: pass, memory_stable: xfail"; "-" when there are none.
std::string verdict_list(const JobResult& job);
// "pass", "fail", "inconclusive"; for a must_fail check "xfail" (failed, as expected) or "xpass".
const char* verdict_word(const Verdict& v);
// "passed", "FAILED", "ERROR"... as the summaries show it.
const char* status_word(JobStatus s);
// The same for a job, which may be an expected failure: "XFAIL", "XPASS" (Note [Expected failures]).
const char* status_word(const JobResult& job);

}  // namespace oomh::text
