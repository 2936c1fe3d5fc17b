// `oomharness sweep`: one job, failed at every allocation site of a step, once transiently and once
// persistently (docs/sweep.md). A golden run records the step's calls (Note [Sweep sites]); each site and
// mode is then an ordinary job with one fault rule, run by run_suites as `run` runs a suite's jobs, packed
// with --jobs, judged by the job's expect list; the coverage is a view of those results.

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>

#include "app/commands.h"
#include "app/interrupts.h"
#include "exec/run_folder.h"
#include "app/spec_text.h"
#include "app/sweep_plan.h"
#include "app/sweep_sites.h"
#include "oomharness/reports/sweep.h"
#include "oomharness/reports/terminal_text.h"
#include "oomharness/reports/writers.h"
#include "oomharness/runner/cli_specs.h"
#include "oomharness/runner/results_builder.h"
#include "oomharness/runner/terminal.h"
#include "oomharness/units.h"
#include "suite/fault_rule.h"

namespace fs = std::filesystem;

namespace oomh::app {

namespace {

bool has_policy(const JobSpec& job, const std::string& policy) {
  return std::any_of(job.expect.begin(), job.expect.end(), [&](const ExpectSpec& e) { return e.policy == policy; });
}

// The checks every faulted run of a sweep gets besides the job's own (issue 16: no hang, no leak).
// The golden run gets them without a golden level; the faulted runs' memory_stable gets the golden run's
// held bytes at its last kGoldenSteps steps (Note [The golden level] in policies/src/checks_memory.cpp).
constexpr size_t kGoldenSteps = 64;

bool add_sweep_checks(JobSpec& job, std::ostream& err) {
  for (const char* text : {"no_hang", "memory_stable"}) {
    auto e = parse_expect_spec(text);
    if (!e) {  // the registry lost a check: a harness bug
      err << "oomharness sweep: " << e.error() << "\n";
      return false;
    }
    if (has_policy(job, e->policy)) continue;
    // The sweep's own memory_stable judges growth over the job's own length (its target step, as `steps:`):
    // a sweep looks for sites a recovery does not survive, and a short golden run's steady growth would
    // otherwise make it inconclusive (issue 42's short-run rule, Note in policies/src/checks_memory.cpp). A
    // faulted run's growth above the golden one is still a leak.
    if (e->policy == "memory_stable" && job.target_step && *job.target_step > 0) e->args["steps"] = *job.target_step;
    job.expect.push_back(std::move(*e));
  }
  return true;
}

void set_golden_level(JobSpec& job, const std::map<int64_t, uint64_t>& held) {
  nlohmann::json golden = nlohmann::json::object();
  size_t skip = held.size() > kGoldenSteps ? held.size() - kGoldenSteps : 0;
  for (const auto& [step, bytes] : held)
    if (skip > 0) --skip;
    else golden[std::to_string(step)] = bytes;
  if (golden.empty()) return;
  for (ExpectSpec& e : job.expect)
    if (e.policy == "memory_stable") e.args["golden"] = golden;
}

// `oomharness sweep SUITE [-k JOB]`: the job as the suite writes it (its faults aside: the sweep makes its
// own). exec's job flags describe a command's job, so they are refused beside a suite.
std::optional<ExitCode> job_from_suite(const SweepArgs& args, std::optional<JobSpec>& job, std::string& dir,
                                       std::ostream& err) {
  const ExecArgs& e = args.exec;
  if (!e.command.empty()) {
    err << "oomharness sweep: a suite's job or a command after --, not both\n";
    return ExitCode::usage_error;
  }
  if (!e.job_flags.empty()) {
    err << "oomharness sweep: the job flags (--cap, --expect, --target-step, ...) describe a command's job; a "
           "suite's job says them in the suite\n";
    return ExitCode::usage_error;
  }
  auto load = load_suite(args.suite);
  if (!load) {
    for (const auto& problem : load.error()) err << problem.str() << "\n";
    err << "oomharness sweep: no job was run: fix the suite errors above\n";
    return ExitCode::usage_error;
  }
  std::vector<JobSpec> chosen;
  if (args.filter.empty()) {
    chosen = load->jobs;
  } else {
    auto f = JobFilter::parse(args.filter);
    if (!f) {
      err << "oomharness sweep: " << f.error() << "\n";
      return ExitCode::usage_error;
    }
    for (const auto& j : load->jobs)
      if (f->matches(load->name, j.name)) chosen.push_back(j);
  }
  if (chosen.size() != 1) {
    err << "oomharness sweep: " << (chosen.empty() ? "no job" : std::to_string(chosen.size()) + " jobs") << " of "
        << args.suite << (args.filter.empty() ? "" : " match -k '" + args.filter + "'") << ": a sweep takes one job (";
    const auto& names = chosen.empty() ? load->jobs : chosen;
    for (size_t i = 0; i < names.size() && i < 8; ++i) err << (i ? ", " : "") << names[i].name;
    err << (names.size() > 8 ? ", ...": "") << "); choose it with -k\n";
    return chosen.empty() ? ExitCode::nothing_tested : ExitCode::usage_error;
  }
  job = std::move(chosen.front());
  if (!job->faults.empty())  // setup_sweep leaves them out
    err << "oomharness sweep: note: the faults: of " << job->name << " are left out: the sweep makes one per site\n";
  dir = load->dir;
  return std::nullopt;
}

// The job's checks for a sweep: its own, `completes` when it has none (then --target-step is needed), and
// no_hang and memory_stable.
std::optional<ExitCode> complete_checks(JobSpec& job, const std::vector<int64_t>& steps, const std::string& who,
                                        std::ostream& err) {
  if (job.expect.empty()) {
    if (!job.target_step) {
      err << who << ": say what surviving means: --target-step N (the job must reach step N), or "
             "--expect checks (in a suite: target_step: or expect:)\n";
      return ExitCode::usage_error;
    }
    auto completes = parse_expect_spec("completes");
    job.expect.push_back(std::move(*completes));
  }
  if (job.target_step && *job.target_step < steps.back()) {
    err << who << ": --step " << steps.back() << " is after --target-step " << *job.target_step
        << ": the job never runs it\n";
    return ExitCode::usage_error;
  }
  if (!add_sweep_checks(job, err)) return ExitCode::internal_error;
  return std::nullopt;
}

}  // namespace

std::optional<ExitCode> setup_sweep(JobSpec base, SweepSettings settings, const std::string& suite_dir,
                                    const std::string& who, SweepSetup& setup, std::ostream& err) {
  if (base.sweep) {  // a suite's `sweep:` gives what the flags leave unsaid
    const SweepSpec& spec = *base.sweep;
    if (settings.steps.empty()) settings.steps = spec.steps;
    if (settings.modes.empty()) settings.modes = join(spec.modes, ",");
    if (settings.transient_times < 0 && spec.transient_times) settings.transient_times = *spec.transient_times;
  }
  if (settings.modes.empty()) settings.modes = "transient,persistent";
  if (settings.transient_times < 0) settings.transient_times = 2;
  if (settings.steps.empty()) {
    err << who << ": --step is required: the training step whose allocation sites are swept (from 1; "
           "several: 2,5 or 2..4; a suite's job may say it in its sweep: block)\n";
    return ExitCode::usage_error;
  }
  if (std::string problem = parse_sweep_steps(settings.steps, setup.steps); !problem.empty()) {
    err << who << ": bad --step '" << settings.steps << "': " << problem << "\n";
    return ExitCode::usage_error;
  }
  if (settings.transient_times < 1 || settings.transient_times > 1000) {
    err << who << ": bad --transient-times " << settings.transient_times << ": from 1 to 1000\n";
    return ExitCode::usage_error;
  }
  setup.modes.clear();
  for (const auto& name : split_items(settings.modes)) {
    auto m = sweep_mode_from_name(name);
    if (!m) {
      err << who << ": bad --modes '" << settings.modes << "': '" << name << "' is not transient or persistent\n";
      return ExitCode::usage_error;
    }
    if (std::find(setup.modes.begin(), setup.modes.end(), *m) == setup.modes.end()) setup.modes.push_back(*m);
  }
  if (setup.modes.empty()) {
    err << who << ": bad --modes '': transient, persistent or both (transient,persistent)\n";
    return ExitCode::usage_error;
  }
  if (auto problem = complete_checks(base, setup.steps, who, err)) return problem;
  setup.steps_text.clear();
  for (int64_t st : setup.steps) setup.steps_text += (setup.steps_text.empty() ? "" : ",") + std::to_string(st);
  setup.transient_times = settings.transient_times;
  setup.suite_dir = suite_dir;
  base.faults.clear();
  setup.base = std::move(base);
  return std::nullopt;
}

std::optional<ExitCode> prepare_sweep(const SweepSetup& setup, const RunArgs& run, const std::string& golden_out,
                                      int jobs, const std::string& who, PreparedSweep& prepared, std::ostream& out,
                                      std::ostream& err) {
  const JobSpec& base = setup.base;
  // 1. The golden run: no fault, the step's calls recorded, the step begun with the cache emptied (as a
  // faulted step is: the same calls reach the driver in both).
  JobSpec golden = base;
  golden.name = base.name + "-golden";
  golden.env["OOMH_RECORD_STEP"] = std::to_string(setup.steps.front()) + ".." + std::to_string(setup.steps.back());
  if (base.flush_steps().empty()) golden.env["OOMH_FLUSH_AT_STEPS"] = setup.steps_text;
  Suite golden_suite;
  golden_suite.name = "sweep";
  golden_suite.file = "<command line>";
  golden_suite.dir = setup.suite_dir;
  golden_suite.jobs.push_back(golden);
  RunCapture golden_capture;
  RunArgs golden_run;
  golden_run.simulate = run.simulate;
  golden_run.strict = run.strict;
  golden_run.device = run.device;
  golden_run.surveyed = run.surveyed;
  golden_run.command_line = run.command_line;
  golden_run.verbosity = -1;
  golden_run.quiet_reports = true;
  golden_run.out_dir = golden_out;
  golden_run.capture = &golden_capture;
  out << "Golden run of " << terminal_text(base.name) << " (no fault; recording the allocations of step " << setup.steps_text << "):\n";
  ExitCode golden_code = run_suites({golden_suite}, golden_run, out, err);
  if (golden_code == ExitCode::interrupted || golden_code == ExitCode::internal_error ||
      golden_code == ExitCode::usage_error)
    return golden_code;
  if (golden_capture.outcomes.empty() || golden_capture.run.suites.empty() ||
      golden_capture.run.suites[0].jobs.empty())
    return ExitCode::internal_error;
  const JobResult& golden_result = golden_capture.run.suites[0].jobs[0];
  if (golden_result.status != JobStatus::passed) {
    err << who << ": the golden run (no fault) "
        << (golden_result.status == JobStatus::inconclusive ? "was inconclusive" : "did not pass")
        << ", so no site can be judged: " << terminal_text(golden_result.message) << " (" << golden_out
        << "/results.json). Every run of a sweep, the golden one too, is judged by the job's checks plus no_hang "
           "and memory_stable (which needs at least 5 steps)\n";
    return ExitCode::tests_failed;
  }
  const Trace& golden_trace = golden_capture.outcomes[0].trace;
  std::vector<RecordedCall> calls;
  for (int64_t st : setup.steps) {
    std::vector<RecordedCall> of_step = recorded_calls(golden_trace, st);
    if (of_step.empty())
      out << "Step " << st << ": no allocation call reached the driver in the golden run: nothing to sweep there\n";
    calls.insert(calls.end(), of_step.begin(), of_step.end());
  }
  if (calls.empty()) {
    err << who << ": no allocation call reached the driver in step " << setup.steps_text
        << " of the golden run: the job never reported that step through the probe, or it allocated "
           "nothing then (nothing was tested)\n";
    return ExitCode::nothing_tested;
  }
  prepared.setup = setup;
  prepared.sites = sweep_sites(calls);
  prepared.calls = calls.size();
  prepared.golden_seconds = golden_result.duration;
  const std::map<int64_t, uint64_t> golden_held =
      golden_trace.attempts.empty() ? std::map<int64_t, uint64_t>{} : held_at_steps(golden_trace.attempts.back());

  // Note [Packing a sweep's runs] in sweep_sites.h.
  uint64_t golden_peak = 0;
  for (const auto& [device, bytes] : golden_result.peak) golden_peak = std::max(golden_peak, bytes);
  const std::optional<uint64_t> packing_cap = sweep_packing_cap(base, golden_peak, jobs, run.simulate);
  if (packing_cap)
    out << "Each faulted run is capped at " << format_bytes(*packing_cap)
        << " (twice the golden run's peak, plus 256 MiB) so that runs can share a GPU; give --cap "
        << (*packing_cap >> 20) << "MiB beside a site's --fault to reproduce it exactly\n";

  // 2. One job per site and mode, each with one fault rule, built by the --fault parser.
  for (size_t si = 0; si < prepared.sites.size(); ++si)
    for (SweepMode mode : setup.modes) {
      std::string text = site_fault_text(prepared.sites[si], mode, setup.transient_times);
      auto f = parse_fault_spec(text, "");
      if (!f) {
        err << who << ": internal error: " << f.error() << "\n";
        return ExitCode::internal_error;
      }
      JobSpec job = base;
      char name[64];
      std::snprintf(name, sizeof name, "site%02zu-%s", si + 1, sweep_mode_name(mode));
      job.name = base.name + "-" + name;
      job.sweep.reset();
      f->rule["name"] = f->name;
      job.faults.push_back(std::move(*f));
      if (packing_cap) job.memory.limit = packing_cap;
      set_golden_level(job, golden_held);
      if (auto problem = suite::check_fault_plan(job.plan())) {
        err << who << ": the fault plan is not one the shim accepts: " << *problem << "\n";
        return ExitCode::usage_error;
      }
      prepared.jobs.push_back(std::move(job));
      prepared.planned.push_back({si, mode, text});
    }
  out << prepared.calls << " allocation calls in step " << setup.steps_text << ", " << prepared.sites.size()
      << (prepared.sites.size() == 1 ? " site" : " sites") << ": " << prepared.planned.size() << " faulted runs\n";
  return std::nullopt;
}

SweepResult sweep_coverage(const PreparedSweep& prepared, const std::vector<JobResult>& results, double seconds,
                           int jobs, bool simulated) {
  SweepResult sweep;
  sweep.job = prepared.setup.base.name;
  sweep.command = prepared.setup.base.argv;
  sweep.steps = prepared.setup.steps;
  sweep.calls_recorded = prepared.calls;
  sweep.golden_seconds = prepared.golden_seconds;
  sweep.sweep_seconds = seconds;
  sweep.jobs = jobs;
  sweep.simulated = simulated;
  for (const auto& site : prepared.sites) sweep.sites.push_back({site, {}});
  for (size_t i = 0; i < prepared.planned.size(); ++i) {
    const std::string& name = prepared.jobs[i].name;
    auto r = std::find_if(results.begin(), results.end(), [&](const JobResult& j) { return j.name == name; });
    if (r == results.end()) continue;  // not run (-x, interrupted): the coverage says only what ran
    SweepCase c;
    c.mode = sweep_mode_name(prepared.planned[i].mode);
    c.fault = prepared.planned[i].fault;
    c.job = r->name;
    c.status = r->status;
    c.outcome = sweep_outcome(*r);
    c.message = r->message;
    sweep.sites[prepared.planned[i].site].cases.push_back(std::move(c));
  }
  return sweep;
}

// `dir_fd`: the folder, opened (a run's sweeps/SUITE/JOB: Note [A run folder the runner owns] in
// exec/run_folder.h); -1: `dir` is the user's (sweep's --out), opened here. Either way the two files are
// written relative to it, so a link a job planted where they go is replaced, not followed.
bool write_sweep(const SweepResult& sweep, const std::string& dir, const std::string& report, std::ostream& out,
                 std::ostream& err, int dir_fd) {
  exec::DirFd own;
  if (dir_fd < 0) {
    own = exec::open_user_dir(dir);
    dir_fd = own.get();
  }
  const std::string sweep_json = (fs::path(dir) / "sweep.json").string();
  const std::string sweep_html = (fs::path(dir) / "sweep.html").string();
  auto written = write_file_atomic_at(dir_fd, "sweep.json", render_sweep_json(sweep), sweep_json);
  if (!written) err << "oomharness: " << written.error() << "\n";
  auto written_html = write_file_atomic_at(dir_fd, "sweep.html", render_sweep_html(sweep, report), sweep_html);
  if (!written_html) err << "oomharness: " << written_html.error() << "\n";
  TerminalStyle style = detect_terminal_style();
  out << "\n" << render_sweep_text(sweep, style.color);
  out << "Sweep: " << sweep_json << " and " << sweep_html << "\n";
  return written && written_html;
}

ExitCode command_sweep(const SweepArgs& given, std::ostream& out, std::ostream& err) {
  const SweepArgs& args = given;
  const std::string who = "oomharness sweep";
  std::optional<JobSpec> base;
  std::string suite_dir;
  if (!args.suite.empty()) {
    if (auto problem = job_from_suite(args, base, suite_dir, err)) return *problem;
  }
  if (args.exec.given("--fault")) {
    err << "oomharness sweep: --fault is not for sweep: it makes one fault per site itself (use "
           "oomharness exec --fault to run one)\n";
    return ExitCode::usage_error;
  }
  if (args.jobs < 1) {
    err << "oomharness sweep: bad --jobs " << args.jobs << ": at least 1\n";
    return ExitCode::usage_error;
  }
  if (!base) {
    if (!args.filter.empty()) {
      err << "oomharness sweep: -k chooses a job of a suite: give the suite file, or no -k\n";
      return ExitCode::usage_error;
    }
    base = job_from_exec_args(args.exec, "sweep", err);
    if (!base) return ExitCode::usage_error;
    suite_dir = base->cwd.value_or(".");
  }
  SweepSetup setup;
  SweepSettings settings{args.steps, args.modes, args.transient_times};
  if (auto problem = setup_sweep(std::move(*base), settings, suite_dir, who, setup, err)) return *problem;

  RunArgs run;
  run.simulate = args.exec.simulate;
  run.strict = args.exec.strict;
  run.command_line = args.exec.command_line;
  // Note [Interrupting a search] in interrupts.h: Ctrl-C between the golden run and the faulted runs too.
  SearchInterrupts interrupts;
  const auto began = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count(); };
  PreparedSweep prepared;
  if (auto problem = prepare_sweep(setup, run, (fs::path(args.exec.out_dir) / "golden").string(), args.jobs, who,
                                   prepared, out, err)) {
    if (*problem == ExitCode::interrupted || SearchInterrupts::signalled()) {
      err << who << ": the sweep was cut short by an interrupt during its golden run, after " << format_duration(elapsed())
          << ": no site was found yet\n";
      return ExitCode::interrupted;
    }
    return *problem;
  }
  if (SearchInterrupts::signalled()) {
    err << who << ": the sweep was cut short by an interrupt after its golden run: no faulted run was made\n";
    return ExitCode::interrupted;
  }
  out << "\n";

  Suite suite;
  suite.name = "sweep";
  suite.file = "<command line>";
  suite.dir = setup.suite_dir;
  suite.jobs = prepared.jobs;
  RunCapture capture;
  RunArgs faulted = run;
  faulted.verbosity = -1;
  faulted.quiet_reports = true;
  faulted.out_dir = args.exec.out_dir;
  faulted.jobs = args.jobs;
  faulted.threads_per_job = args.threads_per_job;
  faulted.reports = args.exec.reports;
  faulted.summary = args.exec.summary;  // the faulted runs' Markdown summary; the golden run's is left out
  faulted.capture = &capture;
  capture.keep_traces = false;
  // Progress (issue 40): each faulted run as it is judged, with the runs left and the time so far.
  std::mutex progress_mutex;
  size_t done = 0;
  faulted.on_result = [&](size_t i, const JobResult& r) -> std::string {
    std::lock_guard<std::mutex> lock(progress_mutex);
    ++done;
    if (i >= prepared.planned.size()) return "";
    const PlannedRun& p = prepared.planned[i];
    return "sweep: site " + std::to_string(p.site + 1) + " of " + std::to_string(prepared.sites.size()) + " (" +
           sweep_mode_name(p.mode) + "): " + sweep_outcome(r) + "; " + std::to_string(done) + " of " +
           std::to_string(prepared.planned.size()) + " runs done, " + std::to_string(prepared.planned.size() - done) +
           " left, " + format_duration(elapsed()) + " so far";
  };
  ExitCode code = run_suites({suite}, faulted, out, err);
  if (code == ExitCode::interrupted || SearchInterrupts::signalled()) {
    code = ExitCode::interrupted;
    err << who << ": the sweep was cut short by an interrupt after " << format_duration(elapsed()) << ": " << done << " of "
        << prepared.planned.size() << " faulted runs done; the coverage below is of those\n";
  }
  if (capture.run.suites.empty()) return code;

  // 3. The coverage: the same results, grouped by site.
  SweepResult sweep = sweep_coverage(prepared, capture.run.suites[0].jobs, capture.run.suites[0].duration, args.jobs,
                                     args.exec.simulate);
  bool written = write_sweep(sweep, args.exec.out_dir, "report.html", out, err);
  out << "Results: " << (fs::path(args.exec.out_dir) / "results.json").string()
      << "\nHTML report: " << (fs::path(args.exec.out_dir) / "report.html").string() << "\n";
  if (!written && code == ExitCode::ok) return ExitCode::internal_error;
  return code;
}

}  // namespace oomh::app
