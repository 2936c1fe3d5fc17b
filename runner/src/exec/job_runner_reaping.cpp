// The job runner's reaping: an attempt stopped (SIGTERM, SIGKILL after its grace), its exit seen, its
// group and its orphans killed and reaped, and what it held released.
//
// Note [Nothing left behind]
// Per attempt: the process group is killed and waited for; then every process that was re-parented to the
// runner (it is a child subreaper, PR_SET_CHILD_SUBREAPER, so a `setsid` grandchild or a daemon that left
// the group lands here instead of on init), or to the keeper of the run's PID namespace (Note [A runner its
// jobs cannot signal] in job_namespace.h), and whose environment names this attempt's control block is
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

#include "exec/job_runner_impl.h"

#include <csignal>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "exec/dead_processes.h"
#include "exec/reaping.h"
#include "oomharness/runner/command.h"

namespace oomh {

using namespace exec;

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
  if (r->events_fd >= 0) {
    close(r->events_fd);
    r->events_fd = -1;
  }
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
    // Note [A runner its jobs cannot signal]: in the run's namespace orphans go to its keeper, not to us.
    std::vector<pid_t> candidates = runner_children();
    if (ns)
      for (pid_t pid : ns->orphans()) candidates.push_back(pid);
    for (pid_t pid : candidates) {
      if (std::find(known.begin(), known.end(), pid) != known.end() || is_command_child(pid) || (ns && ns->is_helper(pid))) continue;
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
  if ((r->rank >= 0 || r->node >= 0) && r->job->first_end_t <= 0) {
    r->job->first_end_rank = r->rank;
    r->job->first_end_node = r->node;
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
  // Note [Hang detection]: a rank stuck in a collective has nothing to save; it gets at most kHangGrace. So
  // does one stopped for a restart of every rank (Note [A restart of every rank]).
  const bool stuck = why == AttemptRun::Stop::hang || why == AttemptRun::Stop::restart;
  r.kill_timer.expires_after(seconds(stuck ? std::min(kHangGrace, r.job->spec->grace) : r.job->spec->grace));
  r.kill_timer.async_wait([rp](boost::system::error_code e) {
    if (!e && !rp->exited) kill(-rp->pgid, SIGKILL);
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

}  // namespace oomh
