// The job runner: one Boost.Asio event loop (single thread) that runs every job of a run as real
// processes, observes them and turns each into a Trace.
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
// Note [Nothing left behind]
// Per attempt: the process group is killed and waited for; then every process that was re-parented to the
// runner (it is a child subreaper, PR_SET_CHILD_SUBREAPER, so a `setsid` grandchild or a daemon that left
// the group lands here instead of on init) and whose environment names this attempt's control block is
// killed too (its own group as well), and reaped; one that names no block is killed when no other attempt
// runs, and at the end of the run whatever is left is. The control block (a sealed memfd, Note [A block the
// job cannot take down] in control_block.h) is unmapped and its descriptor closed; the log descriptor is
// closed; every descriptor, timer and buffer of the attempt is released as soon as it ends (Note [Constant
// cost per job]). Per job: the reservation sidecar is stopped (stdin closed, SIGTERM, SIGKILL after 5 s)
// and reaped before the job's GPU memory is counted as free again. A runner killed with SIGKILL: each job's
// leader has PR_SET_PDEATHSIG (SIGKILL) and dies with it; the control blocks are memfds and go with their
// last user; /dev/shm/oomh-<pid>-... blocks of dead runners (older versions, the shim's own solo blocks)
// are removed when the next run starts. The only files left are the outputs (logs, event logs, the job's
// work directory), which are results.
//
// Note [Constant cost per job]
// A finished attempt keeps nothing open: its pipes, its process handle (a pidfd), its timers and its
// control block are closed when it ends, and the AttemptRun itself is destroyed by a handler posted after
// the cancelled handlers that may still name it (a cancelled handler only looks at its error code). So
// the runner holds descriptors only for running attempts, and 10,000 jobs run under `ulimit -n 256`.
// A finished job's trace is handed to RunOptions::on_job_done, which may take it (`run` judges the job
// there and drops the trace, keeping the bounded result): the runner's memory does not grow with the
// events of the jobs already run.
//
// Note [Bounded job logs]
// An attempt's log keeps at most RunOptions::log_cap bytes: the first lines up to cap minus the tail, and
// the last lines (the tail, at most a quarter of the cap and 8 MiB, held in memory until the attempt ends);
// what lies between is replaced by one line that says how many bytes and lines were cut, and the attempt
// gets a warning event that says the same. A write that fails (a full disk) stops the log and gives a
// warning event with the error and the bytes written, so a short log is never silent.

#include "oomharness/runner/job_runner.h"

// GCC 12 reports "potential null pointer dereference" inside Boost.Asio's inlined scheduler and executor
// code (system headers, not ours) at -O1 and above; these middle-end warnings ignore the system-header rule.
#pragma GCC diagnostic ignored "-Wnull-dereference"

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/writable_pipe.hpp>
#include "exec/boost_process.h"

#include "exec/cpu_share.h"
#include "exec/dead_processes.h"
#include "exec/gpu_packing.h"
#include "exec/launch.h"
#include "exec/output.h"
#include "exec/run_folder.h"
#include "exec/signals.h"
#include "suite/limits.h"
#include "oomharness/control_block.h"
#include "oomharness/runner/command.h"
#include "oomharness/events.h"
#include "oomharness/policies/registry.h"

namespace oomh {

namespace asio = boost::asio;
namespace bp = boost::process::v2;
namespace fs = std::filesystem;
using namespace exec;

// Note [One job, one folder] in suite/limits.h.
std::string job_dir_name(const std::string& job) { return suite::folder_name(job); }

namespace {

constexpr size_t kMaxSamples = 20000;           // per attempt; beyond, samples are thinned (every other kept)
constexpr double kSidecarReadyTimeout = 30;     // seconds to wait for the sidecar's READY
constexpr double kSidecarStopGrace = 5;         // seconds between SIGTERM and SIGKILL for the sidecar
constexpr double kDrainTimeout = 5;             // seconds to wait for pipes after the process exited
constexpr double kStacksWait = 0.5;             // seconds between SIGUSR1 (stacks) and SIGTERM for a hang
constexpr double kHangGrace = 1;                // seconds between SIGTERM and SIGKILL for a hung rank
constexpr size_t kMaxStacksBytes = 256 * 1024;  // of one rank's stack dump kept in the trace

double now() { return events::now_seconds(); }

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(std::max(0.0, s)));
}

Event runner_event(const char* kind, double t, nlohmann::json fields) {
  Event e;
  e.t = t;
  e.pid = static_cast<int>(getpid());
  e.src = events::kSrcRunner;
  e.kind = kind;
  e.fields = std::move(fields);
  return e;
}

// Does `restart.on` ask for a new attempt after `a`? A timed-out or interrupted attempt never restarts
// (the hang would come back, or the user asked to stop); a clean exit never does.
bool wants_restart(const Attempt& a, const std::vector<std::string>& on) {
  if (a.end_kind == AttemptEnd::timed_out || a.end_kind == AttemptEnd::interrupted || a.end_kind == AttemptEnd::failed_to_start)
    return false;
  bool nonzero = a.end_kind == AttemptEnd::exited && a.exit_code && *a.exit_code != 0;
  bool signalled = a.end_kind == AttemptEnd::signalled;
  for (const std::string& kind : on) {
    if (kind == "oom" && (a.ended_by_oom() || (a.oom_message && (nonzero || signalled)))) return true;
    if (kind == "nonzero" && nonzero) return true;
    if (kind == "signal" && signalled) return true;
    if (kind == "any" && (nonzero || signalled)) return true;
  }
  return false;
}

// Waits (briefly) until no process of group `pgid` is left, reaping those that are our children.
void wait_group_gone(pid_t pgid) {
  if (pgid <= 0) return;
  for (int i = 0; i < 2000; ++i) {
    while (waitpid(-pgid, nullptr, WNOHANG) > 0) {}
    if (kill(-pgid, 0) != 0 && errno == ESRCH) return;
    if (i == 0) kill(-pgid, SIGKILL);
    usleep(1000);
  }
}

std::string errno_text(int e) { return std::strerror(e); }

// At most `cap` bytes of a file; empty when it cannot be read.
// The job writes the file and may have put a link, a FIFO or a device there: none is followed or read.
std::string read_text_file(const std::string& path, size_t cap) {
  std::string text;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return text;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return text;
  }
  char buf[8192];
  for (ssize_t n; text.size() < cap && (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  if (text.size() > cap) text.resize(cap);
  return text;
}

// The value of `name` in the environment process `pid` started with; nullopt when unreadable or unset.
std::optional<std::string> environment_value(pid_t pid, std::string_view name) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[8192];
  for (ssize_t n; text.size() < (1u << 20) && (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\0', at);
    if (end == std::string::npos) end = text.size();
    std::string_view kv(text.data() + at, end - at);
    if (kv.size() > name.size() && kv.substr(0, name.size()) == name && kv[name.size()] == '=')
      return std::string(kv.substr(name.size() + 1));
    at = end + 1;
  }
  return std::nullopt;
}

// The runner's children, from /proc/self/task/*/children (each thread's), else a scan of /proc.
std::vector<pid_t> runner_children() {
  std::vector<pid_t> out;
  bool listed = false;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string path = std::string("/proc/self/task/") + e->d_name + "/children";
      FILE* f = std::fopen(path.c_str(), "re");
      if (!f) continue;
      listed = true;
      long pid = 0;
      while (std::fscanf(f, "%ld", &pid) == 1) out.push_back(static_cast<pid_t>(pid));
      std::fclose(f);
    }
    closedir(d);
  }
  if (listed) return out;
  pid_t self = getpid();
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::string path = std::string("/proc/") + e->d_name + "/stat";
      FILE* f = std::fopen(path.c_str(), "re");
      if (!f) continue;
      char buf[512];
      size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      buf[n] = '\0';
      const char* close_paren = std::strrchr(buf, ')');
      char state = 0;
      long ppid = 0;
      if (close_paren && std::sscanf(close_paren + 1, " %c %ld", &state, &ppid) == 2 && ppid == self)
        out.push_back(static_cast<pid_t>(std::atol(e->d_name)));
    }
    closedir(d);
  }
  return out;
}

// Kills `pid` (and its process group when it leads one) and reaps it.
void kill_and_reap(pid_t pid) {
  if (getpgid(pid) == pid) kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  for (int i = 0; i < 2000; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) != 0) return;
    usleep(500);
  }
}

// Removes /dev/shm/oomh-<pid>-... and /dev/shm/oomh-solo-<pid> blocks whose process is gone (a runner or a
// shim killed before it could unlink them). Note [Nothing left behind].
void remove_stale_blocks() {
  DIR* d = opendir("/dev/shm");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string_view name(e->d_name);
    if (name.rfind("oomh-", 0) != 0) continue;
    std::string_view rest = name.substr(5);
    if (rest.rfind("solo-", 0) == 0) rest.remove_prefix(5);
    size_t digits = 0;
    while (digits < rest.size() && digits < 9 && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    if (digits == 0 || (digits < rest.size() && rest[digits] != '-')) continue;
    pid_t pid = static_cast<pid_t>(std::atol(std::string(rest.substr(0, digits)).c_str()));
    if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    shm_unlink(("/" + std::string(name)).c_str());
  }
  closedir(d);
}

}  // namespace

struct JobState;

// One attempt's process and everything the runner watches about it.
struct AttemptRun {
  explicit AttemptRun(asio::io_context& ctx)
      : out(ctx), err(ctx), timeout_timer(ctx), kill_timer(ctx), drain_timer(ctx) {}

  JobState* job = nullptr;
  bool reference = false;
  Attempt attempt;
  std::optional<bp::process> proc;
  pid_t pgid = -1;
  asio::readable_pipe out, err;
  std::array<char, 16384> out_buf{}, err_buf{};
  LineSplitter out_split, err_split;
  asio::steady_timer timeout_timer, kill_timer, drain_timer;
  int log_fd = -1;
  std::string shm_name;      // a POSIX shared-memory name (the fallback when memfds are not available)
  int cb_fd = -1;            // the sealed memfd of the control block
  std::string control_name;  // OOMH_CONTROL as the job sees it
  ControlBlock* cb = nullptr;
  std::string events_path;
  int rank = -1;             // a job with ranks > 1: this process's rank (Note [Ranks] in trace.h)
  std::string stacks_path;   // OOMH_STACKS
  int64_t seen_step = INT64_MIN;  // the control block's step at the last sample, and when it last changed
  double seen_step_t = 0;
  bool exited = false, out_done = false, err_done = false, finished = false;
  enum class Stop { none, timeout, interrupt, hang } stop = Stop::none;
  int status = 0;
  ObservedValues observed;  // Note [Bounded observed values] in output.h
  std::vector<Event> hits;  // one line's, before `observed` takes them
  OutputTail tail{60};
  size_t stride = 1, tick = 0;
  // Note [Bounded job logs].
  uint64_t log_written = 0;            // bytes in the log file
  uint64_t log_cut_bytes = 0, log_cut_lines = 0;
  std::deque<std::string> log_tail;    // lines past the head, the last ones kept
  uint64_t log_tail_bytes = 0;
  int log_errno = 0;                   // the first failed write
};

// The reservation sidecar of one job (memory.reserve > 0).
struct Sidecar {
  explicit Sidecar(asio::io_context& ctx) : in(ctx), out(ctx), timer(ctx), kill_timer(ctx) {}
  std::optional<bp::process> proc;
  asio::writable_pipe in;
  asio::readable_pipe out;
  std::string buf;
  asio::steady_timer timer;       // READY timeout
  asio::steady_timer kill_timer;  // SIGKILL after SIGTERM
  bool ready = false, exited = false, stopping = false;
  uint64_t held = 0;              // what READY said it holds
};

struct JobState {
  size_t index = 0;
  const JobSpec* spec = nullptr;
  JobOutcome* outcome = nullptr;
  std::unique_ptr<LineObserver> observer;
  std::vector<Placement> placements;  // one, or one per rank (Note [One GPU per rank] in gpu_packing.h)
  std::string dir;            // <out>/<job>
  DirFd dir_fd;               // the same folder, opened (Note [A run folder the runner owns] in run_folder.h)
  std::string cwd;
  int restarts = 0;
  bool faults_enabled = true;
  bool want_reference = false;
  bool finished = false;
  bool waiting_reported = false;
  // One per rank (one for a job without ranks); a finished one is retired (Note [Constant cost per job])
  // and its slot left empty.
  std::vector<std::unique_ptr<AttemptRun>> current;
  std::unique_ptr<Sidecar> sidecar;
  // The running attempt's ranks (Note [Ranks] in trace.h, Note [Hang detection]).
  std::vector<Attempt> rank_ends;   // rank k's attempt, once it has finished
  size_t ranks_ended = 0;
  int first_end_rank = -1;          // the rank whose process exited (or that raised an OOM) first, and when
  double first_end_t = 0;
  bool first_end_oom = false;       // it raised an OOM (it may still run) rather than exited
  bool hang_called = false;
  std::vector<std::string> stacks;  // per rank, read after SIGUSR1
  std::unique_ptr<asio::steady_timer> stacks_timer;

  AttemptRun* lead() const { return current.empty() ? nullptr : current.front().get(); }
};

struct JobRunner::Impl {
  explicit Impl(RunOptions o) : options(std::move(o)) {
    if (pipe2(wake_fds, O_NONBLOCK | O_CLOEXEC) != 0) wake_fds[0] = wake_fds[1] = -1;
  }
  ~Impl() {
    for (int fd : wake_fds)
      if (fd >= 0) close(fd);
  }

  RunOptions options;
  int wake_fds[2] = {-1, -1};
  std::atomic<bool> stop_requested{false};

  // Per run().
  asio::io_context* ctx = nullptr;
  DirFd out_fd;  // options.out_dir, opened (Note [A run folder the runner owns] in run_folder.h)
  std::vector<std::unique_ptr<JobState>> jobs;
  std::unique_ptr<GpuPacker> packer;
  std::deque<size_t> pending;
  std::optional<int> threads_each;  // OMP_NUM_THREADS for each job (Note [CPU share of packed jobs])
  int running = 0;
  size_t finished_count = 0;
  bool stopping = false;
  bool no_new_jobs = false;  // stop_starting()
  std::unique_ptr<asio::steady_timer> sample_timer;
  std::unique_ptr<asio::readable_pipe> wake_pipe;
  std::array<char, 64> wake_buf{};

  std::vector<JobOutcome> run(const std::vector<JobSpec>& specs);

  // Scheduling.
  void schedule();
  void start_job(JobState& j, std::vector<Placement> p);
  void finish_job(JobState& j);
  void complete_job(JobState& j);
  void progress(JobState& j, JobProgress::State state, const AttemptRun* r = nullptr);

  // Attempts.
  void start_attempt(JobState& j, bool reference);
  void launch_rank(JobState& j, bool reference, int n, int rank, int port, const std::string& work);
  void check_hang(JobState& j);
  void take_stacks(JobState& j, AttemptRun& stalled, double waited);
  void fail_attempt(AttemptRun& r, const std::string& why);
  void read_stream(AttemptRun* r, bool is_err);
  void consume(AttemptRun& r, bool is_err, const char* data, size_t n, bool eof);
  void on_exit(AttemptRun* r);
  void stop_attempt(AttemptRun& r, AttemptRun::Stop why);
  void maybe_finish(AttemptRun* r);
  void finish_attempt(AttemptRun& r);
  void after_attempt(JobState& j, const Attempt& a, bool reference);
  void release_control_block(AttemptRun& r);
  void retire(std::unique_ptr<AttemptRun> r);
  void kill_orphans(const AttemptRun* r, bool all);
  void write_log(AttemptRun& r, const char* data, size_t n);
  void close_log(AttemptRun& r);

  // Sampling.
  void arm_sampler();
  void sample(AttemptRun& r, bool last);

  // Sidecar.
  void start_sidecar(JobState& j);
  void sidecar_read(JobState* j);
  void stop_sidecar(JobState& j);

  // Note [Signals a job may send] in signals.h: each recorded signal into the attempt that sent it.
  void claim_signals();

  // Interruption.
  void arm_wake();
  void on_interrupt();
};

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
  {
    // The folder above out_dir is the user's (or the app's, itself opened so); out_dir's own last
    // component and everything under it are the runner's.
    const fs::path out = fs::path(options.out_dir.empty() ? "." : options.out_dir).lexically_normal();
    const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
    DirFd top = open_user_dir(parent.string());
    const std::string last = out.filename().string();
    out_fd = top && !last.empty() && last != "." && last != ".." ? open_owned_dir(top.get(), last) : std::move(top);
  }
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

  sample_timer = std::make_unique<asio::steady_timer>(io);
  if (wake_fds[0] >= 0) {
    wake_pipe = std::make_unique<asio::readable_pipe>(io);
    boost::system::error_code ec;
    wake_pipe->assign(wake_fds[0], ec);
    if (ec) wake_pipe.reset();
  }
  arm_wake();
  arm_sampler();
  schedule();
  io.run();
  kill_orphans(nullptr, true);

  // The loop ran out of work: every job finished. Give the self-pipe back (it belongs to the runner).
  if (wake_pipe) {
    boost::system::error_code ec;
    wake_pipe->release(ec);
    wake_pipe.reset();
  }
  sample_timer.reset();
  jobs.clear();
  packer.reset();
  out_fd = DirFd();
  ctx = nullptr;
  return outcomes;
}

// ---------------------------------------------------------------------------------------------------
// Scheduling: Note [GPU packing] in gpu_packing.h.

void JobRunner::Impl::schedule() {
  if (stopping || no_new_jobs) {
    while (!pending.empty()) {
      JobState& j = *jobs[pending.front()];
      pending.pop_front();
      if (stopping) j.outcome->interrupted = true;
      else j.outcome->not_started = true;
      complete_job(j);
    }
  }
  while (!stopping && !pending.empty() && running < std::max(1, options.jobs)) {
    JobState& j = *jobs[pending.front()];
    // Note [One GPU per rank] in gpu_packing.h.
    size_t gpus_wanted = j.spec->ranks > 1 && j.spec->device != DeviceChoice::virtual_device ? static_cast<size_t>(j.spec->ranks) : 1;
    if (packer->has_gpus() && gpus_wanted > packer->gpu_count()) {
      pending.pop_front();
      j.outcome->error = "ranks: " + std::to_string(j.spec->ranks) + " needs one GPU per rank, and this run has " +
                         std::to_string(packer->gpu_count()) + (packer->gpu_count() == 1 ? " GPU" : " GPUs") +
                         " (choose them with --gpus, or give the job fewer ranks)";
      complete_job(j);
      continue;
    }
    std::optional<std::vector<Placement>> p = packer->place_each(gpu_need(*j.spec), gpus_wanted);
    if (!p) {
      if (!j.waiting_reported) {
        j.waiting_reported = true;
        progress(j, JobProgress::State::waiting);
      }
      break;
    }
    pending.pop_front();
    start_job(j, std::move(*p));
  }
  if (finished_count == jobs.size()) {
    sample_timer->cancel();
    if (wake_pipe) wake_pipe->cancel();
  }
}

void JobRunner::Impl::start_job(JobState& j, std::vector<Placement> p) {
  ++running;
  j.placements = std::move(p);
  j.outcome->gpu = j.placements.front().gpu;
  if (j.placements.size() > 1)
    for (const Placement& q : j.placements) j.outcome->gpus.push_back(*q.gpu);
  j.outcome->start = now();
  j.dir = (fs::path(options.out_dir.empty() ? "." : options.out_dir) / job_dir_name(j.spec->name)).string();
  // Note [A run folder the runner owns] in run_folder.h: no link planted by a job is followed here.
  std::string work = (fs::path(j.dir) / "work").string();
  errno = EBADF;
  if (out_fd) j.dir_fd = open_owned_dir(out_fd.get(), job_dir_name(j.spec->name));
  const bool made = j.dir_fd && remove_tree_at(j.dir_fd.get(), "work") && open_owned_dir(j.dir_fd.get(), "work");
  if (!made) {
    j.outcome->error = "cannot create the job's directory " + work + ": " + errno_text(errno);
    finish_job(j);
    return;
  }
  j.outcome->work_dir = work;
  if (j.spec->cwd) j.cwd = substitute_runtime(*j.spec->cwd, work, 0);
  else if (!j.spec->where.file.empty()) j.cwd = fs::path(j.spec->where.file).parent_path().string();
  try {
    j.observer = std::make_unique<LineObserver>(j.spec->observe);
  } catch (const std::regex_error& e) {
    j.outcome->error = "bad observe regex: " + std::string(e.what());
    finish_job(j);
    return;
  }
  for (const ExpectSpec& e : j.spec->expect)
    if (const PolicyInfo* policy = find_policy(e.policy); policy && wants_reference(*policy, e.args)) j.want_reference = true;
  if ((j.spec->memory.reserve > 0 || j.spec->memory.leave) && j.placements.size() > 1) {
    // The sidecar holds memory on one GPU; the ranks have one each (Note [One GPU per rank]).
    j.outcome->error = "memory.reserve and memory.leave hold memory on one GPU, and this job's " + std::to_string(j.spec->ranks) +
                       " ranks have one GPU each: not supported yet";
    finish_job(j);
    return;
  }
  if (j.spec->memory.reserve > 0 || j.spec->memory.leave) start_sidecar(j);
  else start_attempt(j, false);
}

// The job is over (or could not run): stop its sidecar first, then complete it.
void JobRunner::Impl::finish_job(JobState& j) {
  if (j.sidecar && !j.sidecar->exited) {
    stop_sidecar(j);
    return;  // complete_job runs once the sidecar has exited
  }
  complete_job(j);
}

void JobRunner::Impl::complete_job(JobState& j) {
  if (j.finished) return;
  j.finished = true;
  for (auto& c : j.current)
    if (c && c->finished) retire(std::move(c));
  if (j.stacks_timer) j.stacks_timer->cancel();
  j.observer.reset();
  j.dir_fd = DirFd();
  bool was_started = j.outcome->start != 0;
  if (was_started) {
    for (const Placement& q : j.placements) packer->release(q);
    --running;
    j.outcome->end = now();
  }
  ++finished_count;
  progress(j, JobProgress::State::done);
  if (options.on_job_done) options.on_job_done(j.index, *j.outcome);
  schedule();
}

void JobRunner::Impl::progress(JobState& j, JobProgress::State state, const AttemptRun* r) {
  if (!options.on_progress) return;
  JobProgress p;
  p.job = j.spec->name;
  p.state = state;
  p.gpu = j.outcome->gpu;
  p.elapsed = j.outcome->start != 0 ? now() - j.outcome->start : 0;
  const std::vector<Attempt>& ended = j.outcome->trace.attempts;
  // Between attempts, and while the reference run goes (the attempts have ended): not on every sample of a
  // running attempt, which would walk the previous attempt's events 20 times a second.
  if (!ended.empty() && (!r || r->reference)) p.last_step = ended.back().last_completed_step();
  if (r) {
    p.reference = r->reference;
    p.attempt = r->reference ? static_cast<int>(ended.size()) : r->attempt.index;
    if (const ControlBlock* cb = r->cb) {
      p.step = cb->step.load(std::memory_order_relaxed);
      uint32_t n = std::min<uint32_t>(cb->device_count.load(std::memory_order_relaxed), kMaxDevices);
      for (uint32_t d = 0; d < n; ++d) {
        const DeviceCounters& c = cb->devices[d];
        p.held += c.held.load(std::memory_order_relaxed);
        p.cap = std::max<uint64_t>(p.cap, c.cap.load(std::memory_order_relaxed));
        p.faults += c.failures_injected.load(std::memory_order_relaxed) + c.cap_failures.load(std::memory_order_relaxed);
      }
    }
  } else {
    p.attempt = static_cast<int>(ended.size());
  }
  options.on_progress(p);
}

// ---------------------------------------------------------------------------------------------------
// Attempts.

void JobRunner::Impl::start_attempt(JobState& j, bool reference) {
  for (auto& c : j.current) retire(std::move(c));
  j.current.clear();
  int n = reference ? static_cast<int>(j.outcome->trace.reference.size()) : static_cast<int>(j.outcome->trace.attempts.size());
  // The reference run starts from an empty work directory: it must not resume from the attempts' files.
  std::string work = j.outcome->work_dir;
  if (reference) {
    work = (fs::path(j.dir) / "reference-work").string();
    if (j.dir_fd && remove_tree_at(j.dir_fd.get(), "reference-work")) open_owned_dir(j.dir_fd.get(), "reference-work");
  }
  int ranks = std::max(1, j.spec->ranks);
  j.rank_ends.assign(ranks > 1 ? static_cast<size_t>(ranks) : 0, Attempt{});
  j.ranks_ended = 0;
  j.first_end_rank = -1;
  j.first_end_t = 0;
  j.first_end_oom = false;
  j.hang_called = false;
  j.stacks.assign(static_cast<size_t>(ranks), std::string());
  int port = ranks > 1 ? free_local_port() : 0;
  // Every rank's slot exists before any starts: a rank that fails to start finishes at once and must find
  // its siblings counted.
  for (int k = 0; k < ranks; ++k) j.current.push_back(std::make_unique<AttemptRun>(*ctx));
  for (int k = 0; k < ranks; ++k) {
    if (j.finished) return;
    launch_rank(j, reference, n, ranks > 1 ? k : -1, port, work);
  }
}

// One process of attempt `n`: the whole attempt for a job without ranks (rank -1), else rank `rank`.
void JobRunner::Impl::launch_rank(JobState& j, bool reference, int n, int rank, int port, const std::string& work) {
  AttemptRun& r = *j.current[static_cast<size_t>(std::max(rank, 0))];
  r.job = &j;
  r.reference = reference;
  r.rank = rank;
  r.attempt.index = n;
  r.attempt.faults_enabled = !reference && j.faults_enabled;
  r.attempt.start = now();
  r.seen_step_t = r.attempt.start;
  std::string stem = (reference ? "reference-" : "attempt-") + std::to_string(n) + (rank >= 0 ? ".rank" + std::to_string(rank) : "");
  r.attempt.log_path = (fs::path(j.dir) / (stem + ".log")).string();
  r.events_path = (fs::path(j.dir) / (stem + ".events.jsonl")).string();
  // Note [A run folder the runner owns] in run_folder.h: relative to the job's folder, no link followed.
  const int dir = j.dir_fd.get();
  if (rank >= 0) {
    r.stacks_path = (fs::path(j.dir) / (stem + ".stacks.txt")).string();
    remove_file_at(dir, stem + ".stacks.txt");
  }

  int ev = create_file_at(dir, stem + ".events.jsonl");
  if (ev < 0) return fail_attempt(r, "cannot create the event log " + r.events_path + ": " + errno_text(errno));
  close(ev);
  r.log_fd = create_file_at(dir, stem + ".log");
  if (r.log_fd < 0) return fail_attempt(r, "cannot create the output log " + r.attempt.log_path + ": " + errno_text(errno));

  // Note [A block the job cannot take down] in control_block.h; a named segment where memfds are missing.
  r.cb = control_block_create_sealed(r.cb_fd);
  if (r.cb) {
    r.control_name = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(r.cb_fd);
  } else {
    r.shm_name = "/oomh-" + std::to_string(getpid()) + "-" + std::to_string(j.index) + "-" + (reference ? "r" : "") + std::to_string(n) +
                 (rank >= 0 ? "-" + std::to_string(rank) : "");
    r.cb = control_block_create(r.shm_name.c_str());
    if (!r.cb && errno == EEXIST) {
      // Left by an earlier runner of this same pid (we unlink ours): it is ours to replace.
      shm_unlink(r.shm_name.c_str());
      r.cb = control_block_create(r.shm_name.c_str());
    }
    r.control_name = r.shm_name;
  }
  if (!r.cb) {
    int e = errno;
    r.shm_name.clear();
    return fail_attempt(r, "cannot create the control block: " + errno_text(e));
  }

  AttemptContext actx;
  actx.job = j.spec->name;
  actx.attempt = n;
  actx.control_name = r.control_name;
  actx.events_path = r.events_path;
  actx.plan_json = j.spec->plan(r.attempt.faults_enabled).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  actx.flush_steps = j.spec->flush_steps(r.attempt.faults_enabled);
  actx.workdir = work;
  for (const Placement& q : j.placements)
    if (q.gpu) actx.gpus.push_back(*q.gpu);
  actx.threads = threads_each;
  if (rank >= 0) {
    actx.rank = rank;
    actx.world_size = std::max(1, j.spec->ranks);
    actx.master_port = port;
    actx.stacks_path = r.stacks_path;
  }
  std::vector<std::string> env = job_environment(*j.spec, options.paths, actx);
  if (j.sidecar && j.sidecar->proc) env.push_back("OOMH_RESERVE_PID=" + std::to_string(j.sidecar->proc->id()));
  std::vector<std::string> argv = attempt_argv(*j.spec, work, n);
  if (!reference && n == 0 && rank <= 0) j.outcome->argv = argv;
  nlohmann::json start_fields = {{"attempt", n}, {"argv", argv}};
  if (rank >= 0) start_fields["master_port"] = port;
  if (j.sidecar && j.sidecar->ready) start_fields["reserved"] = j.sidecar->held;  // real bytes held beside it
  r.attempt.events.push_back(runner_event(events::kAttemptStart, r.attempt.start, start_fields));
  if (argv.empty()) return fail_attempt(r, "the job has no command");
  std::string program = resolve_program(argv[0], env);
  if (program.empty()) return fail_attempt(r, "cannot start '" + argv[0] + "': command not found");

  std::vector<std::string> args(argv.begin() + 1, argv.end());
  bp::posix::default_launcher launcher;
  boost::system::error_code ec;
  JobSetup setup(env, j.cwd);
  // The executor overload: in Boost 1.81 the (context, error_code&, ...) overload forwards to the
  // throwing one.
  std::optional<bp::process> proc;
  std::string launch_error;
  try {
    proc.emplace(launcher(ctx->get_executor(), ec, program, args, bp::process_stdio{nullptr, r.out, r.err}, setup));
  } catch (const std::exception& e) {
    launch_error = e.what();
  }
  if (ec || !launch_error.empty()) {
    if (launcher.pid > 0) waitpid(launcher.pid, nullptr, 0);  // the child that failed to exec
    return fail_attempt(r, "cannot start '" + argv[0] + "'" + (j.cwd.empty() ? "" : " in " + j.cwd) + ": " +
                               (ec ? ec.message() : launch_error));
  }
  r.proc = std::move(proc);
  // The child called setsid() before exec, and the launcher returns after the exec: the group exists.
  // (setpgid from this side would race with setsid, which fails in a process that already leads a group.)
  r.pgid = r.proc->id();
  register_job_session(r.pgid);  // Note [Signals a job may send] in signals.h
  if (rank <= 0) progress(j, JobProgress::State::running, &r);

  AttemptRun* rp = &r;
  r.proc->async_wait([this, rp](boost::system::error_code, int) { on_exit(rp); });
  read_stream(rp, false);
  read_stream(rp, true);
  if (j.spec->timeout > 0) {
    r.timeout_timer.expires_after(seconds(j.spec->timeout));
    r.timeout_timer.async_wait([this, rp](boost::system::error_code e) {
      if (!e && !rp->exited) stop_attempt(*rp, AttemptRun::Stop::timeout);
    });
  }
  if (stopping) stop_attempt(r, AttemptRun::Stop::interrupt);
}

// The attempt could not start: record it as such, with the reason as the job's error.
void JobRunner::Impl::fail_attempt(AttemptRun& r, const std::string& why) {
  JobState& j = *r.job;
  r.attempt.end = now();
  if (r.rank >= 0 && j.first_end_rank < 0) {
    j.first_end_rank = r.rank;
    j.first_end_t = r.attempt.end;
  }
  r.attempt.end_kind = AttemptEnd::failed_to_start;
  r.attempt.output_tail = why + "\n";
  if (r.log_fd >= 0) {
    std::string line = "oomharness: " + why + "\n";
    write_log(r, line.data(), line.size());
  }
  if (j.outcome->error.empty()) j.outcome->error = why;
  r.exited = r.out_done = r.err_done = true;
  r.finished = true;
  finish_attempt(r);
}

void JobRunner::Impl::read_stream(AttemptRun* r, bool is_err) {
  asio::readable_pipe& pipe = is_err ? r->err : r->out;
  auto& buf = is_err ? r->err_buf : r->out_buf;
  pipe.async_read_some(asio::buffer(buf), [this, r, is_err](boost::system::error_code ec, size_t n) {
    consume(*r, is_err, (is_err ? r->err_buf : r->out_buf).data(), n, static_cast<bool>(ec));
    if (ec) {
      (is_err ? r->err_done : r->out_done) = true;
      maybe_finish(r);
      return;
    }
    read_stream(r, is_err);
  });
}

void JobRunner::Impl::consume(AttemptRun& r, bool is_err, const char* data, size_t n, bool eof) {
  const char* stream = is_err ? "stderr" : "stdout";
  double t = now();
  int pid = r.proc ? r.proc->id() : 0;
  std::string chunk;
  uint64_t cap = options.log_cap;
  uint64_t tail_cap = std::min<uint64_t>(cap / 4, 8ull << 20);
  auto on_line = [&](std::string_view line) {
    // Note [Bounded job logs]: the head goes to the file, the rest to the tail kept in memory.
    if (cap == 0 || (r.log_tail.empty() && r.log_written + chunk.size() + line.size() + 1 <= cap - tail_cap)) {
      chunk.append(line);
      chunk += '\n';
    } else {
      r.log_tail.emplace_back(line).push_back('\n');
      r.log_tail_bytes += line.size() + 1;
      while (r.log_tail_bytes > tail_cap && !r.log_tail.empty()) {
        r.log_tail_bytes -= r.log_tail.front().size();
        r.log_cut_bytes += r.log_tail.front().size();
        ++r.log_cut_lines;
        r.log_tail.pop_front();
      }
    }
    r.tail.add(line);
    if (!r.attempt.oom_message && is_oom_message(line)) r.attempt.oom_message = true;
    if (r.job->observer && !r.job->observer->empty()) {
      r.job->observer->match(line, stream, t, pid, r.hits);
      r.observed.add(r.hits);
    }
  };
  LineSplitter& split = is_err ? r.err_split : r.out_split;
  split.feed(data, n, on_line);
  if (eof) split.finish(on_line);
  write_log(r, chunk.data(), chunk.size());
}

void JobRunner::Impl::write_log(AttemptRun& r, const char* data, size_t n) {
  for (size_t off = 0; r.log_fd >= 0 && r.log_errno == 0 && off < n;) {
    ssize_t w = write(r.log_fd, data + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      r.log_errno = w < 0 ? errno : EIO;  // reported by close_log
      break;
    }
    off += static_cast<size_t>(w);
    r.log_written += static_cast<uint64_t>(w);
  }
}

// Writes the cut and the tail, closes the log and puts what went wrong into the attempt's events.
void JobRunner::Impl::close_log(AttemptRun& r) {
  if (r.log_fd < 0) return;
  double t = r.attempt.end != 0 ? r.attempt.end : now();
  if (r.log_cut_bytes > 0) {
    std::string note = "[oomharness: " + std::to_string(r.log_cut_bytes) + " bytes (" + std::to_string(r.log_cut_lines) +
                       " lines) of output cut here: the log keeps at most " + std::to_string(options.log_cap) +
                       " bytes, its first and its last lines]\n";
    write_log(r, note.data(), note.size());
    r.attempt.events.push_back(runner_event(events::kWarning, t,
                                            {{"message", "the output log " + r.attempt.log_path + " was cut: " +
                                                             std::to_string(r.log_cut_bytes) + " bytes (" +
                                                             std::to_string(r.log_cut_lines) + " lines) in its middle are not kept"},
                                             {"log_cut_bytes", r.log_cut_bytes},
                                             {"log_cut_lines", r.log_cut_lines}}));
  }
  for (const std::string& line : r.log_tail) write_log(r, line.data(), line.size());
  r.log_tail.clear();
  r.log_tail_bytes = 0;
  if (close(r.log_fd) != 0 && r.log_errno == 0 && errno != EINTR) r.log_errno = errno;
  r.log_fd = -1;
  if (r.log_errno != 0)
    r.attempt.events.push_back(runner_event(events::kWarning, t,
                                            {{"message", "the output log " + r.attempt.log_path + " could not be written after " +
                                                             std::to_string(r.log_written) + " bytes: " + errno_text(r.log_errno) +
                                                             "; the rest of the output is missing"}}));
}

// Closes what a finished attempt still holds and destroys it once the handlers that may name it have run
// (Note [Constant cost per job]).
void JobRunner::Impl::retire(std::unique_ptr<AttemptRun> r) {
  if (!r) return;
  boost::system::error_code ignored;
  r->timeout_timer.cancel();
  r->kill_timer.cancel();
  r->drain_timer.cancel();
  r->out.close(ignored);
  r->err.close(ignored);
  release_control_block(*r);
  close_log(*r);
  asio::post(*ctx, [dead = std::move(r)]() mutable { dead.reset(); });
}

// Note [Nothing left behind]: the processes re-parented to the runner (a child subreaper) that belong to
// attempt `r` (their environment names its control block), or, with `all` or when no attempt runs, every
// one that is not a running attempt's leader or a sidecar.
void JobRunner::Impl::kill_orphans(const AttemptRun* r, bool all) {
  for (int round = 0; round < 100; ++round) {
    std::vector<pid_t> known;
    bool others_running = false;
    for (auto& j : jobs) {
      for (auto& c : j->current)
        if (c && c->proc && !c->exited) {
          known.push_back(static_cast<pid_t>(c->proc->id()));
          if (c.get() != r) others_running = true;
        }
      if (j->sidecar && j->sidecar->proc && !j->sidecar->exited) known.push_back(static_cast<pid_t>(j->sidecar->proc->id()));
    }
    bool killed = false;
    for (pid_t pid : runner_children()) {
      if (std::find(known.begin(), known.end(), pid) != known.end() || is_command_child(pid)) continue;
      if (process_gone(pid)) {  // a zombie of ours: reap it
        waitpid(pid, nullptr, WNOHANG);
        continue;
      }
      bool mine = all;
      if (!mine) {
        std::optional<std::string> control = environment_value(pid, "OOMH_CONTROL");
        mine = control ? (r && *control == r->control_name) : !others_running;
      }
      if (!mine) continue;
      kill_and_reap(pid);
      killed = true;
    }
    if (!killed) return;
  }
}

void JobRunner::Impl::on_exit(AttemptRun* r) {
  r->exited = true;
  r->attempt.end = now();
  if (r->rank >= 0 && r->job->first_end_rank < 0) {
    r->job->first_end_rank = r->rank;
    r->job->first_end_t = r->attempt.end;
  }
  r->status = r->proc->native_exit_code();
  r->timeout_timer.cancel();
  r->kill_timer.cancel();
  // Whatever the job left running in its group goes now: no process outlives its attempt, and the
  // pipes it may hold open close.
  if (r->pgid > 0 && kill(-r->pgid, 0) == 0) kill(-r->pgid, SIGKILL);
  wait_group_gone(r->pgid);
  kill_orphans(r, false);  // a setsid grandchild holding the pipes goes too
  if (!(r->out_done && r->err_done)) {
    r->drain_timer.expires_after(seconds(kDrainTimeout));
    r->drain_timer.async_wait([r](boost::system::error_code e) {
      if (e || r->finished) return;
      // Something outside the group (it called setsid) still holds the pipes: stop reading them.
      boost::system::error_code ignored;
      r->out.close(ignored);
      r->err.close(ignored);
    });
  }
  maybe_finish(r);
}

void JobRunner::Impl::stop_attempt(AttemptRun& r, AttemptRun::Stop why) {
  if (r.exited || r.stop != AttemptRun::Stop::none || r.pgid <= 0) return;
  r.stop = why;
  kill(-r.pgid, SIGTERM);
  AttemptRun* rp = &r;
  // Note [Hang detection]: a rank stuck in a collective has nothing to save; it gets at most kHangGrace.
  r.kill_timer.expires_after(seconds(why == AttemptRun::Stop::hang ? std::min(kHangGrace, r.job->spec->grace) : r.job->spec->grace));
  r.kill_timer.async_wait([rp](boost::system::error_code e) {
    if (!e && !rp->exited) kill(-rp->pgid, SIGKILL);
  });
}

// Note [Hang detection]
// A distributed job's ranks wait for each other in collectives: when one rank dies (of an OOM, say) the
// others block until a watchdog fires, tens of minutes later. So, for a job with ranks > 1, once some
// rank's process has exited or raised an OOM (its block's ooms_seen), each sample looks at the ranks still
// running: one whose control-block step (the probe's step in progress) has not changed for the job's
// hang_stall seconds since the later of that event and its own last step is hung. The runner then records a `hang` event (the rank, its step, how long
// it waited, the stall limit, the rank that ended first), sends SIGUSR1 to every running rank (the Python
// probe has faulthandler dump every thread's stack to OOMH_STACKS on it), waits kStacksWait, reads the
// stack files into the attempt's ranks, and stops every running rank (SIGTERM, SIGKILL kHangGrace later:
// a rank that ignores SIGTERM cannot keep the job alive). So the job ends within the stall limit plus
// about 1.5 s plus one sample interval. A rank that exited 0 counts as ended: the others must not wait for it
// forever either. Without the probe the step stays unknown (-1), never changes, and the stall counts from
// the exit: the job is still ended, with no stacks.
void JobRunner::Impl::check_hang(JobState& j) {
  if (j.spec->ranks < 2 || j.hang_called || j.first_end_rank < 0 || stopping) return;
  double t = now();
  AttemptRun* worst = nullptr;
  double worst_wait = 0;
  for (auto& c : j.current) {
    if (!c || c->exited || c->finished || c->stop != AttemptRun::Stop::none || !c->proc) continue;
    double waited = t - std::max(c->seen_step_t, j.first_end_t);
    if (waited > j.spec->hang_stall && waited > worst_wait) {
      worst = c.get();
      worst_wait = waited;
    }
  }
  if (worst) take_stacks(j, *worst, worst_wait);
}

void JobRunner::Impl::take_stacks(JobState& j, AttemptRun& stalled, double waited) {
  j.hang_called = true;
  stalled.attempt.events.push_back(runner_event(events::kHang, now(),
                                                {{"rank", stalled.rank},
                                                 {"step", stalled.seen_step == INT64_MIN ? int64_t{-1} : stalled.seen_step},
                                                 {"waited", waited},
                                                 {"stall", j.spec->hang_stall},
                                                 {"after_rank", j.first_end_rank},
                                                 {"after", j.first_end_oom ? "oom" : "exit"}}));
  for (auto& c : j.current)
    if (c && c->proc && !c->exited) kill(static_cast<pid_t>(c->proc->id()), SIGUSR1);
  if (!j.stacks_timer) j.stacks_timer = std::make_unique<asio::steady_timer>(*ctx);
  j.stacks_timer->expires_after(seconds(kStacksWait));
  JobState* jp = &j;
  j.stacks_timer->async_wait([this, jp](boost::system::error_code e) {
    if (e || jp->finished) return;
    for (auto& c : jp->current) {
      if (!c || c->rank < 0 || c->stacks_path.empty()) continue;
      std::string text = read_text_file(c->stacks_path, kMaxStacksBytes);
      if (!text.empty()) jp->stacks[static_cast<size_t>(c->rank)] = std::move(text);
    }
    for (auto& c : jp->current)
      if (c && !c->exited) stop_attempt(*c, AttemptRun::Stop::hang);
  });
}

void JobRunner::Impl::maybe_finish(AttemptRun* r) {
  if (r->finished || !r->exited || !r->out_done || !r->err_done) return;
  r->finished = true;
  r->drain_timer.cancel();
  finish_attempt(*r);
}

void JobRunner::Impl::release_control_block(AttemptRun& r) {
  if (r.cb) {
    control_block_close(r.cb);
    r.cb = nullptr;
  }
  if (!r.shm_name.empty()) {
    shm_unlink(r.shm_name.c_str());
    r.shm_name.clear();
  }
  if (r.cb_fd >= 0) {
    close(r.cb_fd);
    r.cb_fd = -1;
  }
}

void JobRunner::Impl::finish_attempt(AttemptRun& r) {
  JobState& j = *r.job;
  claim_signals();  // before its session is forgotten: what it sent while it ran is its own
  forget_job_session(r.pgid);
  wait_group_gone(r.pgid);
  kill_orphans(&r, false);
  if (r.cb) {
    sample(r, true);
    const ControlBlock& cb = *r.cb;
    ShimRecord shim;
    shim.processes = cb.process_count.load(std::memory_order_relaxed);
    shim.armed = cb.shims_armed.load(std::memory_order_relaxed);
    shim.rejected = cb.plans_rejected.load(std::memory_order_relaxed);
    shim.ways_in = cb.ways_in.load(std::memory_order_relaxed);
    shim.driver_called = cb.first_driver_call_ns.load(std::memory_order_relaxed) != 0;
    for (const DeviceCounters& d : cb.devices) shim.allocations += d.alloc_calls.load(std::memory_order_relaxed);
    r.attempt.shim = shim;
  }
  release_control_block(r);
  close_log(r);

  Attempt& a = r.attempt;
  if (a.end_kind != AttemptEnd::failed_to_start) {
    if (WIFEXITED(r.status)) a.exit_code = WEXITSTATUS(r.status);
    else if (WIFSIGNALED(r.status)) a.signal = WTERMSIG(r.status);
    if (r.stop == AttemptRun::Stop::timeout || r.stop == AttemptRun::Stop::hang) a.end_kind = AttemptEnd::timed_out;
    else if (r.stop == AttemptRun::Stop::interrupt) a.end_kind = AttemptEnd::interrupted;
    else a.end_kind = a.signal ? AttemptEnd::signalled : AttemptEnd::exited;
  }
  a.output_tail = r.tail.text().empty() ? a.output_tail : r.tail.text();

  size_t bad = 0;
  std::vector<Event> logged = read_event_log(r.events_path, &bad, &a.thinned);
  a.events.insert(a.events.end(), std::make_move_iterator(logged.begin()), std::make_move_iterator(logged.end()));
  // Output read after the exit was seen was still written before it: an observed line never comes after
  // the attempt's end in the trace.
  std::vector<Event> observed = r.observed.take();
  for (Event& e : observed) e.t = std::min(e.t, a.end);
  a.events.insert(a.events.end(), std::make_move_iterator(observed.begin()), std::make_move_iterator(observed.end()));
  if (r.observed.dropped() > 0)
    a.events.push_back(runner_event(events::kWarning, a.end,
                                    {{"message", std::to_string(r.observed.dropped()) + " observed value(s) were dropped: the job printed more lines matching its observe: patterns than are kept (" +
                                                     std::to_string(kMaxObserved) + " values; one matching line in " +
                                                     std::to_string(r.observed.stride()) + " is kept)"},
                                     {"observed_dropped", r.observed.dropped()}}));
  if (bad > 0)
    a.events.push_back(runner_event(events::kWarning, a.end,
                                    {{"message", std::to_string(bad) + " line(s) of " + r.events_path + " were not valid events"}}));
  nlohmann::json exit_fields = {{"attempt", a.index},
                                {"code", a.exit_code ? nlohmann::json(*a.exit_code) : nlohmann::json()},
                                {"signal", a.signal ? nlohmann::json(*a.signal) : nlohmann::json()},
                                {"timed_out", a.end_kind == AttemptEnd::timed_out},
                                {"oom_message", a.oom_message}};
  if (a.end_kind == AttemptEnd::interrupted) exit_fields["interrupted"] = true;
  a.events.push_back(runner_event(events::kAttemptExit, a.end, std::move(exit_fields)));
  std::stable_sort(a.events.begin(), a.events.end(), [](const Event& x, const Event& y) { return x.t < y.t; });

  bool reference = r.reference;
  std::vector<Attempt>& into = reference ? j.outcome->trace.reference : j.outcome->trace.attempts;
  if (r.rank >= 0) {
    // Note [Ranks] in trace.h: the attempt is over when every rank is.
    j.rank_ends[static_cast<size_t>(r.rank)] = std::move(a);
    if (++j.ranks_ended < j.rank_ends.size()) return;
    Attempt merged = merge_ranks(std::move(j.rank_ends));
    j.rank_ends.clear();
    for (RankEnd& re : merged.ranks) re.stacks = j.stacks[static_cast<size_t>(re.rank)];
    into.push_back(std::move(merged));
  } else {
    split_ranks_from_events(a);  // a job that starts torchrun itself (Note [Ranks seen in events])
    into.push_back(std::move(a));
  }
  after_attempt(j, into.back(), reference);
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
// Sampling the control blocks.

void JobRunner::Impl::arm_sampler() {
  sample_timer->expires_after(seconds(options.sample_interval > 0 ? options.sample_interval : 0.05));
  sample_timer->async_wait([this](boost::system::error_code ec) {
    if (ec || finished_count == jobs.size()) return;
    claim_signals();
    for (auto& j : jobs) {
      for (auto& c : j->current)
        if (c && c->cb && !c->finished) sample(*c, false);
      if (AttemptRun* r = j->lead(); r && r->cb && !r->finished) progress(*j, JobProgress::State::running, r);
      if (!j->finished) check_hang(*j);
    }
    arm_sampler();
  });
}

// Records the devices the job used. Beyond kMaxSamples the series is thinned (every other sample kept)
// and later samples are taken at half the rate, so a long job keeps an even, bounded record.
void JobRunner::Impl::sample(AttemptRun& r, bool last) {
  // Note [Bytes of dead processes]: before the figures are read, so that they no longer count them.
  for (const Reclaimed& g : reclaim_dead_processes(*r.cb))
    r.attempt.events.push_back(runner_event(events::kReclaimed, now(), {{"pid", g.pid}, {"device", g.device}, {"bytes", g.bytes}}));
  const ControlBlock* cb = r.cb;
  if (int64_t now_step = cb->step.load(std::memory_order_relaxed); now_step != r.seen_step) {
    r.seen_step = now_step;
    r.seen_step_t = now();
  }
  // Note [Hang detection]: a rank that raised an OOM starts the watch as one that exited does.
  if (r.rank >= 0 && r.job->first_end_rank < 0 && cb->ooms_seen.load(std::memory_order_relaxed) > 0) {
    r.job->first_end_rank = r.rank;
    r.job->first_end_t = now();
    r.job->first_end_oom = true;
  }
  if (!last && (r.tick++ % r.stride) != 0) return;
  double t = now();
  int64_t step = cb->step.load(std::memory_order_relaxed);
  uint32_t n = std::min<uint32_t>(cb->device_count.load(std::memory_order_relaxed), kMaxDevices);
  std::vector<MemorySample>& out = r.attempt.samples;
  for (uint32_t d = 0; d < n; ++d) {
    const DeviceCounters& c = cb->devices[d];
    MemorySample s;
    s.t = t;
    s.device = static_cast<int>(d);
    s.held = c.held.load(std::memory_order_relaxed);
    s.peak = c.peak.load(std::memory_order_relaxed);
    s.cap = c.cap.load(std::memory_order_relaxed);
    s.step = step;
    s.rank = r.rank;
    if (s.peak == 0 && s.cap == 0 && c.alloc_calls.load(std::memory_order_relaxed) == 0) continue;
    out.push_back(s);
  }
  if (out.size() > kMaxSamples) {
    size_t keep = 0;
    for (size_t i = 0; i < out.size(); i += 2) out[keep++] = out[i];
    out.resize(keep);
    r.stride *= 2;
  }
}

// ---------------------------------------------------------------------------------------------------
// The reservation sidecar (runner/sidecar/reserve.cpp): started before the job's first attempt, holds
// memory.reserve bytes of real device memory until the job is over.

void JobRunner::Impl::start_sidecar(JobState& j) {
  j.sidecar = std::make_unique<Sidecar>(*ctx);
  Sidecar& s = *j.sidecar;
  std::vector<std::string> args = {"--device", "0"};
  if (j.spec->memory.leave) args.insert(args.end(), {"--leave", std::to_string(*j.spec->memory.leave)});
  else args.insert(args.end(), {"--bytes", std::to_string(j.spec->memory.reserve)});
  if (j.spec->memory.reserve_chunk) {
    args.insert(args.end(), {"--chunk", std::to_string(*j.spec->memory.reserve_chunk), "--fragment"});
  }
  std::string program = options.paths.reserve_program;
  std::vector<std::string> env = sidecar_environment(*j.spec, options.paths, j.placements.front().gpu);
  std::string log = (fs::path(j.dir) / "reserve.log").string();
  bp::posix::default_launcher launcher;
  boost::system::error_code ec;
  JobSetup setup(env, "");
  if (program.empty()) ec = boost::system::error_code(ENOENT, boost::system::system_category());
  else {
    auto proc = launcher(ctx->get_executor(), ec, program, args, bp::process_stdio{s.in, s.out, bp::filesystem::path(log)}, setup);
    if (!ec) s.proc.emplace(std::move(proc));
    else if (launcher.pid > 0) waitpid(launcher.pid, nullptr, 0);
  }
  if (ec) {
    s.exited = true;
    j.outcome->error = "cannot start the reservation sidecar '" + program + "': " + ec.message();
    return finish_job(j);
  }
  JobState* jp = &j;
  // One wait for the sidecar's whole life: an exit before READY shows as end of file on its stdout;
  // an exit we asked for (stop_sidecar) completes the job.
  s.proc->async_wait([this, jp](boost::system::error_code, int) {
    Sidecar& sc = *jp->sidecar;
    sc.exited = true;
    sc.kill_timer.cancel();
    if (sc.stopping) complete_job(*jp);
  });
  s.timer.expires_after(seconds(kSidecarReadyTimeout));
  s.timer.async_wait([this, jp](boost::system::error_code e) {
    Sidecar& sc = *jp->sidecar;
    if (e || sc.ready || sc.stopping || jp->finished) return;
    if (jp->outcome->error.empty()) jp->outcome->error = "the reservation sidecar did not report READY within 30 s";
    finish_job(*jp);
  });
  sidecar_read(jp);
}

void JobRunner::Impl::sidecar_read(JobState* j) {
  Sidecar& s = *j->sidecar;
  asio::async_read_until(s.out, asio::dynamic_buffer(s.buf), '\n', [this, j](boost::system::error_code ec, size_t n) {
    Sidecar& sc = *j->sidecar;
    if (sc.ready || sc.stopping || j->finished) return;
    std::string line = ec ? sc.buf : sc.buf.substr(0, n);
    if (!ec) sc.buf.erase(0, n);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (!ec && line.rfind("READY", 0) == 0) {
      sc.ready = true;
      sc.held = std::strtoull(line.c_str() + 5, nullptr, 10);
      sc.timer.cancel();
      if (stopping) {
        j->outcome->interrupted = true;
        return finish_job(*j);
      }
      return start_attempt(*j, false);
    }
    if (!ec && line.rfind("ERROR", 0) != 0) return sidecar_read(j);  // some other chatter
    sc.timer.cancel();
    if (j->outcome->error.empty())
      j->outcome->error = "the reservation sidecar failed: " +
                          (line.rfind("ERROR", 0) == 0 ? line.substr(std::min<size_t>(6, line.size()))
                                                       : std::string("it exited before reporting READY"));
    finish_job(*j);
  });
}

// Closing stdin asks the sidecar to free and exit; SIGTERM does too; SIGKILL if it takes longer than
// kSidecarStopGrace. complete_job runs once it has been reaped.
void JobRunner::Impl::stop_sidecar(JobState& j) {
  Sidecar& s = *j.sidecar;
  if (s.stopping) return;
  s.stopping = true;
  boost::system::error_code ignored;
  s.in.close(ignored);
  s.timer.cancel();
  pid_t pid = s.proc ? s.proc->id() : -1;
  if (pid > 0) kill(pid, SIGTERM);
  JobState* jp = &j;
  s.kill_timer.expires_after(seconds(kSidecarStopGrace));
  s.kill_timer.async_wait([pid, jp](boost::system::error_code e) {
    if (!e && !jp->sidecar->exited && pid > 0) kill(pid, SIGKILL);
  });
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
