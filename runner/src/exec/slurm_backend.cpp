// The Slurm backend (Note [Backends] in backend.h): one Slurm job per suite job, an agent on the node.
//
// Note [Supervising Slurm jobs]
// - Submit: `sbatch --parsable` per job, its batch script `exec oomharness agent PLAN`. The job's environment
//   travels in the plan (Note [Agent plan and results]); sbatch runs with the submitter's environment
//   minus LD_PRELOAD (`--export=ALL` would carry it into the job, and it would be loaded into sbatch
//   itself). GPUs as `--gres` (SlurmOptions::gres); under Slurm the agent leaves CUDA_VISIBLE_DEVICES to
//   Slurm. `--time` is only a backstop: the agent enforces the job's timeout per attempt, and the backstop
//   covers every attempt (and the reference run) plus a margin, rounded up to whole minutes (Slurm checks
//   limits every 30 s or so anyway).
// - Poll: one `squeue -h -t all -j ID,ID,... -o '%i|%T|%r'` per interval for every job not yet ended,
//   whatever their number (bench/slurm_overhead.py counts the calls). A job squeue no longer lists has
//   ended too (MinJobAge passed); when squeue knows none of the ids it fails with "Invalid job id".
// - End: the agent's results file is the job's outcome. Without one, `scontrol show job -o` says what
//   Slurm did (state, reason, exit code) and the job is an error that says so, never a pass.
// - Ctrl-C: interrupt() wakes the loop; one `scancel` for every job not yet ended. Slurm sends SIGTERM to
//   the agent (and, with proctrack/linuxproc, to every process of the job), the agent stops its job's
//   process group as the local runner does and writes its results, marked interrupted. The loop waits for
//   the jobs to end (bounded), and a job cancelled before its agent wrote anything is interrupted.

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "exec/slurm_tools.h"
#include "oomharness/events.h"
#include "oomharness/policies/registry.h"
#include "oomharness/runner/agent_plan.h"
#include "oomharness/runner/backend.h"

namespace oomh {

namespace fs = std::filesystem;
using namespace exec;

namespace {

constexpr double kToolTimeout = 60;          // seconds for one sbatch/squeue/scancel/scontrol call
constexpr double kCancelWait = 90;           // after scancel, how long the jobs may take to end
constexpr double kSqueueGiveUp = 600;        // squeue failing this long (the controller is gone): stop waiting
constexpr double kShareCheckTimeout = 300;   // the shared-folder check waits for a node this long
// Note [Results that are late]
// When Slurm says a job COMPLETED (its batch script, the agent, exited 0, which it does only after its
// results file was renamed into place) but the file is not visible here, the shared filesystem is late:
// NFS clients cache directory lookups, negative ones included, for up to acdirmax (60 s by default).
// Listing the job's folder revalidates that cache; the runner looks again at every poll for kResultsGrace
// seconds before it calls the results missing. A job in any other final state is judged at once.
constexpr double kResultsGrace = 15;
// Note [COMPLETING is not an end]: a job Slurm shows COMPLETING with its results in place has its batch script
// done; it is judged so only after this long, since COMPLETING is also what a cancelled or timed-out job shows
// for a moment before CANCELLED or TIMEOUT (a job that scancels itself was seen COMPLETING at one poll
// once in a full ctest of 2026-11-29 on the 2-core machine, where slurm_cancelled_by_slurm's verdict then named
// COMPLETING instead of CANCELLED). A node that is gone keeps a step COMPLETING until it is marked down,
// minutes: after the grace the job ends as COMPLETING, as Note [Waiting for the node agents] says.
constexpr double kCompletingGrace = 3;

double now() { return events::now_seconds(); }

std::string read_text(const std::string& path, bool* ok = nullptr) {
  std::ifstream f(path, std::ios::binary);
  if (ok) *ok = static_cast<bool>(f);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string last_lines(const std::string& text, size_t n) {
  size_t at = text.size();
  while (at > 0 && text[at - 1] == '\n') --at;
  size_t end = at;
  for (size_t lines = 0; at > 0; --at)
    if (text[at - 1] == '\n' && ++lines == n) break;
  return text.substr(at, end - at);
}

std::string self_executable() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// A job name for squeue: printable, no spaces, bounded.
std::string slurm_job_name(const std::string& name) {
  std::string s = "oomh:";
  for (char c : name) {
    if (s.size() >= 120) break;
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':') ? c : '_';
  }
  return s;
}

// Whether the results file shows, after listing its folder (which refreshes an NFS client's lookup cache).
bool results_visible(const std::string& dir, const std::string& results) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {}
  return fs::exists(results, ec);
}

class SlurmBackend final : public Backend {
 public:
  SlurmBackend(RunOptions options, SlurmOptions slurm) : options_(std::move(options)), slurm_(std::move(slurm)) {
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
    env_ = tool_environment();
    agent_ = slurm_.agent_program.empty() ? self_executable() : slurm_.agent_program;
  }
  ~SlurmBackend() override {
    for (int fd : wake_)
      if (fd >= 0) close(fd);
  }

  std::optional<std::string> check() override;
  std::vector<JobOutcome> run(const std::vector<JobSpec>& jobs) override;
  void interrupt() noexcept override {
    stop_.store(true);
    if (wake_[1] >= 0) {
      char c = 1;
      ssize_t ignored = write(wake_[1], &c, 1);
      (void)ignored;
    }
  }
  bool interrupted() const noexcept override { return stop_.load(); }

 private:
  struct Entry {
    std::string id;          // empty: not submitted
    std::string dir, results, slurm_out;
    double submitted = 0;
    bool ended = false;
    bool running_seen = false;
    double completed_seen = 0;  // when squeue first said COMPLETED while no results were visible
    double completing_seen = 0;  // when squeue first said COMPLETING with the results visible
  };

  std::vector<std::string> common_args() const;
  std::vector<std::string> sbatch_args(const JobSpec& job, const Entry& e) const;
  void submit(size_t i, const JobSpec& job, Entry& e, JobOutcome& o);
  void finish(size_t i, Entry& e, JobOutcome& o, const std::string& state, const std::string& reason);
  void sleep_interval();

  RunOptions options_;
  SlurmOptions slurm_;
  std::atomic<bool> stop_{false};
  int wake_[2] = {-1, -1};
  std::vector<std::string> env_;
  std::string agent_;
};

std::vector<std::string> SlurmBackend::common_args() const {
  std::vector<std::string> args;
  if (!slurm_.partition.empty()) args.push_back("--partition=" + slurm_.partition);
  args.insert(args.end(), slurm_.sbatch_args.begin(), slurm_.sbatch_args.end());
  return args;
}

std::optional<std::string> SlurmBackend::check() {
  for (const char* tool : {"sbatch", "squeue", "scancel", "scontrol", "srun"}) {
    ToolResult r = run_tool({tool, "--version"}, env_, kToolTimeout);
    if (!r.ok())
      return std::string("--backend slurm: Slurm's `") + tool + "` does not run here (" + r.why() +
             "): run oomharness where Slurm's client commands work (a login node), or try the local cluster: "
             "scripts/slurm-local.sh up (docs/slurm.md)";
  }
  if (agent_.empty()) return "--backend slurm: cannot tell which oomharness the nodes should run (/proc/self/exe)";
  std::error_code ec;
  fs::create_directories(slurm_.work_dir, ec);
  if (ec) return "--backend slurm: cannot create " + slurm_.work_dir + ": " + ec.message();
  // Note [Is the output folder shared]: a file written here must read the same on a node, and the nodes
  // must be able to run this oomharness; a one-task srun checks both before the first job is submitted.
  std::random_device rd;
  std::string token = std::to_string(rd()) + "-" + std::to_string(getpid()) + "-" + std::to_string(now());
  std::string token_path = (fs::path(slurm_.work_dir) / "shared-check.txt").string();
  if (auto w = write_text_atomic(token_path, token + "\n")) return "--backend slurm: " + *w;
  std::vector<std::string> argv = {"srun", "--quiet", "--ntasks=1", "--time=5", "--job-name=oomh:shared-check"};
  auto common = common_args();
  argv.insert(argv.end(), common.begin(), common.end());
  // The script always exits 0 and prints three lines, so that a failed srun (no job ran) and a node that
  // cannot read the file or run the agent are told apart.
  const char* script = "cat \"$1\" 2>/dev/null || echo '(no such file)'; "
                       "if test -x \"$2\"; then echo agent-ok; else echo agent-missing; fi; hostname";
  for (const char* a : {"/bin/sh", "-c", script, "sh"}) argv.push_back(a);
  argv.push_back(token_path);
  argv.push_back(agent_);
  ToolResult r = run_tool(argv, env_, kShareCheckTimeout);
  fs::remove(token_path, ec);
  std::istringstream lines(r.out);
  std::string got, agent_ok, node;
  std::getline(lines, got);
  std::getline(lines, agent_ok);
  std::getline(lines, node);
  std::string out_dir = fs::path(slurm_.work_dir).parent_path().string();
  if (r.timed_out)
    return "--backend slurm: the check that the output folder " + out_dir + " is shared with the nodes got no node in " +
           std::to_string(static_cast<int>(kShareCheckTimeout)) + " s (is the partition busy or down? sinfo says)";
  if (!r.ok() || agent_ok.empty())
    return "--backend slurm: could not run the one-task job that checks the output folder is shared (" + r.why() +
           "); check --slurm-partition and --slurm-arg (docs/slurm.md)";
  if (got != token)
    return "--backend slurm: the output folder " + out_dir + " is not shared with the cluster's nodes: a job on " +
           (node.empty() ? "a node" : node) + " could not read " + token_path + " (it read: " + got +
           "). Give --out a folder every node mounts at the same path (docs/slurm.md, \"On a real cluster\")";
  if (agent_ok != "agent-ok")
    return "--backend slurm: the nodes cannot run " + agent_ + " (" + (node.empty() ? "a node" : node) +
           " has no such executable): install oomharness on a shared path, or name the nodes' copy with --slurm-agent "
           "(docs/slurm.md)";
  return std::nullopt;
}

std::vector<std::string> SlurmBackend::sbatch_args(const JobSpec& job, const Entry& e) const {
  std::vector<std::string> args = {"sbatch", "--parsable", "--job-name=" + slurm_job_name(job.name),
                                   "--output=" + e.slurm_out, "--chdir=" + e.dir, "--export=ALL",
                                   // A job Slurm requeued (its node failed) would run again behind the runner's
                                   // back, and its first agent's results would be overwritten: never requeue.
                                   "--no-requeue"};
  // The backstop covers every attempt and the reference run, each its timeout and grace, plus a margin.
  bool reference = false;
  for (const ExpectSpec& x : job.expect)
    if (const PolicyInfo* p = find_policy(x.policy); p && wants_reference(*p, x.args)) reference = true;
  double runs = job.restart.max + 1 + (reference ? 1 : 0);
  double seconds = runs * (job.timeout + job.grace + 10) + 120;
  args.push_back("--time=" + std::to_string(static_cast<long>(std::ceil(seconds / 60))));
  args.push_back("--cpus-per-task=" + std::to_string(std::max(1, slurm_.cpus)));
  if (job.nodes > 1) {
    // Note [Ranks on several nodes] in node_group.h: one allocation, ranks_per_node tasks on each node.
    args.push_back("--nodes=" + std::to_string(job.nodes));
    args.push_back("--ntasks-per-node=" + std::to_string(job.ranks_per_node));
  }
  if (!slurm_.mem.empty()) args.push_back("--mem=" + slurm_.mem);
  std::string gres;
  const bool on_gpu = job.device != DeviceChoice::virtual_device;
  if (slurm_.gres == "gpu") gres = "gpu:1";
  else if (slurm_.gres == "shard") gres = job.memory.limit ? "shard:1" : "gpu:1";
  else if (slurm_.gres == "auto" && on_gpu && !slurm_.simulate) gres = "gpu:1";
  if (!gres.empty() && job.nodes == 1) args.push_back("--gres=" + gres);
  auto common = common_args();
  args.insert(args.end(), common.begin(), common.end());
  args.push_back((fs::path(e.dir) / "batch.sh").string());
  return args;
}

void SlurmBackend::submit(size_t i, const JobSpec& job, Entry& e, JobOutcome& o) {
  e.dir = (fs::path(slurm_.work_dir) / ("job-" + std::to_string(i))).string();
  e.results = (fs::path(e.dir) / "results.json").string();
  e.slurm_out = (fs::path(e.dir) / "slurm.out").string();
  std::error_code ec;
  fs::create_directories(e.dir, ec);
  fs::remove(e.results, ec);  // a results file from an earlier run into the same folder must not count
  AgentPlan plan;
  plan.job = job;
  // A job without `cwd` runs in its suite's folder, which the local runner takes from where.file: relative
  // to the submitter's folder, which is not the agent's (--chdir is the job's Slurm folder).
  std::error_code aec;
  if (!job.where.file.empty() && job.where.file.front() != '<') {
    fs::path abs = fs::absolute(job.where.file, aec);
    if (!aec) plan.job.where.file = abs.lexically_normal().string();
  }
  plan.paths = options_.paths;
  plan.jobs_dir = options_.out_dir;
  plan.results_path = e.results;
  // Note [CPU share of packed jobs]: under Slurm a job's share is the CPUs it asked for.
  if (options_.threads_per_job.mode == ThreadsPerJob::Mode::fixed) plan.threads = options_.threads_per_job.threads;
  else if (options_.threads_per_job.mode == ThreadsPerJob::Mode::automatic) plan.threads = std::max(1, slurm_.cpus);
  if (const char* preload = std::getenv("LD_PRELOAD"); preload && *preload) plan.ld_preload = preload;
  plan.agent = agent_;
  std::string plan_path = (fs::path(e.dir) / "plan.json").string();
  std::string script = "#!/bin/sh\n# oomharness: the agent runs one job of the suite (docs/slurm.md)\nexec " + shell_quote(agent_) +
                       " agent " + shell_quote(plan_path) + "\n";
  std::optional<std::string> w =
      write_text_atomic(plan_path, to_json_value(plan).dump(1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (!w) w = write_text_atomic((fs::path(e.dir) / "batch.sh").string(), script);
  e.submitted = now();
  if (w) {
    o.error = "could not prepare the Slurm job: " + *w;
    e.ended = true;
    return;
  }
  std::vector<std::string> args = sbatch_args(job, e);
  if (job.nodes > 1) {
    // Note [Ranks on several nodes] in node_group.h. Only on the virtual device for now: GPUs per rank across
    // nodes are not asked of Slurm yet.
    if (job.device != DeviceChoice::virtual_device) {
      o.error = "nodes: " + std::to_string(job.nodes) + " runs on the virtual device only for now (--simulate, or device: virtual): "
                "GPUs for the ranks of a job on several nodes are not asked of Slurm yet (docs/slurm.md)";
      o.start = o.end = e.submitted;
      e.ended = true;
      return;
    }
    // A job the partition cannot hold would wait in the queue for ever (squeue: PartitionNodeLimit,
    // PartitionConfig): sbatch --test-only asks the controller first, and no rank starts.
    std::vector<std::string> test = args;
    test.insert(test.begin() + 1, "--test-only");
    ToolResult t = run_tool(test, env_, kToolTimeout);
    if (!t.ok()) {
      o.error = "nodes: " + std::to_string(job.nodes) + " x ranks_per_node: " + std::to_string(job.ranks_per_node) +
                " (" + std::to_string(job.ranks) + " ranks, " + std::to_string(std::max(1, slurm_.cpus)) +
                " CPU(s) each) is more than the partition" + (slurm_.partition.empty() ? "" : " " + slurm_.partition) +
                " can give one job: sbatch --test-only says: " + t.why() + " (sinfo shows its nodes and their CPUs)";
      o.start = o.end = e.submitted;
      e.ended = true;
      return;
    }
  }
  ToolResult r = run_tool(args, env_, kToolTimeout);
  std::string id = r.out.substr(0, r.out.find_first_of(";\n"));
  if (!r.ok() || id.empty()) {
    o.error = "sbatch refused the job: " + r.why();
    o.start = o.end = e.submitted;
    e.ended = true;
    return;
  }
  e.id = id;
  if (options_.on_progress) {
    JobProgress p;
    p.job = job.name;
    p.state = JobProgress::State::waiting;
    options_.on_progress(p);
  }
  (void)i;
}

void SlurmBackend::finish(size_t i, Entry& e, JobOutcome& o, const std::string& state, const std::string& reason) {
  e.ended = true;
  bool read_ok = false;
  std::string text = read_text(e.results, &read_ok);
  std::string problem;
  if (read_ok) {
    try {
      std::string name = o.trace.job;
      o = job_outcome_from_json(nlohmann::json::parse(text));
      o.trace.job = name;
    } catch (const std::exception& ex) {
      problem = std::string("its results file ") + e.results + " could not be read: " + ex.what();
      read_ok = false;
    }
  }
  if (read_ok && o.interrupted && !stop_.load()) {
    // The agent was signalled, but not by our Ctrl-C: Slurm (or someone's scancel) stopped the job. That
    // is a Slurm failure, said as such, not an interruption of the run.
    std::string st = state;
    if (st.empty() || !slurm_state_ended(st)) {
      ToolResult r = run_tool({"scontrol", "show", "job", "-o", e.id}, env_, kToolTimeout);
      if (r.ok()) st = parse_scontrol_job(r.out)["JobState"];
    }
    o.interrupted = false;
    o.error = "Slurm job " + e.id + ": " + slurm_state_text(st.empty() ? "CANCELLED" : st) +
              " while the job ran; the agent stopped the job and kept its attempts";
  }
  if (!read_ok) {
    // What Slurm says about the job: squeue's state, or scontrol's when squeue no longer lists it.
    std::string st = state, why = reason, exit_code, node;
    ToolResult r = run_tool({"scontrol", "show", "job", "-o", e.id}, env_, kToolTimeout);
    if (r.ok()) {
      auto f = parse_scontrol_job(r.out);
      if (st.empty()) st = f["JobState"];
      if (why.empty() || why == "None") why = f["Reason"];
      exit_code = f["ExitCode"];
      node = f["NodeList"];
    }
    o.start = o.start > 0 ? o.start : e.submitted;
    o.end = now();
    if (stop_.load() && problem.empty()) {
      o.interrupted = true;  // cancelled by our Ctrl-C before its agent wrote anything
    } else {
      std::string tail = last_lines(read_text(e.slurm_out), 5);
      o.error = "Slurm job " + e.id + (node.empty() || node == "(null)" ? "" : " on " + node) + ": " + slurm_state_text(st) +
                (why.empty() || why == "None" ? "" : ", reason " + why) + (exit_code.empty() ? "" : ", exit code " + exit_code) +
                "; " + (problem.empty() ? "its agent wrote no results (" + e.results + " is missing)" : problem) +
                (tail.empty() ? "" : ". The end of " + e.slurm_out + ":\n" + tail);
    }
  }
  if (options_.on_progress) {
    // What the live view's "done" line says: the attempts and the time the agent measured.
    JobProgress p;
    p.job = o.trace.job;
    p.elapsed = o.end > o.start ? o.end - o.start : 0;
    if (!e.running_seen && !o.trace.attempts.empty()) {  // it ran between two polls
      p.state = JobProgress::State::running;
      p.attempt = static_cast<int>(o.trace.attempts.size()) - 1;
      options_.on_progress(p);
    }
    p.state = JobProgress::State::done;
    p.attempt = static_cast<int>(o.trace.attempts.size());
    p.elapsed = o.end > o.start ? o.end - o.start : 0;
    if (!o.trace.attempts.empty()) p.last_step = o.trace.attempts.back().last_completed_step();
    options_.on_progress(p);
  }
  if (options_.on_job_done) options_.on_job_done(i, o);
}

void SlurmBackend::sleep_interval() {
  pollfd p{wake_[0], POLLIN, 0};
  int ms = static_cast<int>(std::max(0.01, slurm_.poll_interval) * 1000);
  if (wake_[0] < 0 || stop_.load()) {
    if (!stop_.load()) usleep(static_cast<useconds_t>(ms) * 1000);
    else usleep(200 * 1000);
    return;
  }
  if (poll(&p, 1, ms) > 0) {
    char drain[64];
    while (read(wake_[0], drain, sizeof drain) > 0) {}
  }
}

std::vector<JobOutcome> SlurmBackend::run(const std::vector<JobSpec>& jobs) {
  std::vector<JobOutcome> outcomes(jobs.size());
  std::vector<Entry> entries(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    outcomes[i].trace.job = jobs[i].name;
    outcomes[i].trace.target_step = jobs[i].target_step;
    outcomes[i].trace.simulated_device = slurm_.simulate;
  }
  size_t active = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (stop_.load()) {
      outcomes[i].interrupted = true;
      entries[i].ended = true;
      if (options_.on_job_done) options_.on_job_done(i, outcomes[i]);
      continue;
    }
    submit(i, jobs[i], entries[i], outcomes[i]);
    if (entries[i].ended) {
      if (options_.on_job_done) options_.on_job_done(i, outcomes[i]);
    } else {
      ++active;
    }
  }

  bool cancelled = false;
  double cancel_deadline = 0;
  double squeue_failing_since = 0;
  while (active > 0) {
    if (stop_.load() && !cancelled) {
      std::vector<std::string> argv = {"scancel"};
      for (const Entry& e : entries)
        if (!e.ended && !e.id.empty()) argv.push_back(e.id);
      run_tool(argv, env_, kToolTimeout);
      cancelled = true;
      cancel_deadline = now() + kCancelWait;
    }
    sleep_interval();
    std::string ids;
    for (const Entry& e : entries)
      if (!e.ended) ids += (ids.empty() ? "" : ",") + e.id;
    ToolResult r = run_tool({"squeue", "-h", "-t", "all", "-j", ids, "-o", "%i|%T|%r"}, env_, kToolTimeout);
    std::map<std::string, QueueEntry> queue;
    bool known = r.ok();
    if (!r.ok() && r.err.find("Invalid job id") != std::string::npos) known = true;  // none of them is listed any more
    if (!known) {
      // The controller does not answer (restarting, overloaded): keep polling, but not for ever.
      if (squeue_failing_since == 0) squeue_failing_since = now();
      if (now() - squeue_failing_since > kSqueueGiveUp) {
        for (size_t i = 0; i < entries.size(); ++i)
          if (!entries[i].ended) {
            entries[i].ended = true;
            outcomes[i].error = "Slurm job " + entries[i].id + ": squeue has failed for " +
                                std::to_string(static_cast<int>(kSqueueGiveUp)) + " s (" + r.why() +
                                "), so its end was never seen; the job may still run (scancel " + entries[i].id + ")";
            if (options_.on_job_done) options_.on_job_done(i, outcomes[i]);
          }
        break;
      }
    } else {
      squeue_failing_since = 0;
    }
    if (known) {
      queue = parse_squeue(r.out);
      for (size_t i = 0; i < entries.size(); ++i) {
        Entry& e = entries[i];
        if (e.ended) continue;
        auto it = queue.find(e.id);
        if (it == queue.end()) {
          finish(i, e, outcomes[i], "", "");
          --active;
        } else if (slurm_state_ended(it->second.state) ||
                   (it->second.state == "COMPLETING" && !stop_.load() && results_visible(e.dir, e.results))) {
          // COMPLETING with its results in place: the batch script (the agent, which renames its results into
          // place last) has exited, and Slurm is still ending a step on a node that is gone (Note [Waiting for
          // the node agents] in agent_command.cpp), which lasts until the node is marked down.
          // Note [Results that are late]: a batch script that exited 0 means the agent wrote its results;
          // a shared filesystem (NFS caches directory lookups) may show them here a little later.
          if (it->second.state == "COMPLETED" && !stop_.load() && !results_visible(e.dir, e.results)) {
            if (e.completed_seen == 0) e.completed_seen = now();
            if (now() - e.completed_seen < kResultsGrace) continue;
          }
          if (it->second.state == "COMPLETING") {  // Note [COMPLETING is not an end]
            if (e.completing_seen == 0) e.completing_seen = now();
            if (now() - e.completing_seen < kCompletingGrace) continue;
          }
          finish(i, e, outcomes[i], it->second.state, it->second.reason);
          --active;
        } else if (it->second.state == "RUNNING" && !e.running_seen && options_.on_progress) {
          e.running_seen = true;
          JobProgress p;
          p.job = jobs[i].name;
          p.state = JobProgress::State::running;
          options_.on_progress(p);
        }
      }
    }
    if (cancelled && now() > cancel_deadline) {
      for (size_t i = 0; i < entries.size(); ++i)
        if (!entries[i].ended) {
          entries[i].ended = true;
          outcomes[i].interrupted = true;
          if (options_.on_job_done) options_.on_job_done(i, outcomes[i]);
        }
      break;
    }
  }
  return outcomes;
}

}  // namespace

std::unique_ptr<Backend> make_slurm_backend(RunOptions options, SlurmOptions slurm) {
  return std::make_unique<SlurmBackend>(std::move(options), std::move(slurm));
}

}  // namespace oomh
