#pragma once
// What a person sees while a run goes: live progress while jobs run, a summary table at the end.
//
// On a terminal (stdout is a TTY and `CI` is not set) each running job has one line, redrawn in place
// with ANSI escapes at most ten times a second. Anywhere else (CI logs, pipes) plain lines are printed,
// one per job start, attempt end and job end, so that logs stay readable. `NO_COLOR` turns colours off.

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "oomharness/reports/result.h"
#include "oomharness/runner/job_runner.h"

namespace oomh {

struct TerminalStyle {
  bool live = false;   // redraw lines in place
  bool color = false;  // ANSI colours
  int width = 100;     // columns; live lines are cut to fit so that redrawing never wraps
  int verbosity = 0;   // -q: -1 (no start/attempt/done lines; the table lists only jobs that did not pass),
                       // -v: 1 (the table shows every verdict's sentence)
  // Note [Heartbeat]: without live lines, a line at least this often while jobs run (seconds; 0: none).
  double heartbeat = 30;
};
// For stdout: live when it is a TTY and `CI` is unset; colour when it is a TTY and `NO_COLOR` is unset
// (https://no-color.org: any non-empty value); the heartbeat from `OOMH_HEARTBEAT` (seconds), else 30.
TerminalStyle detect_terminal_style();

// Note [Heartbeat]
// CI systems kill a step that prints nothing for a while (GitLab after an hour by default, some runners
// after 10 minutes), and a person reading a log cannot tell a slow job from a hung harness. Without live
// lines (CI logs, pipes) the progress view prints one line at least every `heartbeat` seconds while jobs
// run: "[12:03:04] 3/10 done, running: demo::halving (41s, step 14), demo::leak (3.0s)".
std::string heartbeat_line(const std::string& clock, size_t done, size_t total,
                           const std::vector<std::pair<std::string, JobProgress>>& running);

// A GitHub Actions workflow command that puts an error annotation on `file` at `line` (no file: on the run),
// with its title and message escaped as the runner expects (%, CR, LF; and `,` `:` in properties).
std::string github_error_annotation(const std::string& file, int line, const std::string& title,
                                    const std::string& message);

// One line about a running job: "suite::job  attempt 2  step 14  1.50 GiB / 2.00 GiB  3 faults  12.3s"
// ("reference run" in place of the attempt while the job runs once more without faults).
std::string progress_line(const std::string& name, const JobProgress& p);

class ProgressView {
 public:
  // `names[i]` is what to call the i-th job given to the runner ("suite::job").
  ProgressView(std::ostream& out, TerminalStyle style, std::vector<std::string> names);
  ~ProgressView();
  void on_progress(const JobProgress& progress);
  void on_job_done(size_t index);
  // A line of the command's own (a sweep's progress), printed whatever the verbosity, above the live lines.
  void say(const std::string& line);
  // Clears the live lines; call before printing anything else.
  void finish();

 private:
  struct JobState {
    JobProgress last;
    bool started = false;
    bool done = false;
    int attempt = 0;          // the latest attempt seen (index)
    bool reference = false;   // the reference run started
    int attempts = 0;         // the runner's count when the job is done
  };
  void print_permanent(const std::string& line);  // callers hold mutex_; nothing under -q
  void print_line(const std::string& line);       // callers hold mutex_; above the live lines
  void redraw(bool force);                        // callers hold mutex_
  void clear_live();                              // callers hold mutex_
  size_t index_of(const std::string& runner_name) const;

  std::ostream& out_;
  TerminalStyle style_;
  std::vector<std::string> names_;
  std::map<std::string, JobState> jobs_;          // by the runner's job name
  int drawn_ = 0;                                  // live lines on screen now
  std::chrono::steady_clock::time_point last_draw_{};
  std::chrono::steady_clock::time_point last_heartbeat_ = std::chrono::steady_clock::now();
  void heartbeat_if_due();                         // callers hold mutex_
  std::mutex mutex_;
};

// The table printed at the end of `run`, `exec` and `demo`: job, status, verdicts, attempts, peak, time;
// under a job that did not pass its first failing verdict's sentence (or its error), under an expected
// failure the check that failed as expected, under a failed or erred job the last kOutputLines lines of
// its last attempt's output; then pytest's closing line ("==== 1 failed, 3 passed, 1 xfailed,
// 1 inconclusive in 12.3s ===="), which says "nothing was tested" when no job passed or failed.
std::string summary_table(const RunResult& run, bool color, int verbosity = 0);
inline constexpr size_t kOutputLines = 10;

// "PASSED", "FAILED", "ERROR", "SKIPPED", "INCONCLUSIVE", "INTERRUPTED".
const char* status_word(JobStatus status);
// The same for a job, which may be an expected failure (XFAIL) or pass unexpectedly (XPASS): Note
// [Expected failures] in reports/src/result.cpp.
const char* status_word(const JobResult& job);

}  // namespace oomh
