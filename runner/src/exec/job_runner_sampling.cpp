// The job runner's sampling: every sample_interval, the control block of every running attempt (its
// devices' figures, its step, the bytes of its dead processes), progress and the hang watch.

#include "exec/job_runner_impl.h"

#include <filesystem>

#include "exec/dead_processes.h"

namespace oomh {

using namespace exec;

// ---------------------------------------------------------------------------------------------------
// Sampling the control blocks.

void JobRunner::Impl::arm_sampler() {
  sample_timer->expires_after(seconds(options.sample_interval > 0 ? options.sample_interval : 0.05));
  sample_timer->async_wait([this](boost::system::error_code ec) {
    if (ec || finished_count == jobs.size()) return;
    claim_signals();
    if (ns) ns->check_watchdog();
    for (auto& j : jobs) {
      for (auto& c : j->current)
        if (c && c->cb && !c->finished) sample(*c, false);
      if (AttemptRun* r = j->lead(); r && r->cb && !r->finished) progress(*j, JobProgress::State::running, r);
      if (!j->finished) check_hang(*j);
    }
    poll_gpu_processes();
    arm_sampler();
  });
}

// Note [Processes outside the shim] in escapes.h.
void JobRunner::Impl::poll_gpu_processes() {
  if (!gpu_processes || !gpu_processes->available()) return;
  const double t = now();
  if (t - gpu_polled_at < kNvmlPollSeconds) return;
  gpu_polled_at = t;
  const std::vector<GpuProcess> listed = gpu_processes->now();
  if (listed.empty()) return;
  // As /proc/<pid>/maps names it: the file itself, after any link (a wheel's or a distribution's symlink).
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::weakly_canonical(options.paths.inject_library, ec);
  const std::string shim_file = (ec ? std::filesystem::path(options.paths.inject_library) : real).filename().string();
  for (auto& j : jobs)
    for (auto& c : j->current) {
      if (!c || !c->cb || c->finished || c->exited || c->pgid <= 0) continue;
      AttemptRun& r = *c;
      const AttemptProcesses mine{r.pgid, r.control_name, r.cb, shim_file};
      for (const GpuProcess& g : listed) {
        if (std::find(r.outside_seen.begin(), r.outside_seen.end(), g.pid) != r.outside_seen.end()) continue;
        if (!belongs_to(g.pid, mine)) continue;
        const std::string state = shim_state(g.pid, mine);
        if (state.empty()) continue;
        r.outside_seen.push_back(g.pid);
        Event e = runner_event(events::kOutsideShim, t,
                               {{"shim", state}, {"command", command_of(g.pid)}, {"used", g.used}, {"via", "nvml"}});
        e.pid = g.pid;  // the process's, as the runner sees it
        r.attempt.events.push_back(std::move(e));
      }
    }
}

// Records the devices the job used. Beyond kMaxSamples the series is thinned (every other sample kept)
// and later samples are taken at half the rate, so a long job keeps an even, bounded record.
void JobRunner::Impl::sample(AttemptRun& r, bool last) {
  // Note [Bytes of dead processes]: before the figures are read, so that they no longer count them.
  for (const Reclaimed& g : reclaim_dead_processes(*r.cb))
    r.attempt.events.push_back(runner_event(events::kReclaimed, now(), {{"pid", g.pid}, {"device", g.device}, {"bytes", g.bytes}}));
  const ControlBlock* cb = r.cb;
  // Note [A plan only the runner writes] in injector/engine/engine.h: this runner never writes a plan into a
  // block, so a generation other than 0 is the job's doing, seen here even if the job puts it back later.
  if (const uint32_t g = cb->plan_generation.load(std::memory_order_relaxed); g != 0 && !r.plan_tamper_seen) {
    r.plan_tamper_seen = true;
    r.attempt.events.push_back(runner_event(
        events::kTamper, now(),
        {{"what", "plan"},
         {"generation", g},
         {"message", "the job wrote a fault plan into its control block (generation " + std::to_string(g) +
                         "): only the runner may change a running job's plan; the shims keep the one the runner gave them"}}));
  }
  if (int64_t now_step = cb->step.load(std::memory_order_relaxed); now_step != r.seen_step) {
    r.seen_step = now_step;
    r.seen_step_t = now();
  }
  // Note [Hang detection]: a rank that raised an OOM starts the watch as one that exited does.
  if ((r.rank >= 0 || r.node >= 0) && r.job->first_end_t <= 0 && cb->ooms_seen.load(std::memory_order_relaxed) > 0) {
    r.job->first_end_rank = r.rank;
    r.job->first_end_node = r.node;
    r.job->first_end_t = now();
    r.job->first_end_oom = true;
  }
  if (!last && (r.tick++ % r.stride) != 0) return;
  double t = now();
  // The control block is the job's to write: its figures are read within Note [A job's integers].
  const int64_t step = std::clamp<int64_t>(cb->step.load(std::memory_order_relaxed), -1, kJobIntegerLimit);
  uint32_t n = std::min<uint32_t>(cb->device_count.load(std::memory_order_relaxed), kMaxDevices);
  std::vector<MemorySample>& out = r.attempt.samples;
  for (uint32_t d = 0; d < n; ++d) {
    const DeviceCounters& c = cb->devices[d];
    MemorySample s;
    s.t = t;
    s.device = static_cast<int>(d);
    s.held = std::min<uint64_t>(c.held.load(std::memory_order_relaxed), kJobIntegerLimit);
    s.peak = std::min<uint64_t>(c.peak.load(std::memory_order_relaxed), kJobIntegerLimit);
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

}  // namespace oomh
