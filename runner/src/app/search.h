#pragma once
// Note [A search's runs]
// budget and predict answer their question by running one job many times, each run under the cap or at the
// batch the bisection chose (Note [Budget bisection] and Note [Budget of a batch] in budget_command.cpp,
// Note [Predicting from a shape-only run] in predict_command.cpp). Each run is the job alone through
// run_suites, its results under OUT/run-N. Search is that loop's one home:
//   - what a run came to, in a search's words (SearchOutcome): it fits (passed its checks, and the code met
//     no OOM: Note [Fits means no OOM] in oomharness/policies/fit.h); it recovered (passed after an OOM it
//     caught: it does not fit); it did not complete (failed or erred); it timed out (the runner stopped it at
//     --timeout: whether it fits is unknown, so the search stops there and says so, never "does not fit");
//     it was interrupted (Note [Interrupting a search] in interrupts.h: the search stops, says what it found
//     so far, and exits 2).
//   - progress (issue 40: a predict search printed nothing for 24 minutes): a line before each run naming
//     what it tries, how many runs may follow it and the time so far; during the run its live line on a
//     terminal, elsewhere its heartbeat (Note [Heartbeat] in runner/terminal.h); after it, what it came to.

#include <chrono>
#include <optional>
#include <ostream>
#include <string>

#include "app/commands.h"
#include "app/interrupts.h"
#include "oomharness/policies/fit.h"

namespace oomh::app {

enum class SearchOutcome { fits, recovered, not_completed, timed_out, interrupted };

struct SearchRun {
  int index = 0;                  // from 1: OUT/run-N
  SearchOutcome outcome = SearchOutcome::not_completed;
  JobResult result;               // the job's result; empty when the run was interrupted before it began
  Trace trace;                    // its trace (predict reads its `prediction` event)
  std::optional<OomMet> oom;      // the first OOM the code met
  bool fits() const { return outcome == SearchOutcome::fits; }
  bool completed() const { return result.status == JobStatus::passed; }  // passed its checks, OOM or not
  uint64_t peak() const;          // the most held on a device, as the cap counts
  // What it came to: "fits", "recovered at batch 1024 (out of memory at step 1 (batch 2048), caught)",
  // "does not complete (failed: ...)", "timed out after 10m00s: the search cannot tell whether it fits".
  std::string outcome_text() const;
};

// The runs left at most in a bisection that stops when hi - lo <= tolerance: ceil(log2((hi - lo) / tolerance)).
int bisection_runs_left(double range, double tolerance);

class Search {
 public:
  // `who`: "budget" or "predict", for the progress lines; `runs`: what every run shares (simulate, strict,
  // the command line); each run writes under out_dir/run-N.
  Search(std::string who, RunArgs runs, std::string out_dir, std::ostream& out, std::ostream& err);
  // Runs `job`, alone. `label` says what it tries ("batch 2048 under 300.00 MiB"), `left` how many runs may
  // follow it at most (-1: unknown). nullopt when run_suites refused to run it (said on err): an internal
  // error. A run interrupted, or asked for after an interrupt, comes back with outcome interrupted.
  std::optional<SearchRun> run(JobSpec job, const std::string& label, int left);
  int runs() const { return runs_; }
  double elapsed() const;
  // "the search was cut short by an interrupt after 3 runs (1m02s)" / "... when run 4 (batch 2048 under
  // 300.00 MiB) timed out after 10m00s (raise --timeout)": the first words of a search that stopped early.
  std::string cut_short(const SearchRun& last, const std::string& label) const;

 private:
  std::string who_;
  RunArgs runs_args_;
  std::string out_dir_;
  std::ostream& out_;
  std::ostream& err_;
  int runs_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  SearchInterrupts interrupts_;
};

}  // namespace oomh::app
