#pragma once
// What a suite file may hold, checked before and while yaml-cpp reads it (Note [Suite limits]).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "oomharness/runner/suite.h"

namespace oomh::suite {

// Note [Suite limits]
// A suite is input the runner cannot trust (CI runs whatever a change brings), so every dimension of it
// is bounded, and crossing a bound is an ordinary suite error at file:line:col, never a hang, a crash
// or bad_alloc:
// - the file: a regular file (not /dev/zero, a FIFO or a directory) of at most kMaxDocumentBytes, valid
//   UTF-8 without control characters other than tab, newline and carriage return (YAML's own rule);
// - the document, checked by a first pass over yaml-cpp's events that builds nothing: nesting at most
//   kMaxDepth levels (yaml-cpp recurses per level), at most kMaxValues values once aliases are expanded
//   (an alias costs the size of what it names, without expanding it: "billion laughs" is refused in
//   microseconds), and one document;
// - yaml-cpp 0.7 loops forever, allocating, when a token cannot start a value (`,` alone, or as a second
//   document): its LoadAll asks for the next document while the parser stands on the same token. The
//   first pass asks for at most three documents, and two documents that start at the same place mean
//   the parser is stuck there: that is a syntax error at that place. The suite itself is then read with
//   YAML::Load, which reads one document only.
// - names (jobs, the suite, faults, observe keys): valid UTF-8, no control characters (a NUL, a newline
//   or an ANSI escape sequence would reach file names, terminals and results.json), at most
//   kMaxNameBytes;
// - observe: patterns: RE2 (linear time, no recursion), at most kMaxPatternBytes;
// - jobs: at most SuiteLimits::max_jobs after matrix expansion (`--max-jobs`), checked before expanding.
// - ranks: at most kMaxRanks processes per attempt (each has its own pipes, log and control block).
inline constexpr size_t kMaxDocumentBytes = 16u << 20;
inline constexpr int kMaxDepth = 64;
inline constexpr uint64_t kMaxValues = 1'000'000;
inline constexpr size_t kMaxNameBytes = 200;
inline constexpr size_t kMaxPatternBytes = 4096;
inline constexpr int kMaxRanks = 64;
// - nodes: at most kMaxNodes per job (each node's agent runs at most kMaxRanks ranks).
inline constexpr int kMaxNodes = 64;

// Reads a suite file within the limits: the text, or the error to report (exit 4).
struct FileText {
  std::optional<std::string> text;
  std::optional<SuiteError> error;
};
FileText read_suite_file(const std::string& path);

// The first pass over the text (size, encoding, depth, values, documents). nullopt when yaml-cpp may
// build it; a syntax error yaml-cpp raises on the way is reported too.
std::optional<SuiteError> check_document(const std::string& text, const std::string& file);

// What to say about a yaml-cpp syntax error at `line` (0-based): the tab rule when the line or the
// one before it is indented with a tab, otherwise `message` as it was. `where` moves to the tab.
std::string explain_syntax_error(const std::string& text, int line, const std::string& message, SourceLocation& where);

// Why `name` cannot be a name ("contains a control character (U+001B)"), or nullopt.
std::optional<std::string> name_problem(std::string_view name);

// Note [One job, one folder]
// A job's output folder (OUT/NAME, OUT/sweeps/SUITE/JOB) is named from its name, so that a reader finds it,
// and distinct names must never share one: with `--jobs 2`, two jobs writing one folder read each other's
// event logs (issue 26: `train ok` and `train_ok` did, and a job that tested nothing passed on the other's
// events). folder_key() is the readable form: ASCII letters, digits and "-_.=" kept, every other ASCII
// character made '_', other characters (UTF-8 letters of any script) kept as they are; a name it leaves
// unchanged is its own folder, and so is the runner's "suite::job" as "suite__job" when that "__" can only be
// the "::" (one "::", no "__" in the name). A name it changes otherwise gets "-" and 8 hex digits of a hash of the whole name
// (FNV-1a, the same on every machine and run) after its key, so "train ok" is "train_ok-…" beside a
// "train_ok" of its own. A key longer than kMaxFolderKeyBytes is cut (at a character boundary) and hashed
// too. `validate` refuses two jobs of a suite whose keys are equal (Loader::check_duplicates): their
// folders would differ by the hash alone, which no reader can tell apart.
inline constexpr size_t kMaxFolderKeyBytes = 200;
std::string folder_key(std::string_view name);
std::string folder_name(std::string_view name);

// `s` fit to quote in a message: control characters written as \xNN, cut after `max` bytes.
std::string printable(std::string_view s, size_t max = 80);

bool is_valid_utf8(std::string_view s, size_t* bad_at = nullptr);

}  // namespace oomh::suite
