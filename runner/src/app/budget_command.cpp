// `oomharness budget`: the smallest cap a job fits in, by bisection (docs/sweep.md).
//
// Note [Budget bisection]
// The first run measures: uncapped, its peak (as the cap counts: allocations, or the footprint) is a cap
// the job is known to need no more than; with --high, the first run checks that cap instead. --low is
// assumed too small and never run (a cap of 0 would mean no cap at all). Each further run is an ordinary
// job with `memory.limit` at the middle of the bounds: when it fits (its checks passed and the code met no
// OOM: Note [Fits means no OOM] in oomharness/policies/fit.h), the middle is the new high, else the new low; the search stops when high - low <= tolerance. So it makes 1 + ceil(log2((high -
// low) / tolerance)) runs, within issue 16's bound of ceil(log2(range / tolerance)) + 2. A job whose
// memory use depends on the cap (it reads mem_get_info and sizes its batch to it) makes the answer the
// smallest cap where that adaptation still fits, which is the question asked; a job that catches its OOM
// and halves its batch does not fit where it had to (issue 40).
//
// Note [Budget of a batch]
// With `{batch}` in the command and --batch-under CAP, every run is under CAP and the search is over the
// batch written into the command: batch 1 must fit (else no batch does), --max-batch + 1 is assumed not
// to, and bisection between them finds the largest that fits (completes with no OOM) in ceil(log2(max_batch))
// + 1 runs at most. It assumes what makes a batch size worth searching: a batch that fits, every smaller one fits too.

#include <cmath>
#include <filesystem>

#include "app/commands.h"
#include "app/search.h"
#include "oomharness/reports/budget.h"
#include "oomharness/reports/terminal_text.h"
#include "oomharness/reports/writers.h"
#include "oomharness/runner/cli_specs.h"
#include "oomharness/units.h"

namespace fs = std::filesystem;

namespace oomh::app {

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
  // Note [A search's runs] in search.h: each run alone, its progress said, its outcome in a search's words.
  Search search("budget", run, args.exec.out_dir, out, err);
  auto label = [](std::optional<uint64_t> cap, std::optional<int64_t> batch) {
    std::string s = batch ? "batch " + std::to_string(*batch) + " " : std::string();
    return s + (cap ? "under " + format_bytes(*cap) : std::string("without a cap"));
  };
  auto run_at = [&](std::optional<uint64_t> cap, std::optional<int64_t> batch, int left) -> std::optional<SearchRun> {
    std::optional<JobSpec> made = batch ? make_job(batch) : base;
    if (!made) return std::nullopt;
    JobSpec job = std::move(*made);
    job.memory.limit = cap;
    job.name = base->name + "-" + (cap ? "cap-" + std::to_string(*cap) : std::string("uncapped")) +
               (batch ? "-batch-" + std::to_string(*batch) : std::string());
    std::optional<SearchRun> r = search.run(std::move(job), label(cap, batch), left);
    if (!r || r->outcome == SearchOutcome::interrupted) return r;
    result.virtual_device = result.virtual_device || r->result.virtual_device.has_value();
    BudgetRun b;
    b.cap = cap;
    b.batch = batch;
    b.status = r->result.status;
    b.completed = r->completed();
    b.fits = r->fits();
    b.timed_out = r->outcome == SearchOutcome::timed_out;
    if (r->oom) {
      b.oom = oom_met_text(*r->oom);
      b.recovered = r->outcome == SearchOutcome::recovered;
      b.recovered_batch = r->oom->last_batch;
    }
    b.message = r->result.message;
    b.peak = r->peak();
    b.seconds = r->result.duration;
    result.runs.push_back(b);
    return r;
  };
  const std::string path = (fs::path(args.exec.out_dir) / "budget.json").string();
  // The answer (or, cut short, what was found so far) in budget.json and on the terminal.
  auto finish = [&](ExitCode code) {
    std::error_code ec;
    fs::create_directories(args.exec.out_dir, ec);
    auto written = write_file_atomic(path, render_budget_json(result));
    if (!written) err << "oomharness: " << written.error() << "\n";
    out << "\n" << terminal_text(render_budget_text(result)) << "Budget: " << path << "\n";
    return !written && code == ExitCode::ok ? ExitCode::internal_error : code;
  };
  // Note [A search's runs]: an interrupt stops the search with exit 2, a timeout with exit 1; both say what
  // was found so far.
  auto stopped = [&](const SearchRun& r, std::optional<uint64_t> cap, std::optional<int64_t> batch) {
    result.cut_short = search.cut_short(r, label(cap, batch));
    err << "oomharness budget: " << result.cut_short << "\n";
    return finish(r.outcome == SearchOutcome::interrupted ? ExitCode::interrupted : ExitCode::tests_failed);
  };
  auto stops = [](const SearchRun& r) {
    return r.outcome == SearchOutcome::interrupted || r.outcome == SearchOutcome::timed_out;
  };

  if (batch_cap) {
    // Note [Budget of a batch]: batch 1 must fit; --max-batch + 1 is assumed not to.
    result.batch_cap = batch_cap;
    result.batch_limit = args.max_batch;
    result.run_bound = static_cast<int>(std::ceil(std::log2(static_cast<double>(args.max_batch)))) + 2;
    int64_t lo = 0, hi = args.max_batch + 1;
    auto first = run_at(batch_cap, 1, bisection_runs_left(static_cast<double>(hi - 1), 1));
    if (!first) return ExitCode::internal_error;
    if (stops(*first)) return stopped(*first, batch_cap, 1);
    if (first->fits()) lo = 1;
    else hi = 1;
    while (hi - lo > 1) {
      int64_t mid = lo + (hi - lo) / 2;
      const int left = std::max(bisection_runs_left(static_cast<double>(mid - lo), 1),
                                bisection_runs_left(static_cast<double>(hi - mid), 1));
      auto r = run_at(batch_cap, mid, left);
      if (!r) return ExitCode::internal_error;
      if (lo >= 1) result.batch = lo;
      if (stops(*r)) return stopped(*r, batch_cap, mid);
      if (r->fits()) lo = mid;
      else hi = mid;
    }
    if (lo >= 1) result.batch = lo;
    return finish(result.batch ? ExitCode::ok : ExitCode::tests_failed);
  }

  // Note [Budget bisection]: the first run finds (or checks) a cap that is enough.
  auto first = run_at(high, std::nullopt, -1);
  if (!first) return ExitCode::internal_error;
  if (stops(*first)) return stopped(*first, high, std::nullopt);
  if (!first->fits()) {
    err << "oomharness budget: the job did not " << (first->completed() ? "fit " : "complete ")
        << (high ? "under --high " + args.high : std::string("without a cap")) << ": " << first->outcome_text() << "\n";
    out << terminal_text(render_budget_text(result));
    return ExitCode::tests_failed;
  }
  uint64_t hi = high ? *high : first->peak();
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
    const double tol = static_cast<double>(result.tolerance);
    const int left = std::max(bisection_runs_left(static_cast<double>(mid - lo), tol),
                              bisection_runs_left(static_cast<double>(hi - mid), tol));
    auto r = run_at(mid, std::nullopt, left);
    if (!r) return ExitCode::internal_error;
    if (stops(*r)) {
      result.need = hi;
      result.low = lo;
      return stopped(*r, mid, std::nullopt);
    }
    if (r->fits()) hi = mid;
    else lo = mid;
  }
  result.need = hi;
  result.low = lo;
  return finish(ExitCode::ok);
}

}  // namespace oomh::app
