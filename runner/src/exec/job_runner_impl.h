#pragma once
// The job runner's state, shared by its rooms (one file each, all of them JobRunner::Impl's methods):
//   job_runner.cpp            the orchestration: run(), what follows an attempt, interruption, signals
//   job_runner_scheduling.cpp which job starts next, on which GPUs, and its end (Note [GPU packing])
//   job_runner_attempts.cpp   an attempt's start (files, control block, process) and its end (the trace)
//   job_runner_io.cpp         the attempt's pipes and its bounded log (Note [Bounded job logs])
//   job_runner_reaping.cpp    stopping and reaping processes (Note [Nothing left behind])
//   job_runner_hangs.cpp      a distributed attempt's hung ranks (Note [Hang detection])
//   job_runner_sampling.cpp   the control blocks' samples
//   job_runner_sidecar.cpp    the reservation sidecar
// Note [Runner event loop] in job_runner.cpp says how they meet: one thread, one io_context.

// GCC 12 reports "potential null pointer dereference" inside Boost.Asio's inlined scheduler and executor
// code (system headers, not ours) at -O1 and above; these middle-end warnings ignore the system-header rule.
#pragma GCC diagnostic ignored "-Wnull-dereference"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/writable_pipe.hpp>
#include "exec/boost_process.h"
#include "exec/escapes.h"

#include "exec/gpu_packing.h"
#include "exec/job_namespace.h"
#include "exec/node_group.h"
#include "exec/output.h"
#include "exec/run_folder.h"
#include "oomharness/control_block.h"
#include "oomharness/events.h"
#include "oomharness/runner/job_runner.h"

namespace oomh {

namespace exec {

namespace asio = boost::asio;
namespace bp = boost::process::v2;

inline constexpr size_t kMaxSamples = 20000;           // per attempt; beyond, samples are thinned (every other kept)
inline constexpr double kSidecarReadyTimeout = 30;     // seconds to wait for the sidecar's READY
inline constexpr double kSidecarStopGrace = 5;         // seconds between SIGTERM and SIGKILL for the sidecar
inline constexpr double kDrainTimeout = 5;             // seconds to wait for pipes after the process exited
inline constexpr double kStacksWait = 0.5;             // seconds between SIGUSR1 (stacks) and SIGTERM for a hang
inline constexpr double kHangGrace = 1;                // seconds between SIGTERM and SIGKILL for a hung rank
inline constexpr double kRestartGrace = 5;             // seconds the other ranks get to end by themselves after a
                                                       // rank died of what restarts the job (Note [A restart of every rank])
inline constexpr size_t kMaxStacksBytes = 256 * 1024;  // of one rank's stack dump kept in the trace

inline double now() { return events::now_seconds(); }

inline std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(std::max(0.0, s)));
}

// Does `restart.on` ask for a new attempt after `a` (a whole attempt, or one rank's)?
bool wants_restart(const Attempt& a, const std::vector<std::string>& on);

// An event the runner itself records (src "runner") into an attempt.
Event runner_event(const char* kind, double t, nlohmann::json fields);

inline std::string errno_text(int e) { return std::strerror(e); }

}  // namespace exec

struct JobState;

// One attempt's process and everything the runner watches about it.
struct AttemptRun {
  explicit AttemptRun(exec::asio::io_context& ctx)
      : out(ctx), err(ctx), timeout_timer(ctx), kill_timer(ctx), drain_timer(ctx) {}

  JobState* job = nullptr;
  bool reference = false;
  Attempt attempt;
  std::optional<exec::bp::process> proc;
  pid_t pgid = -1;
  exec::asio::readable_pipe out, err;
  std::array<char, 16384> out_buf{}, err_buf{};
  exec::LineSplitter out_split, err_split;
  exec::asio::steady_timer timeout_timer, kill_timer, drain_timer;
  int log_fd = -1;
  std::string shm_name;      // a POSIX shared-memory name (the fallback when memfds are not available)
  int cb_fd = -1;            // the sealed memfd of the control block
  std::string control_name;  // OOMH_CONTROL as the job sees it
  ControlBlock* cb = nullptr;
  // Note [Sealed event lines] in include/oomharness/event_seal.h: the attempt's key, as the runner drew it
  // (the block's copy is the job's to overwrite; this one is what the log is checked with).
  unsigned char seal_key[32] = {};
  std::string events_path;
  // The event log the runner made, held open for reading: read through this at the end, so that a job that
  // removes or replaces the file (Note [A run folder removed during the run] in run_folder.h, Note [An event
  // log replaced] in job_runner_attempts.cpp) cannot take what the shim wrote into it away.
  int events_fd = -1;
  bool restored = false;     // its folder was removed while it ran and made again (restore_removed_folders)
  int rank = -1;             // a job with ranks > 1: this process's rank (Note [Ranks] in trace.h)
  int node = -1;             // one torchrun per node: the node whose torchrun it is (Note [One torchrun per node])
  std::string stacks_path;   // OOMH_STACKS
  std::vector<int> outside_seen;  // Note [Processes outside the shim]: pids already written as outside the shim
  bool plan_tamper_seen = false;  // Note [A plan only the runner writes]: the runner's own `tamper` event is in
  int64_t seen_step = INT64_MIN;  // the control block's step at the last sample, and when it last changed
  double seen_step_t = 0;
  bool exited = false, out_done = false, err_done = false, finished = false;
  enum class Stop { none, timeout, interrupt, hang, restart } stop = Stop::none;
  int status = 0;
  exec::ObservedValues observed;  // Note [Bounded observed values] in output.h
  std::vector<Event> hits;  // one line's, before `observed` takes them
  exec::OutputTail tail{60};
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
  explicit Sidecar(exec::asio::io_context& ctx) : in(ctx), out(ctx), timer(ctx), kill_timer(ctx) {}
  std::optional<exec::bp::process> proc;
  exec::asio::writable_pipe in;
  exec::asio::readable_pipe out;
  std::string buf;
  exec::asio::steady_timer timer;       // READY timeout
  exec::asio::steady_timer kill_timer;  // SIGKILL after SIGTERM
  bool ready = false, exited = false, stopping = false;
  uint64_t held = 0;              // what READY said it holds
};

struct JobState {
  size_t index = 0;
  const JobSpec* spec = nullptr;
  JobOutcome* outcome = nullptr;
  std::unique_ptr<exec::LineObserver> observer;
  std::vector<exec::Placement> placements;  // one, or one per rank (Note [One GPU per rank] in gpu_packing.h)
  std::string dir;            // <out>/<job>
  exec::DirFd dir_fd;               // the same folder, opened (Note [A run folder the runner owns] in run_folder.h)
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
  int first_end_node = -1;          // ... or the node whose torchrun did (Note [One torchrun per node]; its rank is
                                    // not known while it runs); first_end_t > 0 once either is set
  double first_end_t = 0;
  bool first_end_oom = false;       // it raised an OOM (it may still run) rather than exited
  bool hang_called = false;
  bool restart_stop_called = false;  // Note [A restart of every rank] in job_runner_hangs.cpp
  std::vector<std::string> stacks;  // per rank, read after SIGUSR1
  // Note [Ranks on several nodes] in node_group.h (a Slurm node agent only): the attempt's key in the nodes'
  // shared folder, whether this node's first end was told to the others, when they were last looked at, and
  // a node that disappeared.
  std::string group_key;
  bool end_published = false;
  double group_look = 0;
  std::string node_lost;
  std::unique_ptr<exec::asio::steady_timer> stacks_timer;

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
  exec::asio::io_context* ctx = nullptr;
  exec::DirFd out_fd;  // options.out_dir, opened (Note [A run folder the runner owns] in run_folder.h)
  std::vector<std::unique_ptr<JobState>> jobs;
  std::unique_ptr<exec::GpuPacker> packer;
  std::deque<size_t> pending;
  std::optional<int> threads_each;  // OMP_NUM_THREADS for each job (Note [CPU share of packed jobs])
  int running = 0;
  size_t finished_count = 0;
  bool stopping = false;
  bool no_new_jobs = false;  // stop_starting()
  std::unique_ptr<exec::asio::steady_timer> sample_timer;
  std::unique_ptr<exec::asio::readable_pipe> wake_pipe;
  std::array<char, 64> wake_buf{};
  // Note [A runner its jobs cannot signal] in job_namespace.h: the run's PID namespace, or the watchdog and
  // its reports.
  std::unique_ptr<exec::JobNamespace> ns;
  // Note [Processes outside the shim] in escapes.h: NVML's processes, asked every kNvmlPollSeconds (null, or
  // not available(), where no NVML or no GPU is found).
  std::unique_ptr<exec::GpuProcessList> gpu_processes;
  double gpu_polled_at = 0;
  std::unique_ptr<exec::asio::readable_pipe> stopped_pipe;
  std::array<char, 16> stopped_buf{};

  std::vector<JobOutcome> run(const std::vector<JobSpec>& specs);
  void open_out_dir();
  void plan_jobs(const std::vector<JobSpec>& specs, std::vector<JobOutcome>& outcomes);
  void arm_loop();
  void end_run();

  // Scheduling.
  void schedule();
  void start_job(JobState& j, std::vector<exec::Placement> p);
  void finish_job(JobState& j);
  void complete_job(JobState& j);
  void progress(JobState& j, JobProgress::State state, const AttemptRun* r = nullptr);

  // Attempts.
  void start_attempt(JobState& j, bool reference);
  void launch_rank(JobState& j, bool reference, int n, size_t slot, int rank, int port, const std::string& work, int node = -1);
  void check_hang(JobState& j);
  void watch_nodes(JobState& j);  // Note [Ranks on several nodes]
  // `stalled` null: another node called the hang (it recorded the event); this node takes its ranks' stacks.
  void take_stacks(JobState& j, AttemptRun* stalled, double waited);
  const AttemptRun* rank_that_restarts_all(const JobState& j, double t) const;  // Note [A restart of every rank]
  void stop_for_restart(JobState& j, const AttemptRun& dead, double t);
  void fail_attempt(AttemptRun& r, const std::string& why);
  void read_stream(AttemptRun* r, bool is_err);
  void consume(AttemptRun& r, bool is_err, const char* data, size_t n, bool eof);
  void on_exit(AttemptRun* r);
  void stop_attempt(AttemptRun& r, AttemptRun::Stop why);
  void maybe_finish(AttemptRun* r);
  void finish_attempt(AttemptRun& r);
  void after_attempt(JobState& j, const Attempt& a, bool reference);
  void release_control_block(AttemptRun& r);
  // Note [A run folder removed during the run] in run_folder.h: the output folder and the job's folder made
  // again where a job removed them, and this attempt's log and event log written back; true when it had to.
  bool restore_removed_folders(AttemptRun& r);
  // The job's folder, made again (with the output folder) where it was removed.
  void reopen_job_dir(JobState& j);
  // Note [An event log replaced] in job_runner_attempts.cpp: what happened to the attempt's event log, when
  // its path no longer names the file the runner made.
  std::optional<std::string> replaced_event_log(const AttemptRun& r);
  void retire(std::unique_ptr<AttemptRun> r);
  void kill_orphans(const AttemptRun* r, bool all);
  void write_log(AttemptRun& r, const char* data, size_t n);
  void close_log(AttemptRun& r);

  // Sampling.
  void arm_sampler();
  void sample(AttemptRun& r, bool last);
  // Note [Processes outside the shim]: the GPU's processes that belong to a running attempt without its shim.
  void poll_gpu_processes();

  // Sidecar.
  void start_sidecar(JobState& j);
  void sidecar_read(JobState* j);
  void stop_sidecar(JobState& j);

  // Note [Signals a job may send] in signals.h: each recorded signal into the attempt that sent it.
  void claim_signals();

  // The watchdog's reports: the runner was stopped and continued (Note [A runner its jobs cannot signal]).
  void arm_watchdog_reports();

  // Interruption.
  void arm_wake();
  void on_interrupt();
};

}  // namespace oomh
