// `oomharness run`, `exec` and `demo`: load, choose, run, judge, report.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string_view>

#include "app/commands.h"
#include "app/sweep_plan.h"
#include "app/interrupts.h"
#include "app/paths.h"
#include "app/run_state.h"
#include "app/spec_text.h"
#include "exec/cpu_share.h"
#include "exec/run_folder.h"
#include "exec/signals.h"
#include "suite/fault_rule.h"
#include "suite/job_fields.h"
#include "suite/job_table.h"
#include "suite/limits.h"
#include "oomharness/policies/registry.h"
#include "oomharness/reports/terminal_text.h"
#include "oomharness/reports/writers.h"
#include "oomharness/runner/backend.h"
#include "oomharness/runner/cli_specs.h"
#include "oomharness/runner/environment.h"
#include "oomharness/runner/job_runner.h"
#include "oomharness/runner/name_tables.h"
#include "oomharness/runner/results_builder.h"
#include "oomharness/runner/terminal.h"
#include "oomharness/runner/untested.h"
#include "oomharness/events.h"
#include "oomharness/units.h"
#include "oomharness/version.h"

namespace fs = std::filesystem;

namespace oomh::app {

namespace {

bool uses_python(const JobSpec& job) {
  if (job.probe == ProbeMode::python) return true;
  for (const auto& a : job.argv)
    if (a.find("python") != std::string::npos) return true;
  return false;
}

std::optional<std::vector<int>> parse_gpus(const std::string& text) {
  std::vector<int> out;
  if (text.empty()) return out;
  for (const auto& item : split_items(text)) {
    auto n = parse_integer(item);
    if (!n || *n < 0 || *n > 1024) return std::nullopt;
    out.push_back(static_cast<int>(*n));
  }
  return out;
}

std::vector<Verdict> judge(const JobSpec& job, const Trace& trace) {
  std::vector<Verdict> verdicts;
  for (const auto& e : job.expect) {
    const PolicyInfo* policy = find_policy(e.policy);
    if (!policy) {  // the suite loader checks names; this is a harness bug
      Verdict v;
      v.policy = e.policy;
      v.args = e.args;
      v.reason = "unknown policy '" + e.policy + "' (the harness did not check this suite)";
      verdicts.push_back(std::move(v));
      continue;
    }
    try {
      verdicts.push_back(evaluate(*policy, trace, e.args));
      verdicts.back().must_fail = e.must_fail;
    } catch (const std::exception& ex) {
      Verdict v;
      v.policy = e.policy;
      v.args = e.args;
      v.reason = std::string("the check could not be evaluated (internal error: ") + ex.what() + ")";
      verdicts.push_back(std::move(v));
    }
  }
  return verdicts;
}

bool write_report(const std::string& path, const std::string& content, std::ostream& err) {
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  auto w = write_file_atomic(path, content);
  if (!w) err << "oomharness: " << w.error() << "\n";
  return w.ok();
}

// Note [Results as they come] (reports/writers.h): <out>/jobs.jsonl, appended one line per write. A
// write that fails is said once on stderr; the run goes on and results.json is still written at the end.
class JobStream {
 public:
  // `name` in the run folder `dir` (Note [A run folder the runner owns] in exec/run_folder.h).
  JobStream(int dir, const std::string& name, const std::string& path, std::ostream& err) : path_(path), err_(err) {
    fd_ = exec::create_file_at(dir, name);
    if (fd_ < 0) fail(errno);
  }
  ~JobStream() {
    if (fd_ >= 0) ::close(fd_);
  }
  JobStream(const JobStream&) = delete;
  JobStream& operator=(const JobStream&) = delete;
  void write(const std::string& line) {
    if (fd_ < 0) return;
    if (exec::removed(fd_)) restore();
    errno = 0;
    if (!write_all(fd_, line)) fail(errno != 0 ? errno : EIO);
  }

 private:
  // Note [A run folder removed during the run] in exec/run_folder.h: the file (or the whole folder) was
  // removed, by a job: made again, with what the open, unlinked file still holds.
  void restore() {
    const fs::path path(path_);
    const exec::DirFd dir = exec::open_user_dir(path.parent_path().string());
    const int fresh = dir ? exec::create_file_at(dir.get(), path.filename().string()) : -1;
    if (fresh < 0 || !exec::copy_file_contents(fd_, fresh)) {
      if (fresh >= 0) ::close(fresh);
      return fail(errno != 0 ? errno : EIO);
    }
    ::close(fd_);
    fd_ = fresh;
    err_ << "oomharness: " << path_ << " was removed during the run (by a job?); written again from what the runner held\n";
  }
  void fail(int error) {
    err_ << "oomharness: cannot write " << path_ << ": " << std::strerror(error)
         << " (results.json is still written at the end)\n";
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  std::string path_;
  std::ostream& err_;
  int fd_ = -1;
};

// Note [Signals a job may send] in exec/signals.h: those the runner could not put in a job's result.
void say_stray_signals(std::ostream& err) {
  std::vector<exec::StraySignal> left = exec::take_set_aside();
  for (const exec::StraySignal& s : exec::take_stray_signals()) left.push_back(s);
  for (const exec::StraySignal& s : left)
    err << "oomharness: received " << exec::signal_name(s.signo)
        << (s.pid > 0 ? " from pid " + std::to_string(s.pid) + " (not a running job)" : std::string(" from the kernel"))
        << "; ignored it\n";
  if (size_t dropped = exec::stray_signals_dropped())
    err << "oomharness: " << dropped << " more signals were received and ignored\n";
}

// Writes results.json and report.html into the output folder, and each report asked for.
// Returns false when one could not be written (each failure was printed).
// The two in the output folder go through its descriptor `out_fd` (Note [A run folder the runner owns] in
// exec/run_folder.h: a link a job planted there is replaced, not followed); those asked for by flag are the
// user's paths.
bool write_reports(const RunResult& run, const std::string& out_dir, int out_fd, const ReportFlags& flags,
                   std::string& html_path, std::ostream& err) {
  bool ok = true;
  std::string json = render_json(run);
  auto in_folder = [&](const std::string& name, const std::string& content) {
    auto w = write_file_atomic_at(out_fd, name, content, (fs::path(out_dir) / name).string());
    if (!w) err << "oomharness: " << w.error() << "\n";
    return w.ok();
  };
  ok &= in_folder("results.json", json);
  html_path = (fs::path(out_dir) / "report.html").string();
  ok &= in_folder("report.html", render_html(run, HtmlOptions{out_dir}));
  if (!flags.json.empty()) ok &= write_report(flags.json, json, err);
  if (!flags.html.empty()) {
    std::string dir = fs::path(flags.html).parent_path().string();
    ok &= write_report(flags.html, render_html(run, HtmlOptions{dir.empty() ? "." : dir}), err);
  }
  if (!flags.junit.empty()) ok &= write_report(flags.junit, render_junit(run), err);
  if (!flags.markdown.empty()) ok &= write_report(flags.markdown, render_markdown(run), err);
  if (!flags.perfetto.empty()) ok &= write_report(flags.perfetto, render_perfetto(run), err);
  return ok;
}

// --summary: GitHub shows $GITHUB_STEP_SUMMARY under the job; appending is how several steps share it.
void append_step_summary(const RunResult& run, std::ostream& out, std::ostream& err) {
  const char* path = std::getenv("GITHUB_STEP_SUMMARY");
  if (!path || !*path) {
    out << "--summary: GITHUB_STEP_SUMMARY is not set (not on GitHub Actions); no summary written\n";
    return;
  }
  std::ofstream f(path, std::ios::app);
  f << render_markdown(run) << "\n";
  if (!f) err << "oomharness: could not append to $GITHUB_STEP_SUMMARY (" << path << "): " << std::strerror(errno) << "\n";
}

// The torch version a job's probe (probe_start) or virtual device reported, or "" (Note [Torch's version
// from the jobs]).
std::string torch_version_reported(const Trace& trace) {
  for (const Attempt& a : trace.attempts)
    for (const Event& e : a.events) {
      if (e.src != events::kSrcProbe) continue;
      if (e.kind == events::kProbeStart && e.has("version") && e.text("version") != "") return e.text("version");
      if (e.kind == events::kVirtualDevice && e.has("torch") && e.text("torch") != "") return e.text("torch");
    }
  return "";
}

// What --maxfail counts, --lf reruns and GitHub gets an annotation for: pytest's failures and errors.
bool failed_or_erred(JobStatus s) { return s == JobStatus::failed || s == JobStatus::error; }

// --lf, as pytest's: keep the jobs that failed, erred or were left unfinished by an interrupt, as the run
// state of this suite set remembers them (Note [Run state] in run_state.h); when there are none, every job
// runs (saying so). Returns an exit code when nothing should run.
std::optional<ExitCode> keep_last_failed(std::vector<Suite>& suites, std::ostream& out, std::ostream& err) {
  RunState state = load_run_state(suites);
  if (!state.problem.empty()) {
    err << "oomharness: --lf: " << state.problem << "\n";
    return ExitCode::usage_error;
  }
  if (!state.found) {
    out << "--lf: no previous run of these suites in " << state.path << ": running every selected job\n";
    return std::nullopt;
  }
  size_t failed = 0, unrun = 0;
  for (const auto& [name, memory] : state.jobs) (memory == JobMemory::failed ? failed : unrun) += 1;
  if (state.jobs.empty()) {
    out << "--lf: no job failed or erred in the last runs of these suites (" << state.path
        << "): running every selected job\n";
    return std::nullopt;
  }
  size_t kept = 0;
  for (auto& s : suites) {
    std::vector<JobSpec> chosen;
    for (auto& job : s.jobs)
      if (state.jobs.count(s.name + "::" + job.name)) chosen.push_back(std::move(job));
    kept += chosen.size();
    s.jobs = std::move(chosen);
  }
  std::string what = std::to_string(failed) + (failed == 1 ? " job" : " jobs") + " that failed or erred";
  if (unrun > 0) what += " and " + std::to_string(unrun) + (unrun == 1 ? " job" : " jobs") + " an interrupted run did not finish";
  if (kept == 0) {
    err << "oomharness: --lf: none of the " << what << " (" << state.jobs.begin()->first
        << (state.jobs.size() > 1 ? ", ..." : "") << ") is among the selected jobs: nothing was tested\n";
    return ExitCode::nothing_tested;
  }
  out << "--lf: rerunning " << kept << " of the " << what << " in the last runs of these suites (" << state.path
      << ")\n";
  return std::nullopt;
}

// --collect-only, as pytest's: the jobs `run` would run, after -k and --lf, one per line; exit 0, or 5 when
// none is selected.
ExitCode print_collected(const std::vector<Suite>& suites, std::ostream& out) {
  size_t n = 0;
  for (const auto& s : suites)
    for (const auto& job : s.jobs) {
      out << terminal_text(s.name + "::" + job.name);  // Note [Text for a terminal]
      if (job.sweep) out << "  (a sweep: its faulted runs are planned from a golden run when it runs)";
      out << "\n";
      ++n;
    }
  out << n << (n == 1 ? " job" : " jobs") << " collected\n";
  return n == 0 ? ExitCode::nothing_tested : ExitCode::ok;
}

// In GitHub Actions, an error annotation per failed or erred job on its suite file and line (the job's
// entry), so that the pull request shows it where the job is written.
void print_github_annotations(const RunResult& run, const std::vector<Suite>& suites, std::ostream& out) {
  for (size_t s = 0; s < run.suites.size() && s < suites.size(); ++s)
    for (size_t j = 0; j < run.suites[s].jobs.size() && j < suites[s].jobs.size(); ++j) {
      const JobResult& job = run.suites[s].jobs[j];
      if (!failed_or_erred(job.status)) continue;
      const SourceLocation& where = suites[s].jobs[j].where;
      const bool in_file = where.line > 0 && where.file.rfind("<", 0) != 0;
      const std::string name = run.suites[s].name + "::" + job.name;
      const std::string word = job.status == JobStatus::failed ? "failed" : "erred";
      out << github_error_annotation(in_file ? where.file : "", in_file ? where.line : 0, name + " " + word,
                                     name + " " + word + ": " + terminal_text(job.message))
          << "\n";
    }
}

}  // namespace

namespace {

// The steps of run_suites, in the order it takes them. Each step that can refuse the run says why on `err`
// and gives the exit code; the others cannot fail.

// --gpus, --jobs and --threads-per-job into the runner's options.
std::optional<ExitCode> read_runner_flags(const RunArgs& args, RunOptions& options, std::ostream& err) {
  auto gpus = parse_gpus(args.gpus);
  if (!gpus) {
    err << "oomharness: bad --gpus '" << args.gpus << "': write GPU indices separated by commas, like 0,1,3\n";
    return ExitCode::usage_error;
  }
  if (args.jobs < 1) {
    err << "oomharness: bad --jobs " << args.jobs << ": at least 1\n";
    return ExitCode::usage_error;
  }
  auto threads = exec::parse_threads_per_job(args.threads_per_job);
  if (!threads) {
    err << "oomharness: bad --threads-per-job '" << args.threads_per_job << "': auto, off or a number of threads\n";
    return ExitCode::usage_error;
  }
  options.jobs = args.jobs;
  options.threads_per_job = *threads;
  options.gpus = *gpus;
  return std::nullopt;
}

// --backend, else the suites' `backend:` (they must agree).
std::optional<ExitCode> choose_backend(const std::vector<Suite>& suites, const RunArgs& args, BackendKind& kind,
                                       std::ostream& err) {
  kind = BackendKind::local;
  if (args.backend) {
    kind = *args.backend;
    return std::nullopt;
  }
  std::optional<std::string> chosen;
  for (const auto& suite : suites)
    if (suite.backend) {
      if (chosen && *chosen != *suite.backend) {
        err << "oomharness: the suites ask for different backends (" << *chosen << ", " << *suite.backend
            << "): choose one with --backend\n";
        return ExitCode::usage_error;
      }
      chosen = suite.backend;
    }
  if (chosen) kind = *backend_from_name(*chosen);
  return std::nullopt;
}

// Where each job's CUDA work runs, decided once (DeviceChoice): --device for every job, else the job's own
// choice, and `auto` means the virtual device for Python jobs under --simulate. True when some job runs on
// the virtual device.
bool choose_devices(std::vector<Suite>& suites, const RunArgs& args) {
  bool any_virtual = false;
  for (auto& suite : suites)
    for (auto& job : suite.jobs) {
      if (args.device) job.device = *args.device;
      if (job.device == DeviceChoice::automatic)
        job.device = args.simulate && uses_python(job) ? DeviceChoice::virtual_device : DeviceChoice::gpu;
      any_virtual = any_virtual || job.device == DeviceChoice::virtual_device;
    }
  return any_virtual;
}

// The run folder, as an absolute path (jobs run in their suite's folder or their own `cwd`: every path
// they are told, event log, {workdir}, the probe's files, must be absolute, whatever folder --out names and
// whichever the runner runs in), and opened: Note [A run folder the runner owns] in exec/run_folder.h, the
// folder itself is the user's; what the runner writes in it goes through this descriptor.
std::optional<ExitCode> open_run_folder(const RunArgs& args, std::string& out_dir, exec::DirFd& out_fd, std::ostream& err) {
  std::error_code ec;
  out_dir = fs::absolute(args.out_dir, ec).lexically_normal().string();
  if (!ec) {
    out_fd = exec::open_user_dir(out_dir);
    if (!out_fd) ec = std::error_code(errno, std::generic_category());
  }
  if (ec) {
    err << "oomharness: cannot create the output folder " << args.out_dir << ": " << ec.message() << "\n";
    return ExitCode::usage_error;
  }
  return std::nullopt;
}

// The runner sees one flat list; names carry their suite so that logs and progress lines stay apart.
struct FlatJobs {
  std::vector<JobSpec> jobs;
  std::vector<std::pair<size_t, size_t>> origin;  // (suite, job) of each runner job
  std::vector<std::string> names;
};

FlatJobs flatten(const std::vector<Suite>& suites) {
  FlatJobs flat;
  for (size_t s = 0; s < suites.size(); ++s)
    for (size_t j = 0; j < suites[s].jobs.size(); ++j) {
      JobSpec job = suites[s].jobs[j];
      job.name = suites[s].name + "::" + job.name;
      flat.names.push_back(job.name);
      flat.jobs.push_back(std::move(job));
      flat.origin.emplace_back(s, j);
    }
  return flat;
}

// Note [Torch's version from the jobs]
// The results name the torch the jobs ran. A job under the probe or on the virtual device says it itself
// (its probe_start or virtual_device event), and that is the torch of the Python the job really ran, not
// of whichever `python3` is first on PATH. Asking `python3 -c 'import torch'` costs a whole import of
// torch (2 s of CPU for a CPU build, 3-10 s for a CUDA one on the 2-core CI machine): beside a short job
// it doubled the job's time, and the run waited for it at the end (issue 29: a trivial script took 5.5 s
// under `exec` against 1.9 s bare). So python3 is asked only when some Python job runs without the probe.
bool python_unprobed(const std::vector<JobSpec>& jobs) {
  for (const JobSpec& job : jobs)
    if (uses_python(job) && job.probe == ProbeMode::none && job.device != DeviceChoice::virtual_device) return true;
  return false;
}

// Judges one job as it finishes (so that --maxfail can count failures while the run goes).
class JobJudge {
 public:
  JobJudge(const std::vector<Suite>& suites, const FlatJobs& flat, const RunArgs& args, bool gpu_found)
      : suites_(suites), flat_(flat), args_(args), gpu_found_(gpu_found) {}

  JobResult operator()(size_t i, JobOutcome& o) const {
    auto [s, j] = flat_.origin[i];
    const JobSpec& spec = suites_[s].jobs[j];
    o.trace.simulated_device = args_.simulate;
    if (!o.trace.target_step) o.trace.target_step = spec.target_step;
    o.trace.step_base = spec.step_base;
    if (o.not_started) return skipped(spec);
    // Note [Green means tested]: a job the harness cannot show it tested is never judged a pass.
    StatusRules rules;
    rules.strict = args_.strict;
    if (o.error.empty() && !o.interrupted) {
      if (auto untested = why_untested(spec, o.trace, gpu_found_)) {
        if (untested->status == JobStatus::error) o.error = untested->message;
        else rules.inconclusive = untested->message;
      }
    }
    std::vector<Verdict> verdicts;
    // An interrupted job's trace stops mid-way: judging it would report failures it never had.
    if (o.error.empty() && !o.interrupted) verdicts = judge(spec, o.trace);
    return build_job_result(spec.name, o, std::move(verdicts), rules);
  }

 private:
  JobResult skipped(const JobSpec& spec) const {
    JobResult jr;
    jr.name = spec.name;
    jr.status = JobStatus::skipped;
    jr.message = "not run: " + std::to_string(args_.maxfail) + (args_.maxfail == 1 ? " job" : " jobs") +
                 " failed or erred before its turn (" +
                 (args_.maxfail == 1 ? std::string("-x") : "--maxfail " + std::to_string(args_.maxfail)) + ")";
    return jr;
  }

  const std::vector<Suite>& suites_;
  const FlatJobs& flat_;
  const RunArgs& args_;
  bool gpu_found_;
};

// Note [Backends]: here the jobs leave for this machine's job runner or for a Slurm cluster.
std::unique_ptr<Backend> make_backend(BackendKind kind, RunOptions options, const RunArgs& args, const std::string& out_dir) {
  if (kind != BackendKind::slurm) return make_local_backend(std::move(options));
  SlurmOptions slurm = args.slurm;
  slurm.simulate = args.simulate;
  slurm.work_dir = (fs::path(out_dir) / "slurm").string();
  return make_slurm_backend(std::move(options), std::move(slurm));
}

// What the backend brought back, and the judged results of the jobs that finished.
struct RunOutcome {
  std::vector<JobOutcome> outcomes;
  std::vector<std::optional<JobResult>> judged;
  std::string torch_reported;  // the first version a job's probe or virtual device reported
  bool interrupted = false;
};

// Runs the jobs with progress on `out`; each finished job is judged at once and streamed to jobs.jsonl.
std::optional<ExitCode> run_jobs(const std::vector<Suite>& suites, const FlatJobs& flat, const RunArgs& args,
                                 const JobJudge& judge_job, BackendKind kind, RunOptions options, const std::string& out_dir,
                                 const TerminalStyle& style, JobStream& stream, RunOutcome& ran, std::ostream& out,
                                 std::ostream& err) {
  ran.judged.assign(flat.jobs.size(), std::nullopt);
  ProgressView view(out, style, flat.names);
  int failures = 0;
  options.on_progress = [&view](const JobProgress& p) { view.on_progress(p); };
  Backend* running = nullptr;
  options.on_job_done = [&](size_t i, JobOutcome& done) {
    if (ran.torch_reported.empty()) ran.torch_reported = torch_version_reported(done.trace);  // Note [Torch's version from the jobs]
    ran.judged[i] = judge_job(i, done);
    if (!done.not_started) {
      SuiteResult suite;
      suite.name = suites[flat.origin[i].first].name;
      suite.file = suites[flat.origin[i].first].file;
      stream.write(job_stream_line(suite, *ran.judged[i]));
    }
    // Note [Constant cost per job]: once judged, a job's trace is not kept until the run ends; its result
    // holds what the reports show, each part bounded. A caller that captures the run (sweep's golden run
    // reads its trace) keeps the outcomes whole.
    if (!args.capture || !args.capture->keep_traces) {
      done.trace.attempts.clear();
      done.trace.attempts.shrink_to_fit();
      done.trace.reference.clear();
      done.trace.reference.shrink_to_fit();
    }
    if (!done.not_started) view.on_job_done(i);
    if (!done.not_started && args.on_result)
      if (std::string line = args.on_result(i, *ran.judged[i]); !line.empty()) view.say(line);
    if (args.maxfail > 0 && failed_or_erred(ran.judged[i]->status) && ++failures == args.maxfail && running)
      running->stop_starting();
  };
  std::unique_ptr<Backend> backend = make_backend(kind, std::move(options), args, out_dir);
  if (auto problem = backend->check()) {
    err << "oomharness: " << *problem << "\n";
    return ExitCode::internal_error;
  }
  running = backend.get();
  InterruptHandlers handlers(*backend);
  ran.outcomes = backend->run(flat.jobs);
  ran.interrupted = backend->interrupted() || InterruptHandlers::signalled();
  view.finish();
  return std::nullopt;
}

// The judged jobs into their suites (a job the runner did not hand to on_job_done is judged here), and each
// suite's start and duration from its jobs'.
void gather_suites(RunResult& run, const std::vector<Suite>& suites, const FlatJobs& flat, const JobJudge& judge_job,
                   RunOutcome& ran) {
  for (auto& suite : suites) {
    SuiteResult sr;
    sr.name = suite.name;
    sr.file = suite.file;
    run.suites.push_back(std::move(sr));
  }
  for (size_t i = 0; i < ran.outcomes.size() && i < flat.jobs.size(); ++i) {
    const size_t s = flat.origin[i].first;
    run.suites[s].jobs.push_back(ran.judged[i] ? std::move(*ran.judged[i]) : judge_job(i, ran.outcomes[i]));
    const JobResult& built = run.suites[s].jobs.back();
    if (built.virtual_device && run.environment.virtual_device.empty())
      run.environment.virtual_device = *built.virtual_device;
  }
  for (auto& sr : run.suites) {
    double first = 0, last = 0;
    for (const auto& jr : sr.jobs) {
      if (jr.start > 0 && (first == 0 || jr.start < first)) first = jr.start;
      last = std::max(last, jr.start + jr.duration);
    }
    sr.start = first;
    sr.duration = last > first ? last - first : 0;
  }
}

// The run state (--lf), the reports, the summary on `out`, and the exit code.
ExitCode report_run(const RunResult& run, const std::vector<Suite>& suites, const RunArgs& args, const std::string& out_dir,
                    exec::DirFd& out_fd, const TerminalStyle& style, std::ostream& out, std::ostream& err) {
  // Note [A run folder removed during the run] in exec/run_folder.h: what the run knows is written anyway.
  if (exec::removed(out_fd.get())) {
    out_fd = exec::open_user_dir(out_dir);
    err << "oomharness: the output folder " << out_dir << " was removed during the run (by a job?); "
        << (out_fd ? "made it again for the results" : "it could not be made again: " + std::string(std::strerror(errno))) << "\n";
  }
  // Note [Run state] in run_state.h: before the reports, so that a report that cannot be written costs no memory.
  if (args.keep_state)
    if (auto problem = record_run_state(suites, run)) err << "oomharness: the run state (--lf) was not saved: " << *problem << "\n";
  std::string html;
  bool written = write_reports(run, out_dir, out_fd.get(), args.reports, html, err);
  if (args.summary) append_step_summary(run, out, err);
  if (!args.quiet_reports) {
    out << "\n" << summary_table(run, style.color, args.verbosity);
    if (const char* gha = std::getenv("GITHUB_ACTIONS"); gha && std::string(gha) == "true")
      print_github_annotations(run, suites, out);
    out << "Results: " << (fs::path(out_dir) / "results.json").string() << "\n";
    out << "HTML report: " << html << "\n";
  }
  out.flush();
  ExitCode code = run_exit_code(run);
  if (code == ExitCode::interrupted) return code;
  if (!written) return ExitCode::internal_error;
  return code;
}

}  // namespace

ExitCode run_suites(std::vector<Suite> suites, const RunArgs& args, std::ostream& out, std::ostream& err) {
  RunOptions options;
  if (auto refused = read_runner_flags(args, options, err)) return *refused;
  BackendKind backend_kind = BackendKind::local;
  if (auto refused = choose_backend(suites, args, backend_kind, err)) return *refused;
  // Note [Ranks on several nodes] in runner/src/exec/node_group.h: only Slurm has several nodes.
  if (backend_kind != BackendKind::slurm)
    for (const Suite& suite : suites)
      for (const JobSpec& job : suite.jobs)
        if (job.nodes > 1) {
          err << "oomharness: job '" << job.name << "' asks for nodes: " << job.nodes
              << ", and only the Slurm backend runs a job on several nodes (--backend slurm; docs/slurm.md); "
                 "locally, give it ranks: "
              << job.ranks << " on this machine\n";
          return ExitCode::usage_error;
        }
  // The machine's GPUs, asked once: the packer packs onto them and the results name the first.
  std::optional<exec::GpuSurvey> survey = args.simulate ? std::nullopt : args.surveyed ? args.surveyed : exec::survey_gpus();
  options.gpu_inventory = survey ? survey->gpus : std::vector<GpuInfo>{};
  const bool any_virtual = choose_devices(suites, args);
  if (auto missing = resolve_paths(args.simulate, options.paths, any_virtual)) {
    err << "oomharness: " << *missing << "\n";
    return ExitCode::internal_error;
  }
  std::string out_dir;
  exec::DirFd out_fd;
  if (auto refused = open_run_folder(args, out_dir, out_fd, err)) return *refused;
  options.out_dir = (fs::path(out_dir) / "jobs").string();
  const FlatJobs flat = flatten(suites);

  EnvironmentOptions env_options{args.simulate, python_unprobed(flat.jobs), args.command_line, std::nullopt};
  if (survey) env_options.gpu = GpuIdentity{survey->name, survey->driver_version, survey->cuda_version};
  RunResult run;
  // The environment's versions are for the results only: asked beside the jobs, not before them (on the
  // H100 it held a packed run of eight small jobs back by about 4 s, a third of their time).
  std::future<Environment> environment = std::async(std::launch::async, detect_environment, env_options);
  run.start = events::now_seconds();

  TerminalStyle style = detect_terminal_style();
  style.verbosity = args.verbosity;
  const std::string device = device_name(env_options);
  if (args.banner) {
    out << "oomharness " << kVersion << ": " << flat.jobs.size() << (flat.jobs.size() == 1 ? " job" : " jobs") << " from "
        << suites.size() << (suites.size() == 1 ? " suite" : " suites") << " on " << (device.empty() ? "no GPU found" : device) << "\n";
    out.flush();
  }

  const JobJudge judge_job(suites, flat, args, survey.has_value() && !survey->gpus.empty());
  // Note [Results as they come]: each judged job goes to jobs.jsonl at once; a killed runner loses none.
  JobStream stream(out_fd.get(), "jobs.jsonl", (fs::path(out_dir) / "jobs.jsonl").string(), err);
  run.environment.command_line = args.command_line;
  run.environment.harness_version = kVersion;
  stream.write(job_stream_header(run));

  RunOutcome ran;
  if (auto refused = run_jobs(suites, flat, args, judge_job, backend_kind, std::move(options), out_dir, style, stream, ran, out, err))
    return *refused;
  say_stray_signals(err);
  run.interrupted = ran.interrupted;
  run.duration = events::now_seconds() - run.start;
  stream.write(job_stream_end(run));
  run.environment = environment.get();
  if (!ran.torch_reported.empty()) run.environment.frameworks["torch"] = ran.torch_reported;
  gather_suites(run, suites, flat, judge_job, ran);

  ExitCode code = report_run(run, suites, args, out_dir, out_fd, style, out, err);
  if (args.capture) {
    args.capture->run = run;
    args.capture->outcomes = std::move(ran.outcomes);
  }
  return code;
}

namespace {

// Note [A suite's sweeps]
// `run` sweeps each chosen job that has a `sweep:` block, as `oomharness sweep SUITE -k JOB` would
// (docs/sweep.md): every such job is checked first (nothing runs when one is wrong), then each golden run
// goes (OUT/sweeps/SUITE/JOB/golden), then the faulted runs take the job's place among the suite's jobs, so
// they run beside the other jobs (packed by --jobs) and are in results.json, report.html and the JUnit
// report (one test case per site and mode), and last each coverage is written (OUT/sweeps/SUITE/JOB/
// sweep.json, sweep.html) and printed. A sweep that could not be planned (its golden run did not pass, no
// call was recorded) leaves its job untested: said on stderr, and the run cannot exit 0.
ExitCode run_with_sweeps(std::vector<Suite> suites, const RunArgs& given, std::ostream& out, std::ostream& err) {
  struct Planned {
    size_t suite = 0, job = 0;
    std::string who, dir;
    std::string relative;  // dir under the output folder: sweeps/SUITE/JOB
    SweepSetup setup;
    std::optional<PreparedSweep> prepared;
  };
  std::vector<Planned> sweeps;
  for (size_t s = 0; s < suites.size(); ++s)
    for (size_t j = 0; j < suites[s].jobs.size(); ++j) {
      const JobSpec& job = suites[s].jobs[j];
      if (!job.sweep) continue;
      Planned p;
      p.suite = s;
      p.job = j;
      p.who = "oomharness: " + suites[s].name + "::" + job.name + "'s sweep";
      p.relative = "sweeps/" + job_dir_name(suites[s].name) + "/" + job_dir_name(job.name);
      p.dir = (fs::path(given.out_dir) / p.relative).string();
      if (auto problem = setup_sweep(job, {}, suites[s].dir, p.who, p.setup, err)) {
        err << "oomharness: no job was run\n";
        return *problem;
      }
      sweeps.push_back(std::move(p));
    }
  if (sweeps.empty()) return run_suites(std::move(suites), given, out, err);

  ExitCode unswept = ExitCode::ok;
  for (auto& p : sweeps) {
    PreparedSweep prepared;
    // The golden run's folder is made as the runner's (Note [A run folder the runner owns]): a link an earlier
    // golden job planted on the way to it is replaced before this run follows the path.
    if (const exec::DirFd top = exec::open_user_dir(given.out_dir); top) exec::open_owned_dir(top.get(), p.relative + "/golden");
    auto problem = prepare_sweep(p.setup, given, (fs::path(p.dir) / "golden").string(), given.jobs, p.who, prepared, out, err);
    if (problem && (*problem == ExitCode::interrupted || *problem == ExitCode::internal_error ||
                    *problem == ExitCode::usage_error))
      return *problem;
    if (problem) {
      err << p.who << ": its job is not run: nothing of it was tested\n";
      if (unswept != ExitCode::tests_failed) unswept = *problem;
      continue;
    }
    p.prepared = std::move(prepared);
  }
  out << "\n";
  // The faulted runs in place of their job; a job whose sweep could not be planned is left out.
  std::vector<std::vector<JobSpec>> jobs(suites.size());
  for (size_t s = 0; s < suites.size(); ++s)
    for (size_t j = 0; j < suites[s].jobs.size(); ++j) {
      auto p = std::find_if(sweeps.begin(), sweeps.end(), [&](const Planned& x) { return x.suite == s && x.job == j; });
      if (p == sweeps.end()) jobs[s].push_back(std::move(suites[s].jobs[j]));
      else if (p->prepared) jobs[s].insert(jobs[s].end(), p->prepared->jobs.begin(), p->prepared->jobs.end());
    }
  for (size_t s = 0; s < suites.size(); ++s) suites[s].jobs = std::move(jobs[s]);

  RunArgs args = given;
  RunCapture capture;
  capture.keep_traces = false;
  if (!args.capture) args.capture = &capture;
  ExitCode code = run_suites(std::move(suites), args, out, err);
  const RunResult& run = args.capture->run;
  bool written = true;
  // Note [A run folder the runner owns] in exec/run_folder.h: OUT/sweeps/SUITE/JOB is the runner's.
  const exec::DirFd top = exec::open_user_dir(given.out_dir);
  for (const auto& p : sweeps) {
    if (!p.prepared || p.suite >= run.suites.size()) continue;
    SweepResult sweep = sweep_coverage(*p.prepared, run.suites[p.suite].jobs, run.suites[p.suite].duration, args.jobs,
                                       args.simulate);
    const exec::DirFd folder = top ? exec::open_owned_dir(top.get(), p.relative) : exec::DirFd();
    if (!folder) {
      err << "oomharness: cannot create " << p.dir << ": " << std::strerror(errno) << "\n";
      written = false;
      continue;
    }
    written &= write_sweep(sweep, p.dir, "../../../report.html", out, err, folder.get());
  }
  if (code == ExitCode::interrupted || code == ExitCode::internal_error || code == ExitCode::usage_error) return code;
  if (!written) return ExitCode::internal_error;
  if (unswept != ExitCode::ok && (code == ExitCode::ok || code == ExitCode::nothing_tested)) return unswept;
  return code;
}

}  // namespace

ExitCode command_run(const RunArgs& args, std::ostream& out, std::ostream& err) {
  std::vector<Suite> suites;
  bool bad = false;
  for (const auto& file : args.suites) {
    auto load = load_suite(file, SuiteLimits{args.max_jobs});
    if (!load) {
      for (const auto& e : load.error()) err << e.str() << "\n";
      bad = true;
      continue;
    }
    suites.push_back(std::move(load).value());
  }
  if (bad) {
    err << "oomharness: no job was run: fix the suite errors above\n";
    return ExitCode::usage_error;
  }
  // Suites named alike (the same file twice, or two files with one name) stay apart in the results.
  std::set<std::string> seen;
  for (auto& s : suites) {
    std::string base = s.name;
    for (int n = 2; !seen.insert(s.name).second; ++n) s.name = base + "#" + std::to_string(n);
  }

  if (!args.filters.empty()) {
    std::vector<JobFilter> filters;
    for (const auto& k : args.filters) {
      auto f = JobFilter::parse(k);
      if (!f) {
        err << "oomharness: " << f.error() << "\n";
        return ExitCode::usage_error;
      }
      filters.push_back(std::move(*f));
    }
    size_t kept = 0;
    for (auto& s : suites) {
      std::vector<JobSpec> chosen;
      for (auto& job : s.jobs) {
        bool match = false;
        for (const auto& f : filters) match = match || f.matches(s.name, job.name);
        if (match) chosen.push_back(std::move(job));
      }
      kept += chosen.size();
      s.jobs = std::move(chosen);
    }
    if (kept == 0) {
      err << "oomharness: no job matches -k '" << join(args.filters, "' or '") << "' (job names are suite::job; "
          << "`oomharness validate` lists them): nothing was tested\n";
      return ExitCode::nothing_tested;
    }
  }
  if (args.last_failed) {
    if (auto code = keep_last_failed(suites, out, err)) return *code;
  }
  if (args.collect_only) return print_collected(suites, out);
  return run_with_sweeps(std::move(suites), args, out, err);
}

namespace {

// The job flags of kFlagsReadByTheApp (suite/job_table.h): --fault and --expect, parsed by the command
// line's spec parsers (cli_specs.h).
std::optional<std::string> read_spec_flag(std::string_view flag, const std::vector<std::string>& values,
                                          suite::JobFields& fields) {
  if (flag == "--fault") {
    std::set<std::string> names;
    for (const std::string& text : values) {
      auto f = parse_fault_spec(text, "");
      if (!f) return f.error();
      FaultSpec fault = std::move(*f);
      // Two identical specs are two rules: their names must still tell them apart in reports.
      std::string base = fault.name;
      for (int n = 2; !names.insert(fault.name).second; ++n) fault.name = base + " #" + std::to_string(n);
      fault.rule["name"] = fault.name;
      if (!fields.faults) fields.faults.emplace();
      fields.faults->push_back(std::move(fault));
    }
    return std::nullopt;
  }
  if (flag == "--expect") {
    for (const std::string& text : values) {
      auto e = parse_expect_spec(text);
      if (!e) return e.error();
      if (!fields.expect) fields.expect.emplace();
      fields.expect->push_back(std::move(*e));
    }
    return std::nullopt;
  }
  throw std::logic_error("the job flag " + std::string(flag) + " has no reader: give it one in the job table");
}

}  // namespace

std::optional<JobSpec> job_from_exec_args(const ExecArgs& args, const std::string& command, std::ostream& err) {
  if (args.command.empty()) {
    err << "oomharness " << command << ": no command given: write it after --, like oomharness " << command
        << " --cap 8GiB -- python train.py\n";
    return std::nullopt;
  }
  // The flags give fields, each read by its row of the job table in the table's order; build_job makes the
  // job, exactly as for a suite's job (Note [Job fields]).
  suite::JobFields fields;
  size_t read = 0;
  for (const suite::JobKey& k : suite::job_keys())
    for (const suite::JobFlag& f : k.flags) {
      auto given = args.job_flags.find(f.name);
      if (f.name.empty() || given == args.job_flags.end()) continue;
      ++read;
      // An empty value is no value, as it always was for a flag taken once (`--cap ''`: no cap).
      if (f.takes == suite::FlagTakes::text && (given->second.empty() || given->second.back().empty())) continue;
      std::optional<std::string> problem = f.read ? f.read(fields, given->second) : read_spec_flag(f.name, given->second, fields);
      if (problem) {
        err << "oomharness " << command << ": " << *problem << "\n";
        return std::nullopt;
      }
    }
  if (read != args.job_flags.size()) throw std::logic_error("ExecArgs::job_flags holds a flag that the job table lacks");
  if (!fields.name) fields.name = fs::path(args.command.front()).filename().string();
  fields.argv = args.command;
  // The same limits as a suite's name (load.cpp): one that can be printed and be a file name.
  if (auto problem = suite::name_problem(*fields.name)) {
    err << "oomharness " << command << ": bad --name '" << suite::printable(*fields.name) << "': it " << *problem << "\n";
    return std::nullopt;
  }
  std::error_code cwd_error;
  fields.cwd = fs::current_path(cwd_error).string();
  JobSpec job = suite::build_job(fields);
  job.where = SourceLocation{"<command line>", 0, 0};
  for (const FaultSpec& fault : job.faults)  // Note [Step numbering] in suite/job_fields.cpp
    if (auto problem = suite::steps_before_first(fault.rule, job.step_base)) {
      err << "oomharness " << command << ": bad --fault '" << fault.name << "': " << problem->message << "\n";
      return std::nullopt;
    }
  if (auto problem = suite::check_fault_plan(job.plan())) {
    err << "oomharness " << command << ": the fault plan is not one the shim accepts: " << *problem << "\n";
    return std::nullopt;
  }
  return job;
}

ExitCode command_exec(const ExecArgs& args, std::ostream& out, std::ostream& err) {
  std::optional<JobSpec> job = job_from_exec_args(args, "exec", err);
  if (!job) return ExitCode::usage_error;
  Suite suite;
  suite.name = "exec";
  suite.file = "<command line>";
  suite.dir = *job->cwd;
  suite.jobs.push_back(std::move(*job));

  RunArgs run;
  run.reports = args.reports;
  run.threads_per_job = args.threads_per_job;
  run.summary = args.summary;
  run.out_dir = args.out_dir;
  run.simulate = args.simulate;
  run.strict = args.strict;
  run.command_line = args.command_line;
  run.verbosity = args.verbosity;
  return run_suites({std::move(suite)}, run, out, err);
}

ExitCode command_demo(const std::string& out_dir, const std::vector<std::string>& command_line, std::ostream& out,
                      std::ostream& err) {
  std::optional<exec::GpuSurvey> survey = exec::survey_gpus();
  const bool simulate = !survey;
  Found demo = find_demo_suite(simulate);
  if (!demo.path) {
    err << "oomharness demo: cannot find " << (simulate ? "suites/demo-simulated.yaml" : "suites/demo.yaml")
        << " (set OOMH_HOME to the oomharness source folder); " << demo.tried_text() << "\n";
    return ExitCode::usage_error;
  }
  RunArgs args;
  args.suites = {*demo.path};
  args.out_dir = out_dir;
  args.command_line = command_line;
  // The demo's jobs are capped, so on a GPU they pack onto it; four at a time keeps it short.
  args.jobs = 4;
  args.surveyed = survey;
  bool torch_left_out = false;
  if (simulate) {
    args.simulate = true;
    out << "No GPU found: running the demo on stand-ins (simulated device): the emulated trainer on the CPU "
           "driver double, and the PyTorch trainers on the virtual CUDA device\n";
    // The simulated demo's jobs run the emulated trainer and `python3` by name: put the build's trainer
    // and a Python that has torch first on their PATH.
    auto put_first_on_path = [](const std::string& dir) {
      const char* path = std::getenv("PATH");
      std::string value = dir + (path && *path ? ":" + std::string(path) : "");
      setenv("PATH", value.c_str(), 1);
    };
    if (Found python = find_torch_python_dir(); python.path) {
      put_first_on_path(*python.path);
    } else {
      out << "No python3 that can import torch (" << python.tried_text()
          << "): the demo's PyTorch jobs are left out (pip install torch, or in a checkout run scripts/demo.sh, or "
             "scripts/venv.sh torch-2.13.0-cpu)\n";
      args.filters = {"not torch"};
      torch_left_out = true;
    }
    if (Found trainer = find_emulated_trainer_dir(); trainer.path) put_first_on_path(*trainer.path);
  }
  const ExitCode code = command_run(args, out, err);
  // A demo that left its PyTorch jobs out did not show what it is for: it must not look like a full pass.
  if (torch_left_out && code == ExitCode::ok) {
    err << "oomharness demo: the PyTorch jobs did not run (no python3 that can import torch): not a full demo\n";
    return ExitCode::nothing_tested;
  }
  return code;
}

}  // namespace oomh::app
