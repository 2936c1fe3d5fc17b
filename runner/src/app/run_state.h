#pragma once
// What `run` remembers between runs: the state --lf reads (docs/cli.md, "Run state").
//
// Note [Run state]
// pytest keeps --lf's memory in .pytest_cache/ beside the tests, not in the last report: so a run with -x,
// a run stopped with Ctrl-C, or any other command in between does not make it forget what failed. Ours
// lived in OUT/results.json, the last results folder, and lost it three ways (issue 29): `exec` wrote the
// same default folder and wiped it; `--lf -x` stopped before the second failure and the next --lf saw only
// the first; after Ctrl-C the interrupted results held no failure and --lf ran everything.
//
// So every `run` records, per suite set (the suite files given, as absolute paths, sorted: `run a.yaml
// b.yaml` and `run b.yaml a.yaml` are one set, `run a.yaml` another), each job's last known state in
// .oomharness-cache/lastfailed.json in the folder the command runs in (OOMH_CACHE_DIR names another
// folder), as pytest's cache sits in its root folder:
//   - a job judged failed or erred is `failed`; one judged otherwise (passed, xfailed, inconclusive) leaves
//     the file;
//   - a job the run did not finish because it was interrupted (Ctrl-C, SIGTERM) is `unrun`, unless it is
//     `failed` already: the next --lf runs it again, with the failures;
//   - a job the run never started because of -x/--maxfail keeps the state it had: a failure it skipped is
//     still a failure for the next --lf.
// --lf runs the selected jobs that are `failed` or `unrun`; when there are none, every selected job (as
// pytest does). The file is small JSON written to a temporary name and renamed; two runs that end at the
// same moment may lose one's update (never half a file); one that cannot be read is said once and treated as
// empty. `exec` and `demo` keep no state.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/reports/result.h"
#include "oomharness/runner/suite.h"

namespace oomh::app {

enum class JobMemory { failed, unrun };

struct RunState {
  std::string path;                          // the file read (or to be written)
  std::string key;                           // the suite set
  bool found = false;                        // the file held an entry for this suite set
  std::map<std::string, JobMemory> jobs;     // suite::job -> its last known state
  std::string problem;                       // the file could not be read: why (then jobs is empty)
};

// The folder: $OOMH_CACHE_DIR, else .oomharness-cache in the current folder.
std::string run_state_dir();
// The suite set's key: the suite files, absolute and sorted, one per line.
std::string suite_set_key(const std::vector<Suite>& suites);
// This suite set's remembered states.
RunState load_run_state(const std::vector<Suite>& suites);
// Folds the finished run into the state (the rules of Note [Run state]) and writes the file; an error
// sentence on failure.
std::optional<std::string> record_run_state(const std::vector<Suite>& suites, const RunResult& run);

}  // namespace oomh::app
