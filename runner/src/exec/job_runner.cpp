// The job runner: one Boost.Asio event loop (single thread) that runs every job of a run as real
// processes, observes them and turns each into a Trace. This file is the orchestration: a run, what
// follows an attempt, and interruption; the rooms are listed in job_runner_impl.h.
//
// Note [Runner event loop]
// Everything happens on the thread that called run(): per attempt, two readable pipes (stdout, stderr),
// an async_wait on the process (a pidfd under Boost.Process v2), a timer for the job's timeout and one
// for the SIGKILL that follows SIGTERM after the grace period; one runner-wide timer samples the control
// block of every running attempt every sample_interval. interrupt() may be called from a signal handler
// or another thread: it sets an atomic flag and writes one byte to a self-pipe that the loop reads, both
// async-signal-safe, and the loop does the stopping.
//
// An attempt ends when its process has exited (reaped) and both pipes reached end of file. When the
// process exits, whatever is left in its process group is killed (SIGKILL), so pipes held open by a
// grandchild close and no process outlives its attempt; the runner then waits (briefly) until the group is
// gone. The attempt's control block is sampled one last time, unmapped and unlinked, its event log is
// read into the trace, and only then does the job restart, run its reference or finish.
//
// Note [Constant cost per job]
// A finished attempt keeps nothing open: its pipes, its process handle (a pidfd), its timers and its
// control block are closed when it ends, and the AttemptRun itself is destroyed by a handler posted after
// the cancelled handlers that may still name it (a cancelled handler only looks at its error code). So
// the runner holds descriptors only for running attempts, and 10,000 jobs run under `ulimit -n 256`.
// A finished job's trace is handed to RunOptions::on_job_done, which may take it (`run` judges the job
// there and drops the trace, keeping the bounded result): the runner's memory does not grow with the
// events of the jobs already run.

#include "exec/job_runner_impl.h"

#include <cerrno>
#include <filesystem>

#include <sys/prctl.h>
#include <unistd.h>

#include "exec/cpu_share.h"
#include "exec/reaping.h"
#include "exec/signals.h"
#include "oomharness/runner/name_tables.h"
#include "suite/limits.h"

namespace oomh {

using namespace exec;
namespace fs = std::filesystem;

// Does `restart.on` ask for a new attempt after `a`? A timed-out or interrupted attempt never restarts
// (the hang would come back, or the user asked to stop); a clean exit never does.
bool exec::wants_restart(const Attempt& a, const std::vector<std::string>& on) {
  if (a.end_kind == AttemptEnd::timed_out || a.end_kind == AttemptEnd::interrupted || a.end_kind == AttemptEnd::failed_to_start)
    return false;
  bool nonzero = a.end_kind == AttemptEnd::exited && a.exit_code && *a.exit_code != 0;
  bool signalled = a.end_kind == AttemptEnd::signalled;
  for (const std::string& name : on) {
    const std::optional<RestartOn> reason = value_named(kRestartReasons, name);  // the suite reader checked it
    if (!reason) continue;
    switch (*reason) {
      case RestartOn::oom:
        if (a.ended_by_oom() || (a.oom_message && (nonzero || signalled))) return true;
        break;
      case RestartOn::nonzero:
        if (nonzero) return true;
        break;
      case RestartOn::signal:
        if (signalled) return true;
        break;
      case RestartOn::any:
        if (nonzero || signalled) return true;
        break;
    }
  }
  return false;
}

// Note [One job, one folder] in suite/limits.h.
std::string job_dir_name(const std::string& job) { return suite::folder_name(job); }

Event exec::runner_event(const char* kind, double t, nlohmann::json fields) {
  Event e;
  e.t = t;
  e.pid = static_cast<int>(getpid());
  e.src = events::kSrcRunner;
  e.kind = kind;
  e.fields = std::move(fields);
  return e;
}

JobRunner::JobRunner(RunOptions options) : impl_(new Impl(std::move(options))) {}
JobRunner::~JobRunner() { delete impl_; }

void JobRunner::interrupt() noexcept {
  int saved = errno;
  impl_->stop_requested.store(true, std::memory_order_relaxed);
  if (impl_->wake_fds[1] >= 0) {
    char c = 1;
    ssize_t w = write(impl_->wake_fds[1], &c, 1);  // EAGAIN when the pipe is full: a wake-up is pending anyway
    (void)w;
  }
  errno = saved;
}

void JobRunner::stop_starting() { impl_->no_new_jobs = true; }

bool JobRunner::interrupted() const noexcept { return impl_->stop_requested.load(std::memory_order_relaxed); }

std::vector<JobOutcome> JobRunner::run(const std::vector<JobSpec>& jobs) { return impl_->run(jobs); }

std::vector<JobOutcome> JobRunner::Impl::run(const std::vector<JobSpec>& specs) {
  std::vector<JobOutcome> outcomes(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    outcomes[i].trace.job = specs[i].name;
    outcomes[i].trace.target_step = specs[i].target_step;
    outcomes[i].trace.simulated_device = !options.paths.driver_library_dir.empty();
  }
  if (stop_requested.load()) {
    for (JobOutcome& o : outcomes) o.interrupted = true;
    return outcomes;
  }
  // Drain wake-ups left from an earlier run.
  char drain[64];
  while (wake_fds[0] >= 0 && read(wake_fds[0], drain, sizeof drain) > 0) {}

  // Note [Nothing left behind].
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  remove_stale_blocks();

  asio::io_context io;
  ctx = &io;
  open_out_dir();
  // Note [A runner its jobs cannot signal] in job_namespace.h; the driver double (--simulate) leaves the real
  // driver out of the jobs.
  ns = std::make_unique<JobNamespace>(options.paths.driver_library_dir.empty());
  {  // Note [Processes outside the shim] in escapes.h
    const char* nvml = std::getenv("OOMH_NVML_LIBRARY");
    gpu_processes = std::make_unique<GpuProcessList>(nvml && *nvml ? nvml : "libnvidia-ml.so.1");
    gpu_polled_at = 0;
  }
  plan_jobs(specs, outcomes);
  arm_loop();
  schedule();
  io.run();
  kill_orphans(nullptr, true);
  end_run();
  return outcomes;
}

// The folder above out_dir is the user's (or the app's, itself opened so); out_dir's own last component
// and everything under it are the runner's (Note [A run folder the runner owns] in run_folder.h).
void JobRunner::Impl::open_out_dir() {
  const fs::path out = fs::path(options.out_dir.empty() ? "." : options.out_dir).lexically_normal();
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  DirFd top = open_user_dir(parent.string());
  const std::string last = out.filename().string();
  out_fd = top && !last.empty() && last != "." && last != ".." ? open_owned_dir(top.get(), last) : std::move(top);
}

// Every job pending, the GPUs to pack them on and each job's share of the CPUs.
void JobRunner::Impl::plan_jobs(const std::vector<JobSpec>& specs, std::vector<JobOutcome>& outcomes) {
  stopping = false;
  no_new_jobs = false;
  running = 0;
  finished_count = 0;
  pending.clear();
  jobs.clear();

  std::vector<GpuInfo> gpus;
  if (options.gpu_inventory) gpus = *options.gpu_inventory;
  else if (auto survey = survey_gpus()) gpus = std::move(survey->gpus);
  packer = std::make_unique<GpuPacker>(select_gpus(std::move(gpus), options.gpus), options.gpu_margin);
  int concurrency = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(1, options.jobs)), specs.size()));
  threads_each = threads_for_each_job(options.threads_per_job, concurrency, options.cpus > 0 ? options.cpus : usable_cpus());

  for (size_t i = 0; i < specs.size(); ++i) {
    auto j = std::make_unique<JobState>();
    j->index = i;
    j->spec = &specs[i];
    j->outcome = &outcomes[i];
    jobs.push_back(std::move(j));
    pending.push_back(i);
  }
}

// The runner-wide timer and the self-pipe of interrupt() (Note [Runner event loop]).
void JobRunner::Impl::arm_loop() {
  sample_timer = std::make_unique<asio::steady_timer>(*ctx);
  if (wake_fds[0] >= 0) {
    wake_pipe = std::make_unique<asio::readable_pipe>(*ctx);
    boost::system::error_code ec;
    wake_pipe->assign(wake_fds[0], ec);
    if (ec) wake_pipe.reset();
  }
  arm_wake();
  if (ns && ns->stopped_fd() >= 0) {
    stopped_pipe = std::make_unique<asio::readable_pipe>(*ctx);
    boost::system::error_code ec;
    stopped_pipe->assign(ns->stopped_fd(), ec);
    if (ec) stopped_pipe.reset();
  }
  arm_watchdog_reports();
  arm_sampler();
}

void JobRunner::Impl::arm_watchdog_reports() {
  if (!stopped_pipe) return;
  stopped_pipe->async_read_some(asio::buffer(stopped_buf), [this](boost::system::error_code ec, size_t n) {
    if (ec == asio::error::operation_aborted || finished_count == jobs.size()) return;
    if (!ec && n > 0) {
      for (auto& j : jobs)
        for (auto& c : j->current)
          if (c && !c->finished)
            c->attempt.events.push_back(runner_event(
                events::kWarning, now(),
                {{"message", "the runner was stopped (SIGSTOP or the like: a job can send it, as the jobs do not run in a PID "
                             "namespace of their own here) and its watchdog continued it"}}));
    }
    if (!ec || ec == asio::error::would_block || ec == asio::error::try_again) arm_watchdog_reports();
  });
}

// The loop ran out of work: every job finished. Give the self-pipe back (it belongs to the runner).
void JobRunner::Impl::end_run() {
  if (wake_pipe) {
    boost::system::error_code ec;
    wake_pipe->release(ec);
    wake_pipe.reset();
  }
  if (stopped_pipe) {
    boost::system::error_code ec;
    stopped_pipe->release(ec);  // the descriptor is the namespace's
    stopped_pipe.reset();
  }
  sample_timer.reset();
  jobs.clear();
  packer.reset();
  gpu_processes.reset();
  ns.reset();  // the keeper goes, and the kernel ends whatever was left in the namespace
  out_fd = DirFd();
  ctx = nullptr;
}

// What follows an attempt: a restart, the reference run, or the end of the job.
void JobRunner::Impl::after_attempt(JobState& j, const Attempt& a, bool reference) {
  if (reference || a.end_kind == AttemptEnd::failed_to_start) return finish_job(j);
  if (stopping || a.end_kind == AttemptEnd::interrupted) {
    j.outcome->interrupted = true;
    return finish_job(j);
  }
  const RestartSpec& rs = j.spec->restart;
  if (j.restarts < rs.max && wants_restart(a, rs.on)) {
    ++j.restarts;
    if (rs.clear_faults) j.faults_enabled = false;
    progress(j, JobProgress::State::restarting);
    return start_attempt(j, false);
  }
  if (j.want_reference) return start_attempt(j, true);
  finish_job(j);
}

// ---------------------------------------------------------------------------------------------------
// Signals sent to the runner (Note [Signals a job may send] in signals.h).

void JobRunner::Impl::claim_signals() {
  std::vector<StraySignal> unclaimed;
  for (const StraySignal& s : take_stray_signals()) {
    AttemptRun* sender = nullptr;
    for (auto& j : jobs)
      for (auto& c : j->current)
        if (c && !c->finished && c->pgid > 0 && c->pgid == s.sid) sender = c.get();
    if (!sender) {
      unclaimed.push_back(s);
      continue;
    }
    sender->attempt.events.push_back(runner_event(events::kWarning, now(),
                                                  {{"message", stray_signal_text(s)},
                                                   {"signal", signal_name(s.signo)},
                                                   {"sender_pid", s.pid}}));
  }
  if (!unclaimed.empty()) set_aside(std::move(unclaimed));
}

// ---------------------------------------------------------------------------------------------------
// Interruption.

void JobRunner::Impl::arm_wake() {
  if (!wake_pipe) return;
  wake_pipe->async_read_some(asio::buffer(wake_buf), [this](boost::system::error_code ec, size_t) {
    if (ec == asio::error::operation_aborted || finished_count == jobs.size()) return;
    if (stop_requested.load()) on_interrupt();
    if (!ec || ec == asio::error::would_block || ec == asio::error::try_again) arm_wake();
  });
}

void JobRunner::Impl::on_interrupt() {
  if (stopping) return;
  stopping = true;
  for (auto& j : jobs) {
    if (j->finished) continue;
    bool any = false;
    for (auto& c : j->current)
      if (c && !c->finished) {
        any = true;
        stop_attempt(*c, AttemptRun::Stop::interrupt);
      }
    if (!any && j->sidecar && !j->sidecar->ready && j->current.empty()) {
      j->outcome->interrupted = true;
      finish_job(*j);
    }
  }
  schedule();
}

}  // namespace oomh
