#pragma once
// Comparing two runs (`oomharness compare BASE NEW --fail-on RULE...`): per job, what changed between a
// base results file and a new one, and which --fail-on rules call that a regression.
//
// Note [--fail-on rules]
// A rule names a metric and the change it tolerates; a change beyond it is a regression.
//   verdict             a job that passed no longer passes, or one of its verdicts went pass -> fail
//   removed             a job of the base run is missing from the new one
//   peak:+5%            a job's peak memory (the largest over its devices) grew by more than 5%
//   peak:+256MiB        ... by more than 256 MiB (any size units.h reads)
//   recovery:+20%       the time from the first visible OOM to the next completed step grew by more than 20%
//   recovery:+2s        ... by more than 2 seconds (any duration units.h reads)
//   faults_visible:-0   the training code saw fewer injected faults than before (more were absorbed by the
//                       framework, so the suite tests less); `-N` tolerates a drop of N
// A bare metric means no tolerance: `peak` is `peak:+0%`, `recovery` is `recovery:+0%`, `faults_visible`
// is `faults_visible:-0`. Metrics missing on either side (no recovery in the base) are not compared.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/reports/expected.h"
#include "oomharness/reports/result.h"

namespace oomh {

struct CompareRule {
  enum class Metric { verdict, removed, peak, recovery, faults_visible };
  Metric metric = Metric::verdict;
  bool relative = false;     // threshold is a percentage
  double threshold = 0;      // percent, bytes, seconds or a count: the tolerated change
  std::string text;          // as the user wrote it, for messages
};

// Parses one --fail-on rule: "peak:+5%". The error quotes the rule and lists the valid forms.
ReportExpected<CompareRule> parse_fail_on(const std::string& text);

struct VerdictChange {
  std::string policy;
  std::optional<VerdictStatus> base, now;  // nullopt: the verdict is absent on that side
};

struct JobComparison {
  std::string suite, job;                            // the new run's suite for a job of a renamed suite
  std::string renamed_from;                          // Note [A renamed suite]: the base's name of the suite, else ""
  std::string full_name() const { return suite + "::" + job; }  // suite::job, as every command names a job
  std::optional<JobStatus> base_status, new_status;  // nullopt: the job is absent on that side
  std::vector<VerdictChange> verdict_changes;        // only verdicts whose status changed
  std::optional<uint64_t> base_peak, new_peak;       // largest over devices; nullopt: no memory recorded
  std::optional<double> base_recovery, new_recovery;
  int base_faults_visible = 0, new_faults_visible = 0;
  std::vector<std::string> regressions;              // one sentence per rule this job breaks

  bool added() const { return !base_status && new_status; }
  bool removed() const { return base_status && !new_status; }
};

// Note [A renamed suite]
// Jobs are paired by suite::job. A suite renamed between the two runs would otherwise show each of its jobs as
// removed and new, and a job that passed before and fails now would hide behind "1 removed + 1 new" (exit 0,
// "no regressions"). So a suite of the base that the new run lacks is paired with a suite of the new run that
// the base lacks when they have jobs of the same name, and then its jobs are paired by their names: the
// comparison says so ("the suite 'a' is 'b' in the new run") and each row names the job's old name. When
// one such suite could be either of two (two suites renamed, each sharing job names with both), `compare`
// refuses to compare (exit 4) and says which suites: a regression must not hide behind a guess.
struct SuiteRename {
  std::string base, now;
};
struct SuitePairing {
  std::vector<SuiteRename> renamed;
  std::optional<std::string> ambiguous;  // why the suites cannot be paired: compare refuses
};
SuitePairing pair_suites(const RunResult& base, const RunResult& now);

struct Comparison {
  std::vector<JobComparison> jobs;   // the base run's order, then jobs only the new run has
  std::vector<SuiteRename> renamed;  // Note [A renamed suite]
  bool regressed() const;            // some job broke some rule
  int regression_count() const;
};

Comparison compare(const RunResult& base, const RunResult& now, const std::vector<CompareRule>& rules);

// The first job (suite::job) that `run` lists twice, if any: compare pairs jobs by name, and a file that
// lists one twice (passed, then failed) would have one of them silently ignored, so it is an error.
std::optional<std::string> job_listed_twice(const RunResult& run);

// For the terminal: an aligned table, then one line per regression.
std::string render_comparison_text(const Comparison& c);
// For PR comments and $GITHUB_STEP_SUMMARY.
std::string render_comparison_markdown(const Comparison& c);

}  // namespace oomh
