#pragma once
// The `oomharness` command. main.cpp only calls app_main; everything else lives in the oomh_app library
// so that tests link it (docs/design/STYLE.md, habit 5). docs/cli.md describes every command and flag.

#include <string>
#include <vector>

namespace oomh {

// Exit codes, as pytest's: CI scripts already know what they mean.
enum class ExitCode : int {
  ok = 0,              // every job passed (inconclusive and skipped jobs beside a passed one do not fail a run)
  tests_failed = 1,    // some job failed, or could not run (error); `compare` found a regression
  interrupted = 2,     // Ctrl-C / SIGTERM: the results so far were still written
  internal_error = 3,  // a bug or an environment problem in the harness itself
  usage_error = 4,     // bad command line, bad suite, bad --fault/--expect spec
  nothing_tested = 5,  // no job selected, or no job passed or failed (every one inconclusive or skipped)
};

inline int to_int(ExitCode c) { return static_cast<int>(c); }

// Runs the command line. Never throws: an unexpected exception is reported and gives internal_error.
int app_main(int argc, char** argv);

// The same with an argument vector (argv[0] included), for tests.
int app_main(const std::vector<std::string>& args);

}  // namespace oomh
