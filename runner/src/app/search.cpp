// Note [A search's runs] in search.h.

#include "app/search.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "oomharness/reports/terminal_text.h"
#include "oomharness/units.h"

namespace fs = std::filesystem;

namespace oomh::app {

namespace {

bool timed_out(const JobResult& r) {
  return std::any_of(r.attempts.begin(), r.attempts.end(),
                     [](const AttemptResult& a) { return a.outcome == AttemptOutcome::timeout; });
}

std::string timeout_text(const JobResult& r) {
  double longest = 0;
  for (const AttemptResult& a : r.attempts)
    if (a.outcome == AttemptOutcome::timeout) longest = std::max(longest, a.duration);
  return "timed out after " + format_duration(longest);
}

}  // namespace

uint64_t SearchRun::peak() const {
  uint64_t peak = 0;
  for (const auto& [device, bytes] : result.peak) peak = std::max(peak, bytes);
  return peak;
}

std::string SearchRun::outcome_text() const {
  switch (outcome) {
    case SearchOutcome::fits:
      return "fits";
    case SearchOutcome::recovered:
      return recovered_text(*oom) + " (" + oom_met_text(*oom) + "): does not fit";
    case SearchOutcome::timed_out:
      return timeout_text(result) + " (--timeout): whether it fits is unknown";
    case SearchOutcome::interrupted:
      return "interrupted";
    case SearchOutcome::not_completed:
      break;
  }
  std::string s = std::string("does not complete (") + to_string(result.status);
  if (oom) s += ": " + oom_met_text(*oom);
  else if (!result.message.empty()) s += ": " + terminal_text(result.message);
  return s + ")";
}

int bisection_runs_left(double range, double tolerance) {
  if (tolerance <= 0 || range <= tolerance) return 0;
  return static_cast<int>(std::ceil(std::log2(range / tolerance)));
}

Search::Search(std::string who, RunArgs runs, std::string out_dir, std::ostream& out, std::ostream& err)
    : who_(std::move(who)), runs_args_(std::move(runs)), out_dir_(std::move(out_dir)), out_(out), err_(err) {
  runs_args_.verbosity = -1;
  runs_args_.quiet_reports = true;
  runs_args_.banner = false;  // the search's own line says what each run is
}

double Search::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::optional<SearchRun> Search::run(JobSpec job, const std::string& label, int left) {
  SearchRun r;
  r.index = ++runs_;
  if (SearchInterrupts::signalled()) {
    r.outcome = SearchOutcome::interrupted;
    return r;
  }
  out_ << who_ << ": run " << r.index;
  if (left > 0) out_ << " (at most " << left << " more after it)";
  else if (left == 0) out_ << " (the last)";
  out_ << ", " << format_duration(elapsed()) << " so far: " << label << "\n";
  out_.flush();
  Suite suite;
  suite.name = who_;
  suite.file = "<command line>";
  suite.dir = job.cwd.value_or(".");
  suite.jobs.push_back(std::move(job));
  RunCapture capture;
  RunArgs one = runs_args_;
  one.out_dir = (fs::path(out_dir_) / ("run-" + std::to_string(r.index))).string();
  one.capture = &capture;
  const ExitCode code = run_suites({suite}, one, out_, err_);
  if (code == ExitCode::interrupted || SearchInterrupts::signalled()) {
    r.outcome = SearchOutcome::interrupted;
    out_ << who_ << ": run " << r.index << " was interrupted\n";
    return r;
  }
  if (code == ExitCode::internal_error || code == ExitCode::usage_error || capture.run.suites.empty() ||
      capture.run.suites[0].jobs.empty())
    return std::nullopt;
  r.result = std::move(capture.run.suites[0].jobs[0]);
  if (!capture.outcomes.empty()) r.trace = std::move(capture.outcomes[0].trace);
  r.oom = first_oom_met(r.trace);
  if (timed_out(r.result)) r.outcome = SearchOutcome::timed_out;
  else if (!r.completed()) r.outcome = SearchOutcome::not_completed;
  else r.outcome = r.oom ? SearchOutcome::recovered : SearchOutcome::fits;
  out_ << who_ << ": run " << r.index << ": " << r.outcome_text() << " (" << format_duration(r.result.duration) << ")\n";
  out_.flush();
  return r;
}

std::string Search::cut_short(const SearchRun& last, const std::string& label) const {
  const std::string runs = std::to_string(runs_) + (runs_ == 1 ? " run" : " runs");
  if (last.outcome == SearchOutcome::timed_out)
    return "the search stopped when run " + std::to_string(last.index) + " (" + label + ") " + timeout_text(last.result) +
           ": whether it fits is unknown (raise --timeout, now the job's limit per attempt)";
  return "the search was cut short by an interrupt during run " + std::to_string(last.index) + " (" + label + "), after " +
         format_duration(elapsed()) + "; " + runs + " begun";
}

}  // namespace oomh::app
