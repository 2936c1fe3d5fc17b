// The job runner's attempts: the start of one (its files, its control block, its process or, for a
// job with ranks, one process per rank) and its end (the shim's record, the exit, the event log and the
// observed values gathered into the attempt, the ranks merged: Note [Ranks] in trace.h).

#include "exec/job_runner_impl.h"

#include <csignal>
#include <cstring>
#include <filesystem>
#include <random>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/launch.h"
#include "exec/reaping.h"
#include "exec/signals.h"

namespace oomh {

using namespace exec;
namespace fs = std::filesystem;

// Note [Sealed event lines] in include/oomharness/event_seal.h: 32 bytes from the kernel's generator
// (std::random_device where getrandom is missing), never all zero.
namespace {
void draw_seal_key(unsigned char (&key)[32]) {
  if (getrandom(key, sizeof key, 0) != static_cast<ssize_t>(sizeof key)) {
    std::random_device device;
    for (unsigned char& b : key) b = static_cast<unsigned char>(device());
  }
  key[0] |= 1;  // an all-zero key means "seal nothing"
}
}  // namespace


// ---------------------------------------------------------------------------------------------------
// Attempts.

void JobRunner::Impl::start_attempt(JobState& j, bool reference) {
  for (auto& c : j.current) retire(std::move(c));
  j.current.clear();
  int n = reference ? static_cast<int>(j.outcome->trace.reference.size()) : static_cast<int>(j.outcome->trace.attempts.size());
  // The reference run starts from an empty work directory: it must not resume from the attempts' files.
  std::string work = j.outcome->work_dir;
  if (reference) work = (fs::path(j.dir) / "reference-work").string();
  auto prepare = [&] {
    if (reference && j.dir_fd && remove_tree_at(j.dir_fd.get(), "reference-work")) open_owned_dir(j.dir_fd.get(), "reference-work");
  };
  // Note [Ranks on several nodes] in node_group.h: the first node prepares, the others wait for it; this node
  // runs ranks first .. first+here-1 of the job's `ranks`.
  NodeGroup* group = options.node_group.get();
  int ranks = std::max(1, j.spec->ranks);
  // Note [One torchrun per node] in node_group.h: then this node runs one process, its torchrun.
  const bool node_torchrun = group && one_torchrun_per_node(*j.spec);
  int here = node_torchrun ? 1 : group ? group->ranks_per_node() : ranks;
  int first = group ? group->first_rank() : 0;
  j.group_key = NodeGroup::key(reference, n);
  j.end_published = false;
  j.group_look = 0;
  if (!group) prepare();
  else if (auto problem = group->start(j.group_key, prepare, stop_requested)) {
    if (*problem == kGroupInterrupted) j.outcome->interrupted = true;
    else if (j.outcome->error.empty()) j.outcome->error = *problem;
    return finish_job(j);
  }
  j.rank_ends.assign(ranks > 1 && !node_torchrun ? static_cast<size_t>(ranks) : 0, Attempt{});
  j.ranks_ended = 0;
  j.first_end_rank = -1;
  j.first_end_node = -1;
  j.first_end_t = 0;
  j.first_end_oom = false;
  j.hang_called = false;
  j.restart_stop_called = false;
  j.stacks.assign(static_cast<size_t>(ranks), std::string());
  int port = ranks > 1 ? (group ? group->port(reference, n) : free_local_port()) : 0;
  // Every rank's slot exists before any starts: a rank that fails to start finishes at once and must find
  // its siblings counted.
  for (int k = 0; k < here; ++k) j.current.push_back(std::make_unique<AttemptRun>(*ctx));
  for (int k = 0; k < here; ++k) {
    if (j.finished) return;
    launch_rank(j, reference, n, static_cast<size_t>(k), ranks > 1 && !node_torchrun ? first + k : -1, port, work,
                node_torchrun ? group->node() : -1);
  }
}

// One process of attempt `n`: the whole attempt for a job without ranks (rank -1), else rank `rank`; or,
// with `node` 0 or more, node `node`'s torchrun (Note [One torchrun per node] in node_group.h).
void JobRunner::Impl::launch_rank(JobState& j, bool reference, int n, size_t slot, int rank, int port, const std::string& work,
                                  int node) {
  AttemptRun& r = *j.current[slot];
  r.job = &j;
  r.reference = reference;
  r.rank = rank;
  r.node = node;
  r.attempt.index = n;
  r.attempt.faults_enabled = !reference && j.faults_enabled;
  r.attempt.start = now();
  r.seen_step_t = r.attempt.start;
  std::string stem = (reference ? "reference-" : "attempt-") + std::to_string(n) + (rank >= 0 ? ".rank" + std::to_string(rank) : "") +
                     (node >= 0 ? ".node" + std::to_string(node) : "");
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
  r.events_fd = reopen_for_reading(ev);
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
  draw_seal_key(r.seal_key);
  std::memcpy(r.cb->seal_key, r.seal_key, sizeof r.seal_key);

  AttemptContext actx;
  actx.job = j.spec->name;
  actx.attempt = n;
  actx.control_name = r.control_name;
  actx.events_path = r.events_path;
  actx.plan_json = j.spec->plan(r.attempt.faults_enabled).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  actx.flush_steps = j.spec->flush_steps(r.attempt.faults_enabled);
  if (!reference) actx.saved_steps = saved_steps(j.outcome->trace.attempts);  // the attempts before this one
  actx.workdir = work;
  for (const Placement& q : j.placements)
    if (q.gpu) actx.gpus.push_back(*q.gpu);
  actx.threads = threads_each;
  if (rank >= 0) {
    actx.rank = rank;
    actx.world_size = std::max(1, j.spec->ranks);
    actx.master_port = port;
    actx.stacks_path = r.stacks_path;
    if (const NodeGroup* group = options.node_group.get()) {  // Note [Ranks on several nodes] in node_group.h
      actx.local_rank = static_cast<int>(slot);
      actx.local_world_size = group->ranks_per_node();
      actx.node = group->node();
      actx.master_addr = group->master_addr();
    }
  } else if (node >= 0) {
    const NodeGroup& group = *options.node_group;
    actx.torchrun_node = node;
    actx.nodes = group.nodes();
    actx.local_world_size = group.ranks_per_node();
    actx.world_size = std::max(1, j.spec->ranks);
    actx.master_addr = group.master_addr();
    actx.master_port = port;
  }
  std::vector<std::string> env = job_environment(*j.spec, options.paths, actx);
  // As the job names it: the sidecar lives in the run's namespace too (Note [A runner its jobs cannot signal]).
  if (j.sidecar && j.sidecar->proc)
    env.push_back("OOMH_RESERVE_PID=" + std::to_string(pid_inside(static_cast<pid_t>(j.sidecar->proc->id()))));
  std::vector<std::string> argv = attempt_argv(*j.spec, work, n);
  if (!reference && n == 0 && rank <= 0 && node <= 0) j.outcome->argv = argv;
  nlohmann::json start_fields = {{"attempt", n}, {"argv", argv}};
  if (rank >= 0 || node >= 0) start_fields["master_port"] = port;
  if (node >= 0) start_fields["node"] = node;
  if (j.sidecar && j.sidecar->ready) start_fields["reserved"] = j.sidecar->held;  // real bytes held beside it
  r.attempt.events.push_back(runner_event(events::kAttemptStart, r.attempt.start, start_fields));
  if (argv.empty()) return fail_attempt(r, "the job has no command");
  std::string program = resolve_program(argv[0], env);
  if (program.empty()) return fail_attempt(r, "cannot start '" + argv[0] + "': command not found");

  std::vector<std::string> args(argv.begin() + 1, argv.end());
  if (ns) ns->ensure();
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
  if (rank <= 0 && node <= 0) progress(j, JobProgress::State::running, &r);

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

// Note [An event log replaced]
// The event log is the runner's file in the job's folder, and the job may put something else at its path
// (a FIFO, issue 44: the shim's writes then went to whoever read the FIFO, the runner read nothing, and the
// job was told "no allocation was refused" when the cap had refused 6). The runner holds the file it made
// open and reads that; when the path no longer names it, the attempt gets a warning that says so, and
// Note [Green means tested] (untested.cpp) weighs the shim's counters in the control block against the
// refusals the log holds.
std::optional<std::string> JobRunner::Impl::replaced_event_log(const AttemptRun& r) {
  if (r.events_fd < 0 || r.restored || !r.job->dir_fd) return std::nullopt;
  struct stat mine {}, there {};
  if (fstat(r.events_fd, &mine) != 0) return std::nullopt;
  const std::string name = fs::path(r.events_path).filename().string();
  if (fstatat(r.job->dir_fd.get(), name.c_str(), &there, AT_SYMLINK_NOFOLLOW) != 0)
    return "the event log " + r.events_path + " was removed while the attempt ran; the runner read the file it made, "
           "which it held open";
  if (there.st_dev == mine.st_dev && there.st_ino == mine.st_ino) return std::nullopt;
  const char* what = S_ISFIFO(there.st_mode)  ? "a FIFO"
                     : S_ISLNK(there.st_mode) ? "a symbolic link"
                     : S_ISREG(there.st_mode) ? "another file"
                     : S_ISDIR(there.st_mode) ? "a folder"
                                              : "a special file";
  return "the event log " + r.events_path + " was replaced by " + what +
         " while the attempt ran; the runner read the file it made, not what is there now, so what the job's "
         "processes wrote there after the swap is missing";
}

// The attempt could not start: record it as such, with the reason as the job's error.
void JobRunner::Impl::fail_attempt(AttemptRun& r, const std::string& why) {
  JobState& j = *r.job;
  r.attempt.end = now();
  if ((r.rank >= 0 || r.node >= 0) && j.first_end_t <= 0) {
    j.first_end_rank = r.rank;
    j.first_end_node = r.node;
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
    shim.tampered = cb.tampered.load(std::memory_order_relaxed);  // Note [A plan only the runner writes]
    shim.plan_generation = cb.plan_generation.load(std::memory_order_relaxed);
    for (const DeviceCounters& d : cb.devices) {
      shim.allocations += d.alloc_calls.load(std::memory_order_relaxed);
      // The job can write these too: read within Note [A job's integers].
      shim.refused_by_rules += std::min<uint64_t>(d.failures_injected.load(std::memory_order_relaxed), kJobIntegerLimit);
      shim.refused_by_cap += std::min<uint64_t>(d.cap_failures.load(std::memory_order_relaxed), kJobIntegerLimit);
    }
    r.attempt.shim = shim;
  }
  release_control_block(r);
  r.restored = restore_removed_folders(r);
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
  ForgedLines forged;
  std::vector<Event> logged = r.events_fd >= 0 ? read_event_log_at(r.events_fd, r.events_path, &bad, &a.thinned, r.seal_key, &forged)
                                               : read_event_log(r.events_path, &bad, &a.thinned, r.seal_key, &forged);
  if (forged.count > 0)  // Note [Sealed event lines]: not evidence, and a job that writes them is not believed
    a.events.push_back(runner_event(
        events::kTamper, a.end,
        {{"what", "events"},
         {"message", std::to_string(forged.count) + " event line(s) of " + r.events_path +
                         " did not come from the harness (no seal of the attempt's key; the first: " + forged.first +
                         "): the job's own code wrote them, and they were left out of the evidence"}}));
  if (std::optional<std::string> replaced = replaced_event_log(r)) a.events.push_back(runner_event(events::kWarning, a.end, {{"message", *replaced}}));
  if (r.events_fd >= 0) {
    close(r.events_fd);
    r.events_fd = -1;
  }
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
    const int index = a.index;
    j.rank_ends[static_cast<size_t>(r.rank)] = std::move(a);
    if (++j.ranks_ended < j.current.size()) return;
    if (NodeGroup* group = options.node_group.get()) {
      // Note [Ranks on several nodes] in node_group.h: every node's ranks, so that every node folds the same
      // attempt and decides the same. A node that disappeared: this node's ranks, the others' marked lost.
      std::vector<NodeGroup::RankPart> mine, all;
      for (int k = group->first_rank(); k < group->first_rank() + group->ranks_per_node(); ++k)
        mine.push_back({k, j.rank_ends[static_cast<size_t>(k)], j.stacks[static_cast<size_t>(k)]});
      std::optional<std::string> problem = j.node_lost.empty() ? group->exchange(j.group_key, mine, all, stop_requested) : j.node_lost;
      if (problem) {
        for (size_t k = 0; k < j.rank_ends.size(); ++k) {
          if (group->node_of_rank(static_cast<int>(k)) == group->node()) continue;
          Attempt& lost = j.rank_ends[k];
          lost.index = index;
          lost.start = lost.end = now();
          lost.end_kind = AttemptEnd::signalled;
          lost.signal = SIGKILL;
          lost.output_tail = "oomharness: this rank's node did not report its end: " + *problem + "\n";
        }
        Attempt merged = merge_ranks(std::move(j.rank_ends));
        j.rank_ends.clear();
        into.push_back(std::move(merged));
        if (*problem == kGroupInterrupted) j.outcome->interrupted = true;
        else if (j.outcome->error.empty()) j.outcome->error = *problem;
        return finish_job(j);
      }
      for (NodeGroup::RankPart& p : all) {
        if (p.rank < 0 || static_cast<size_t>(p.rank) >= j.rank_ends.size()) continue;
        j.rank_ends[static_cast<size_t>(p.rank)] = std::move(p.attempt);
        j.stacks[static_cast<size_t>(p.rank)] = std::move(p.stacks);
      }
    }
    Attempt merged = merge_ranks(std::move(j.rank_ends));
    j.rank_ends.clear();
    for (RankEnd& re : merged.ranks) re.stacks = j.stacks[static_cast<size_t>(re.rank)];
    into.push_back(std::move(merged));
  } else if (r.node >= 0) {
    // Note [One torchrun per node] in node_group.h: every node's torchrun's attempt, folded into the ranks
    // their events name, the same on every node. A node that disappeared: its ranks marked lost.
    NodeGroup& group = *options.node_group;
    std::vector<NodeGroup::RankPart> mine, all;
    mine.push_back({group.node(), std::move(a), std::string()});
    std::optional<std::string> problem = j.node_lost.empty() ? group.exchange(j.group_key, mine, all, stop_requested) : j.node_lost;
    std::vector<Attempt> nodes(static_cast<size_t>(group.nodes()));
    if (problem) {
      for (size_t k = 0; k < nodes.size(); ++k) {
        Attempt& lost = nodes[k];
        lost.index = mine.front().attempt.index;
        lost.start = lost.end = now();
        lost.end_kind = AttemptEnd::signalled;
        lost.signal = SIGKILL;
        lost.output_tail = "oomharness: this node did not report its end: " + *problem + "\n";
      }
      nodes[static_cast<size_t>(group.node())] = std::move(mine.front().attempt);
    } else {
      for (NodeGroup::RankPart& p : all)
        if (p.rank >= 0 && static_cast<size_t>(p.rank) < nodes.size()) nodes[static_cast<size_t>(p.rank)] = std::move(p.attempt);
    }
    into.push_back(merge_node_torchruns(std::move(nodes), group.ranks_per_node()));
    if (problem) {
      if (*problem == kGroupInterrupted) j.outcome->interrupted = true;
      else if (j.outcome->error.empty()) j.outcome->error = *problem;
      return finish_job(j);
    }
  } else {
    split_ranks_from_events(a);  // a job that starts torchrun itself (Note [Ranks seen in events])
    into.push_back(std::move(a));
  }
  after_attempt(j, into.back(), reference);
}

}  // namespace oomh
