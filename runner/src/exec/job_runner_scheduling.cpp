// The job runner's scheduling: which pending job starts next and on which GPUs (Note [GPU packing] in
// gpu_packing.h), a job's start (its folder, its observer, its sidecar or first attempt) and its end,
// and the progress reported on the way.

#include "exec/job_runner_impl.h"

#include <filesystem>

#include "exec/launch.h"
#include "oomharness/policies/registry.h"

namespace oomh {

using namespace exec;
namespace fs = std::filesystem;

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
    if (stopped_pipe) stopped_pipe->cancel();
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
  reopen_job_dir(j);  // Note [A run folder removed during the run] in run_folder.h: made again where removed
  // Note [Ranks on several nodes] in node_group.h: the nodes share the work folder; the first node empties it
  // before it lets the others start.
  const bool shared = options.node_group && options.node_group->node() != 0;
  const bool made = j.dir_fd && (shared || remove_tree_at(j.dir_fd.get(), "work")) && open_owned_dir(j.dir_fd.get(), "work");
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

}  // namespace oomh
