// The job runner's hang detection for a job with ranks.

#include "exec/job_runner_impl.h"

#include <csignal>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oomh {

using namespace exec;

namespace {

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

}  // namespace

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
  if (options.node_group && j.spec->ranks >= 2) watch_nodes(j);
  if (j.spec->ranks < 2 || j.hang_called || j.first_end_t <= 0 || stopping) return;
  double t = now();
  if (!j.restart_stop_called)
    if (const AttemptRun* dead = rank_that_restarts_all(j, t)) return stop_for_restart(j, *dead, t);
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
  if (worst) take_stacks(j, worst, worst_wait);
}

// Note [Ranks on several nodes] in node_group.h: on a Slurm node agent, each sample also beats this node's
// heartbeat and looks (at most four times a second) at what the other nodes said: their first end starts
// this node's hang watch, counted from when it was seen here (no clocks are compared); a hang they called
// makes this node take its ranks' stacks and stop them; a node gone silent stops them too, and the job is an
// error that names that node.
void JobRunner::Impl::watch_nodes(JobState& j) {
  NodeGroup& group = *options.node_group;
  std::optional<std::string> lost = group.beat();
  bool any_running = false;
  for (auto& c : j.current)
    if (c && c->proc && !c->exited && !c->finished) any_running = true;
  if (!any_running) return;
  if (lost && j.node_lost.empty()) {
    j.node_lost = *lost;
    for (auto& c : j.current)
      if (c && c->proc && !c->exited && c->stop == AttemptRun::Stop::none) stop_attempt(*c, AttemptRun::Stop::hang);
    return;
  }
  if (j.first_end_t > 0 && !j.end_published) {
    j.end_published = true;
    group.publish_end(j.group_key, j.first_end_rank, j.first_end_oom);
  }
  double t = now();
  if (t - j.group_look < 0.25) return;
  j.group_look = t;
  if (j.first_end_t <= 0)
    if (auto end = group.remote_end(j.group_key)) {
      j.first_end_rank = end->rank;
      j.first_end_node = end->rank < 0 ? end->node : -1;
      j.first_end_t = t;
      j.first_end_oom = end->oom;
      j.end_published = true;  // it is the other node's to tell
    }
  if (!j.hang_called && !stopping && group.hang_elsewhere(j.group_key)) take_stacks(j, nullptr, 0);
}

// Note [A restart of every rank]
// A job with `restart:` restarts every rank together (scope all, the only scope). When one rank's process
// dies of what `restart.on` names, the others cannot go on: over gloo they fail at once ("Connection closed by
// peer"), but an NCCL peer waits in its collective until the process group's timeout, and Note [Hang
// detection] would call that wait a hang once the stall limit passed (docs/distributed.md: the same correct
// checkpointing job passed no_hang on gloo and failed it on NCCL). The wait is not the job's: torchrun's
// elastic agent, which these ranks stand for, stops the rest of a failed worker's group (SIGTERM, then
// SIGKILL) and starts all of them again. So the runner does the same: kRestartGrace seconds after the rank
// died (at most half the stall limit, so that the hang watch never comes first), when the job has a restart
// left and the dead rank's own attempt is one `restart.on` restarts (an OOM, by default), every rank still
// running gets a `stopped_for_restart` event and is stopped as a hung one is (no stacks: nothing hung). The
// grace lets a rank that can end by itself do so, and keeps gloo's own errors in the trace. The dead rank
// ended first, so the merged attempt is still decided by it (merge_ranks) and restarts. Where no restart
// follows (none left, another reason, a rank that raised an OOM and still runs, a reference run) the hang
// watch stays as it was; a rank that catches its OOM and waits is still found by it. On Slurm's nodes
// (Note [Ranks on several nodes]) only a death on this node is seen this way; the other nodes' ranks are
// still watched for a hang.
const AttemptRun* JobRunner::Impl::rank_that_restarts_all(const JobState& j, double t) const {
  const RestartSpec& rs = j.spec->restart;
  if (j.restarts >= rs.max) return nullptr;
  const double grace = std::min(kRestartGrace, 0.5 * j.spec->hang_stall);
  const AttemptRun* dead = nullptr;
  bool others_running = false;
  for (const auto& c : j.current) {
    if (!c || c->reference || c->rank < 0 || static_cast<size_t>(c->rank) >= j.rank_ends.size()) continue;
    if (!c->finished) {
      others_running = others_running || (!c->exited && c->stop == AttemptRun::Stop::none && c->proc);
      continue;
    }
    const Attempt& a = j.rank_ends[static_cast<size_t>(c->rank)];
    if (!dead && t - a.end >= grace && wants_restart(a, rs.on)) dead = c.get();
  }
  return others_running ? dead : nullptr;
}

void JobRunner::Impl::stop_for_restart(JobState& j, const AttemptRun& dead, double t) {
  j.restart_stop_called = true;
  const double waited = t - j.rank_ends[static_cast<size_t>(dead.rank)].end;
  for (auto& c : j.current) {
    if (!c || c->exited || c->finished || c->stop != AttemptRun::Stop::none || !c->proc) continue;
    c->attempt.events.push_back(runner_event(events::kStoppedForRestart, t,
                                             {{"rank", c->rank},
                                              {"step", c->seen_step == INT64_MIN ? int64_t{-1} : c->seen_step},
                                              {"after_rank", dead.rank},
                                              {"waited", waited}}));
    stop_attempt(*c, AttemptRun::Stop::restart);
  }
}

void JobRunner::Impl::take_stacks(JobState& j, AttemptRun* stalled, double waited) {
  j.hang_called = true;
  if (stalled) {
    nlohmann::json fields = {{"rank", stalled->rank},
                             {"step", stalled->seen_step == INT64_MIN ? int64_t{-1} : stalled->seen_step},
                             {"waited", waited},
                             {"stall", j.spec->hang_stall},
                             {"after_rank", j.first_end_rank},
                             {"after", j.first_end_oom ? "oom" : "exit"}};
    // Note [One torchrun per node] in node_group.h: the stalled process is a node's torchrun (its ranks share
    // one control block), and the first end may be another node's torchrun's.
    if (stalled->node >= 0) fields["node"] = stalled->node;
    if (j.first_end_rank < 0 && j.first_end_node >= 0) fields["after_node"] = j.first_end_node;
    stalled->attempt.events.push_back(runner_event(events::kHang, now(), std::move(fields)));
    if (options.node_group) options.node_group->publish_hang(j.group_key, stalled->rank);
  }
  // A node's torchrun is not asked for stacks: SIGUSR1 would end its agent (Python's default for it), and its
  // ranks have no stack files of their own (Note [One torchrun per node]).
  for (auto& c : j.current)
    if (c && c->proc && !c->exited && c->node < 0) kill(static_cast<pid_t>(c->proc->id()), SIGUSR1);
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

}  // namespace oomh
