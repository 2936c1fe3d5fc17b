#pragma once
// The commands behind the command line (cli.cpp parses, these do). Each returns an exit code (app.h)
// and writes what a person reads to `out`, errors to `err`.

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "exec/gpu_packing.h"
#include "oomharness/runner/app.h"
#include "oomharness/reports/result.h"
#include "oomharness/runner/backend.h"
#include "oomharness/runner/job_runner.h"
#include "oomharness/runner/suite.h"

namespace oomh::app {

// --junit/--json/--html/--markdown/--perfetto.
struct ReportFlags {
  std::string junit, json, html, markdown, perfetto;
};

// What run_suites hands back besides its exit code, for a command that plans more jobs from a run's
// outcome (sweep, budget): the judged results and each job's trace, in the order the jobs were given.
struct RunCapture {
  RunResult run;
  std::vector<JobOutcome> outcomes;
  bool keep_traces = true;  // false: the outcomes' traces are dropped once judged, as without a capture
};

struct RunArgs {
  std::vector<std::string> suites;
  std::vector<std::string> filters;   // -k, OR-ed when repeated
  int jobs = 1;
  std::string threads_per_job = "auto";  // auto, off or N (Note [CPU share of packed jobs])
  std::string gpus;                   // "0,1"
  ReportFlags reports;
  bool summary = false;
  std::string out_dir = "oomh-out";
  bool simulate = false;
  bool strict = false;                // an inconclusive job fails the run
  std::optional<DeviceChoice> device; // --device: for every job; unset: each job's own `device:`
  size_t max_jobs = SuiteLimits::default_max_jobs;  // --max-jobs: jobs a suite may expand to
  int maxfail = 0;                    // -x (1), --maxfail N: start no job after N failed or erred; 0: no limit
  bool last_failed = false;           // --lf: only the jobs that failed, erred or did not finish (Note [Run state])
  bool collect_only = false;          // --collect-only: list the jobs that would run, run none
  bool keep_state = false;            // record the run state (`run` only; not exec, demo, a sweep's golden run)
  int verbosity = 0;                  // -q: -1, -v: 1
  std::vector<std::string> command_line;
  // The machine's GPUs when the caller surveyed them already (the demo, to choose its suite): a command
  // asks nvidia-smi once. Unset: run_suites surveys (unless --simulate).
  std::optional<exec::GpuSurvey> surveyed;
  // --backend; unset: the suites' `backend:` (they must agree), else local (Note [Backends]).
  std::optional<BackendKind> backend;
  SlurmOptions slurm;                 // --slurm-* (docs/slurm.md)
  RunCapture* capture = nullptr;      // when set, run_suites fills it
  bool quiet_reports = false;         // no summary table or report paths on `out` (a sweep's golden run)
  bool banner = true;                 // the first line ("oomharness 0.1.0: 3 jobs from 1 suite on ..."); a
                                      // search's runs say what they are themselves (Note [A search's runs])
  // Called as each job is judged (from the runner's thread), for a command that reports its own progress
  // (sweep: which site, how many runs left): the line it returns is printed, even under -q, between the live
  // lines (Note [A search's runs] in search.h); "" prints nothing.
  std::function<std::string(size_t job_index, const JobResult& result)> on_result;
};

struct ExecArgs {
  // The job flags given (--cap, --env, ...), each with its values as written, one per use; a switch's is
  // "true". Which flags there are, how they are written and what reads them is the job table's (Note [One
  // table of job fields] in suite/job_table.h): cli.cpp binds them from it, job_from_exec_args reads them.
  std::map<std::string, std::vector<std::string>, std::less<>> job_flags;
  bool given(std::string_view flag) const { return job_flags.count(flag) > 0; }
  // The value of a flag taken once (the last given), or "".
  std::string value(std::string_view flag) const {
    auto it = job_flags.find(flag);
    return it == job_flags.end() || it->second.empty() ? std::string() : it->second.back();
  }
  std::string threads_per_job = "off";  // exec only (Note [CPU share of packed jobs]): one job has every core
  std::vector<std::string> command;
  ReportFlags reports;
  bool summary = false;
  std::string out_dir = "oomh-out";  // exec: oomh-exec (cli.cpp), so that it never overwrites a suite's results
  bool simulate = false;
  bool strict = false;
  int verbosity = 0;                  // -q: -1, -v: 1
  std::vector<std::string> command_line;
};

// `oomharness sweep`: exec's flags describe the job; these, the sweep (docs/sweep.md).
struct SweepArgs {
  ExecArgs exec;
  std::string suite;                  // sweep a job of this suite instead of a command after --
  std::string filter;                 // -k: which job of the suite (needed when it has several)
  std::string steps;                  // --step: the steps whose allocation sites are swept: 3, 2,5 or 2..4 (required)
  int jobs = 1;                       // -j: faulted runs at once
  std::string threads_per_job = "auto";
  int transient_times = -1;           // --transient-times: failures in a row of a transient fault; -1: the
                                      // suite job's sweep: or 2
  std::string modes;                  // --modes; "": the suite job's sweep: or transient,persistent
};

// `oomharness budget`: exec's flags describe the job; these, the search (docs/sweep.md).
struct BudgetArgs {
  ExecArgs exec;
  std::string low = "0";              // --low: the smallest cap tried
  std::string high;                   // --high: a cap the job fits in (default: the golden run's peak)
  std::string tolerance = "1MiB";     // --tolerance
  std::string batch_under;            // --batch-under CAP: the largest {batch} in the command that completes under CAP
  int64_t max_batch = 4096;           // --max-batch: the largest batch considered
};

struct CompareArgs {
  std::string base, now;
  std::vector<std::string> fail_on;
  std::string markdown;
  std::string max_file_size;  // --max-file-size (Note [Bounded results files] in reports/writers.h)
};

// --max-file-size of report, compare and explain: a size, at least 1 byte; empty: kMaxResultsFileBytes.
// nullopt (said on `err`, after `who`) when the text is not one.
std::optional<uint64_t> max_file_size(const std::string& text, const std::string& who, std::ostream& err);

ExitCode command_run(const RunArgs& args, std::ostream& out, std::ostream& err);
ExitCode command_exec(const ExecArgs& args, std::ostream& out, std::ostream& err);
ExitCode command_validate(const std::vector<std::string>& suites, std::ostream& out, std::ostream& err,
                          const SuiteLimits& limits = {});
ExitCode command_report(const std::string& results, const ReportFlags& flags, std::ostream& out, std::ostream& err,
                        const std::string& max_size = "");
// `oomharness explain results.json [-k EXPR]`: each job's findings and memory breakdowns, for a person
// (docs/diagnosis.md). Exit 0, or usage_error for an unreadable file or a bad -k, or a -k matching nothing.
ExitCode command_explain(const std::string& results, const std::vector<std::string>& filters, std::ostream& out,
                         std::ostream& err, const std::string& max_size = "");
ExitCode command_sweep(const SweepArgs& args, std::ostream& out, std::ostream& err);
ExitCode command_budget(const BudgetArgs& args, std::ostream& out, std::ostream& err);
ExitCode command_compare(const CompareArgs& args, std::ostream& out, std::ostream& err);
// `oomharness agent PLAN`: what a Slurm job runs on its node (Note [Backends]).
// With `node`, one node's share of a job on several nodes (Note [Ranks on several nodes] in exec/node_group.h).
ExitCode command_agent(const std::string& plan_path, bool node, std::ostream& out, std::ostream& err);
// `oomharness dev job-keys` (hidden): the job table as JSON (Note [One table of job fields] in
// suite/job_table.h), for the checks of what other languages say about a job (tests/python).
ExitCode command_dev_job_keys(std::ostream& out);
// `oomharness dev backends`: kBackends' names on one line, for the bash completion of --backend.
ExitCode command_dev_backends(std::ostream& out);
// python/oomharness/_abi.py (Note [Generated, not checked] in python_abi.cpp).
ExitCode command_dev_python_abi(std::ostream& out);
ExitCode command_demo(const std::string& out_dir, const std::vector<std::string>& command_line, std::ostream& out,
                      std::ostream& err);

// The job `exec`'s flags describe (the command, --cap, --fault, --expect, ...), built as a suite's job is
// (Note [Job fields]); `sweep` and `budget` start from it too. nullopt after printing why, naming `command`.
std::optional<JobSpec> job_from_exec_args(const ExecArgs& args, const std::string& command, std::ostream& err);

// Runs loaded suites (all jobs already chosen): the shared second half of run, exec and demo.
ExitCode run_suites(std::vector<Suite> suites, const RunArgs& args, std::ostream& out, std::ostream& err);

}  // namespace oomh::app
