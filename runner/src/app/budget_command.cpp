// `oomharness budget`: the smallest cap in which a job still completes, by bisection (docs/sweep.md).
//
// Note [Budget bisection]
// The first run measures: uncapped, its peak (as the cap counts: allocations, or the footprint) is a cap
// the job is known to need no more than; with --high, the first run checks that cap instead. --low is
// assumed too small and never run (a cap of 0 would mean no cap at all). Each further run is an ordinary
// job with `memory.limit` at the middle of the bounds: completed (its checks passed), the middle is the new
// high, else the new low; the search stops when high - low <= tolerance. So it makes 1 + ceil(log2((high -
// low) / tolerance)) runs, within issue 16's bound of ceil(log2(range / tolerance)) + 2. A job whose
// memory use depends on the cap (it reads mem_get_info and sizes its batch to it) makes the answer the
// smallest cap where that adaptation still completes, which is the question asked.
//
// Note [Budget of a batch]
// With `{batch}` in the command and --batch-under CAP, every run is under CAP and the search is over the
// batch written into the command: batch 1 must complete (else no batch does), --max-batch + 1 is assumed not
// to, and bisection between them finds the largest that completes in ceil(log2(max_batch)) + 1 runs at
// most. It assumes what makes a batch size worth searching: a batch that fits, every smaller one fits too.

#include <cmath>
#include <filesystem>

#include "app/commands.h"
#include "oomharness/reports/budget.h"
#include "oomharness/reports/terminal_text.h"
#include "oomharness/reports/writers.h"
#include "oomharness/runner/cli_specs.h"
#include "oomharness/units.h"

namespace fs = std::filesystem;

namespace oomh::app {

namespace {

uint64_t peak_of(const JobResult& job) {
  uint64_t peak = 0;
  for (const auto& [device, bytes] : job.peak) peak = std::max(peak, bytes);
  return peak;
}

}  // namespace

ExitCode command_budget(const BudgetArgs& args, std::ostream& out, std::ostream& err) {
  if (!args.exec.value("--cap").empty()) {
    err << "oomharness budget: --cap is not for budget: it searches the cap itself (give --low and --high "
           "to bound it)\n";
    return ExitCode::usage_error;
  }
  if (args.exec.summary) {
    err << "oomharness budget: --summary is for run, exec and sweep: budget's runs are steps of a search, and "
           "budget.json holds its answer\n";
    return ExitCode::usage_error;
  }
  if (args.exec.reports.junit.size() + args.exec.reports.json.size() + args.exec.reports.html.size() +
          args.exec.reports.markdown.size() + args.exec.reports.perfetto.size() > 0) {
    err << "oomharness budget: the report flags are not for budget: each run writes its results under OUT/run-N, "
           "and the search OUT/budget.json\n";
    return ExitCode::usage_error;
  }
  Expected<double> low = parse_bytes(args.low);
  if (!low) {
    err << "oomharness budget: bad --low: " << low.error().str() << "\n";
    return ExitCode::usage_error;
  }
  Expected<double> tolerance = parse_bytes(args.tolerance);
  if (!tolerance || *tolerance < 1) {
    err << "oomharness budget: bad --tolerance: "
        << (tolerance ? "it must be at least 1 byte, like 1MiB" : tolerance.error().str()) << "\n";
    return ExitCode::usage_error;
  }
  std::optional<uint64_t> high;
  if (!args.high.empty()) {
    Expected<double> h = parse_bytes(args.high);
    if (!h || *h < 1) {
      err << "oomharness budget: bad --high: " << (h ? "it must be more than 0" : h.error().str()) << "\n";
      return ExitCode::usage_error;
    }
    high = static_cast<uint64_t>(*h);
    if (*high <= static_cast<uint64_t>(*low)) {
      err << "oomharness budget: --high " << args.high << " is not above --low " << args.low << "\n";
      return ExitCode::usage_error;
    }
  }
  // Note [Budget of a batch]: with `{batch}` in the command and --batch-under CAP, the search is over the
  // batch instead: the largest that completes under CAP, by bisection between 1 and --max-batch.
  bool placeholder = false;
  for (const auto& a : args.exec.command) placeholder = placeholder || a.find("{batch}") != std::string::npos;
  if (placeholder != !args.batch_under.empty()) {
    err << "oomharness budget: "
        << (placeholder ? "the command has {batch}: give --batch-under CAP, the cap the largest batch must fit under"
                        : "--batch-under needs {batch} in the command, where the batch size goes (--batch-size {batch})")
        << "\n";
    return ExitCode::usage_error;
  }
  std::optional<uint64_t> batch_cap;
  if (placeholder) {
    Expected<double> c = parse_bytes(args.batch_under);
    if (!c || *c < 1) {
      err << "oomharness budget: bad --batch-under: " << (c ? "it must be more than 0" : c.error().str()) << "\n";
      return ExitCode::usage_error;
    }
    batch_cap = static_cast<uint64_t>(*c);
  }
  // The job for one run: exec's flags, with the batch written into the command.
  auto make_job = [&](std::optional<int64_t> batch) -> std::optional<JobSpec> {
    ExecArgs e = args.exec;
    if (batch)
      for (auto& a : e.command)
        for (size_t at = a.find("{batch}"); at != std::string::npos; at = a.find("{batch}", at))
          a.replace(at, 7, std::to_string(*batch));
    std::optional<JobSpec> job = job_from_exec_args(e, "budget", err);
    if (job && job->expect.empty() && job->target_step)
      job->expect.push_back(parse_expect_spec("completes").value());
    return job;
  };
  std::optional<JobSpec> base = make_job(batch_cap ? std::optional<int64_t>(1) : std::nullopt);
  if (!base) return ExitCode::usage_error;
  if (base->expect.empty()) {
    err << "oomharness budget: say what completing means: --target-step N (the job must reach step N), or "
           "--expect checks\n";
    return ExitCode::usage_error;
  }

  BudgetResult result;
  result.job = base->name;
  result.command = base->argv;
  result.counting = base->memory.counts_footprint ? "footprint" : "allocations";
  result.simulated = args.exec.simulate;
  result.tolerance = static_cast<uint64_t>(*tolerance);
  result.low = static_cast<uint64_t>(*low);

  RunArgs run;
  run.simulate = args.exec.simulate;
  run.strict = args.exec.strict;
  run.command_line = args.exec.command_line;
  run.verbosity = -1;
  run.quiet_reports = true;
  auto run_at = [&](std::optional<uint64_t> cap, std::optional<int64_t> batch = std::nullopt) -> std::optional<BudgetRun> {
    std::optional<JobSpec> made = batch ? make_job(batch) : base;
    if (!made) return std::nullopt;
    JobSpec job = std::move(*made);
    job.memory.limit = cap;
    job.name = base->name + "-" + (cap ? "cap-" + std::to_string(*cap) : std::string("uncapped")) +
               (batch ? "-batch-" + std::to_string(*batch) : std::string());
    Suite suite;
    suite.name = "budget";
    suite.file = "<command line>";
    suite.dir = job.cwd.value_or(".");
    suite.jobs.push_back(std::move(job));
    RunCapture capture;
    RunArgs one = run;
    one.out_dir = (fs::path(args.exec.out_dir) / ("run-" + std::to_string(result.runs.size() + 1))).string();
    one.capture = &capture;
    ExitCode code = run_suites({suite}, one, out, err);
    if (code == ExitCode::interrupted || code == ExitCode::internal_error || code == ExitCode::usage_error ||
        capture.run.suites.empty() || capture.run.suites[0].jobs.empty())
      return std::nullopt;
    const JobResult& jr = capture.run.suites[0].jobs[0];
    result.virtual_device = result.virtual_device || jr.virtual_device.has_value();
    BudgetRun r;
    r.cap = cap;
    r.batch = batch;
    r.status = jr.status;
    r.completed = jr.status == JobStatus::passed;
    r.message = jr.message;
    r.peak = peak_of(jr);
    r.seconds = jr.duration;
    result.runs.push_back(r);
    return r;
  };

  if (batch_cap) {
    // Note [Budget of a batch]: batch 1 must complete; --max-batch + 1 is assumed not to.
    result.batch_cap = batch_cap;
    result.batch_limit = args.max_batch;
    result.run_bound = static_cast<int>(std::ceil(std::log2(static_cast<double>(args.max_batch)))) + 2;
    auto first = run_at(batch_cap, 1);
    if (!first) return ExitCode::internal_error;
    int64_t lo = 0, hi = args.max_batch + 1;
    if (first->completed) lo = 1;
    else hi = 1;
    while (hi - lo > 1) {
      int64_t mid = lo + (hi - lo) / 2;
      auto r = run_at(batch_cap, mid);
      if (!r) return ExitCode::internal_error;
      if (r->completed) lo = mid;
      else hi = mid;
    }
    if (lo >= 1) result.batch = lo;
    const std::string path = (fs::path(args.exec.out_dir) / "budget.json").string();
    auto written = write_file_atomic(path, render_budget_json(result));
    if (!written) err << "oomharness: " << written.error() << "\n";
    out << "\n" << terminal_text(render_budget_text(result)) << "Budget: " << path << "\n";
    if (!written) return ExitCode::internal_error;
    return result.batch ? ExitCode::ok : ExitCode::tests_failed;
  }

  // Note [Budget bisection]: the first run finds (or checks) a cap that is enough.
  auto first = run_at(high);
  if (!first) return ExitCode::internal_error;
  if (!first->completed) {
    err << "oomharness budget: the job did not complete " << (high ? "under --high " + args.high : std::string("without a cap"))
        << ": " << terminal_text(first->message) << "\n";
    out << terminal_text(render_budget_text(result));
    return ExitCode::tests_failed;
  }
  uint64_t hi = high ? *high : first->peak;
  uint64_t lo = result.low;
  if (hi <= lo) {
    err << "oomharness budget: the uncapped run's peak (" << format_bytes(hi) << ") is not above --low "
        << args.low << ": nothing to search\n";
    return ExitCode::usage_error;
  }
  const double range = static_cast<double>(hi - lo);
  result.run_bound =
      static_cast<int>(std::ceil(std::log2(std::max(1.0, range / static_cast<double>(result.tolerance))))) + 2;
  result.need = hi;
  while (hi - lo > result.tolerance) {
    uint64_t mid = lo + (hi - lo) / 2;
    auto r = run_at(mid);
    if (!r) return ExitCode::internal_error;
    if (r->completed) hi = mid;
    else lo = mid;
  }
  result.need = hi;
  result.low = lo;

  const std::string path = (fs::path(args.exec.out_dir) / "budget.json").string();
  std::error_code ec;
  fs::create_directories(args.exec.out_dir, ec);
  auto written = write_file_atomic(path, render_budget_json(result));
  if (!written) err << "oomharness: " << written.error() << "\n";
  out << "\n" << terminal_text(render_budget_text(result)) << "Budget: " << path << "\n";
  return written ? ExitCode::ok : ExitCode::internal_error;
}

}  // namespace oomh::app
