// Note [Green means tested] in oomharness/runner/untested.h.

#include "oomharness/runner/untested.h"

#include "oomharness/control_block.h"
#include "oomharness/events.h"
#include "oomharness/units.h"

#include <algorithm>
#include <set>

namespace oomh {

namespace {

// Does the attempt's plan give the shim anything to do (rules or caps)? A reference run, or an attempt
// after `clear_faults`, keeps the caps and drops the rules.
bool plan_needs_shim(const JobSpec& job, bool faults_enabled) {
  nlohmann::json plan = job.plan(faults_enabled);
  return !plan["rules"].empty() || !plan["caps"].empty();
}

bool has_rules(const JobSpec& job, const Attempt& a) { return a.faults_enabled && !job.faults.empty(); }

// Did a fault fire in the attempt: an injection, an OOM the probe recorded, or an OOM it died of? Output
// that mentions an OOM counts only beside a reservation, whose real allocations fail in the driver without
// a refusal of the shim (Note [An OOM is an event] in policies/src/trace.cpp; the checks still need a record).
bool fault_fired(const Attempt& a, bool sidecar) {
  if (a.ended_by_oom() || (sidecar && a.oom_message)) return true;
  for (const Event& e : a.events)
    if (is_refusal(e) || (e.src == events::kSrcProbe && e.kind == events::kOom)) return true;
  return false;
}

bool completed_a_step(const Attempt& a) {
  for (const Event& e : a.events)
    if (completes_a_step(e)) return true;
  return false;
}

bool died(const Attempt& a) {
  return (a.end_kind == AttemptEnd::exited && a.exit_code && *a.exit_code != 0) || a.end_kind == AttemptEnd::signalled;
}

// The last line the attempt printed that says something, for the one-sentence reason.
std::string last_line(const Attempt& a) {
  const std::string& tail = a.output_tail;
  size_t end = tail.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return {};
  size_t start = tail.find_last_of('\n', end);
  std::string line = tail.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
  size_t first = line.find_first_not_of(" \t");
  line = first == std::string::npos ? std::string() : line.substr(first);
  if (line.size() > 200) line = line.substr(0, 197) + "...";
  return line;
}

std::string plan_error(const Attempt& a) {
  for (const Event& e : a.events)
    if (e.src == events::kSrcShim && e.kind == events::kShimStart && e.text("plan") == "rejected")
      return e.text("plan_error", "no reason given");
  return "no reason recorded";
}

Untested error(std::string message) { return Untested{JobStatus::error, std::move(message)}; }

// Note [A plan only the runner writes] in injector/engine/engine.h: the job wrote a plan or a cap into its
// control block. The shims refused it, but a job that tries to change its own test is not one whose verdict
// can be believed.
std::optional<std::string> tampering(const Attempt& a) {
  for (const Event& e : a.events)
    if (e.kind == events::kTamper) return e.text("message", "the job wrote into its control block what only the runner writes");
  if (a.shim && a.shim->plan_generation != 0)
    return "the job wrote a fault plan into its control block (generation " + std::to_string(a.shim->plan_generation) +
           "): only the runner may change a running job's plan";
  if (a.shim && a.shim->tampered > 0)
    return "the shims found the job writing into its control block what only the runner writes (" +
           std::to_string(a.shim->tampered) + " time(s))";
  return std::nullopt;
}

// Note [Processes outside the shim], the cross-check: every process the shim starts in writes a `shim_start`
// (sealed), so a process whose probe reports device memory and for whose pid no shim ever started ran without
// it, whatever its probe was told (a fake oomh_shim_active). An exec through `env -u LD_PRELOAD` keeps a pid the
// shim started in: that is the probe's own question to catch. Asked only where some shim wrote its start (a log
// without any is judged by the armed record).
std::optional<std::string> unshimmed_pid(const Attempt& a) {
  std::set<int> started;
  for (const Event& e : a.events)
    if (e.src == events::kSrcShim && e.kind == events::kShimStart) started.insert(e.pid);
  if (started.empty()) return std::nullopt;
  for (const Event& e : a.events) {
    if (e.src != events::kSrcProbe || (e.kind != events::kStep && e.kind != events::kMemory) || started.count(e.pid)) continue;
    const int64_t held = std::max(e.integer("reserved", 0), e.integer("allocated", 0));
    if (held <= 0) continue;
    return "process " + std::to_string(e.pid) + " used device memory outside the shim (its probe reported " +
           format_bytes(static_cast<uint64_t>(held)) + " held): no shim started in that process; no fault or cap "
           "applied to it (was it started with LD_PRELOAD cleared, or through a static or setuid program?), so the "
           "job's verdicts cannot be believed";
  }
  return std::nullopt;
}

// Note [Processes outside the shim] in runner/src/exec/escapes.h: a process of the job held device memory
// that no shim saw (the job ran it with LD_PRELOAD cleared, or through a static or setuid program), so
// neither the plan's faults nor its caps applied to it. Names the first such process.
std::optional<std::string> escaped(const Attempt& a) {
  size_t count = 0;
  const Event* first = nullptr;
  for (const Event& e : a.events)
    if (e.kind == events::kOutsideShim && (e.src == events::kSrcProbe || e.src == events::kSrcRunner)) {
      if (!first) first = &e;
      ++count;
    }
  if (!first) return unshimmed_pid(a);
  const Event& e = *first;
  std::string held;
  for (const char* field : {"used", "reserved", "allocated"})
    if (e.has(field) && e.fields[field].is_number() && e.fields[field].get<double>() > 0) {
      held = " (it held " + format_bytes_figure(e.fields[field].get<double>()) + ")";
      break;
    }
  std::string command = e.text("command");
  if (command.size() > 200) command = command.substr(0, 197) + "...";
  const std::string seen = e.text("via") == "nvml" ? "the driver (NVML) lists it using the GPU"
                                                   : "its probe found " + std::string(e.text("shim") == "inactive"
                                                                                          ? "the shim only forwarding there"
                                                                                          : "no shim in it");
  return "process " + std::to_string(e.pid) + (command.empty() ? std::string() : " (" + command + ")") +
         " used device memory outside the shim" + held + ": " + seen +
         (count > 1 ? ", and " + std::to_string(count - 1) + " more process(es) did the same" : std::string()) +
         "; no fault or cap applied to it (was it started with LD_PRELOAD cleared, or through a static or setuid "
         "program?), so the job's verdicts cannot be believed";
}

// Note [An event log replaced] in exec/job_runner_attempts.cpp: the shims count their refusals in the control
// block as well as in the event log. Refusals counted and none in the log: the evidence was lost (a log the job
// replaced with a FIFO), and "no allocation was refused" would be false. Says what is known.
std::optional<std::string> refusals_lost(const Attempt& a) {
  if (!a.shim) return std::nullopt;
  const uint64_t refused = a.shim->refused_by_rules + a.shim->refused_by_cap;
  if (refused == 0) return std::nullopt;
  std::string why;
  for (const Event& e : a.events) {
    if (is_refusal(e)) return std::nullopt;
    if (e.src == events::kSrcRunner && e.kind == events::kWarning && e.text("message").rfind("the event log ", 0) == 0 && why.empty())
      why = " (" + e.text("message") + ")";
  }
  const auto count = [](uint64_t n, const char* what) { return std::to_string(n) + " " + what; };
  return "the shim refused " + count(refused, refused == 1 ? "allocation" : "allocations") + " (" +
         count(a.shim->refused_by_rules, "by fault rules") + ", " + count(a.shim->refused_by_cap, "for the cap") +
         ": its counters in the control block), but the attempt's event log holds none of them" + why +
         ", so no check can tell what the job did about them";
}

// Note [A call the virtual device cannot run] in python/oomharness/virtual_device/unsupported.py: the attempt
// died of a call the virtual CUDA device cannot run (the probe's `divergence` of kind `unsupported`, written
// where the error reached the end of the process uncaught). Whatever its checks say, the job did not die of
// what they test: an `exit: 0` with must_fail would count that death as the expected failure. Says which call.
std::optional<std::string> unsupported_call(const Attempt& a) {
  for (const Event& e : a.events)
    if (e.src == events::kSrcProbe && e.kind == events::kDivergence && e.text("kind") == "unsupported")
      return e.text("detail", "a call the virtual CUDA device cannot run");
  return std::nullopt;
}

// "torch 2.14.1+cu130" from the probe's start event, or empty.
std::string framework_seen(const Attempt& a) {
  for (const Event& e : a.events)
    if (e.src == events::kSrcProbe && e.kind == events::kProbeStart && !e.text("version").empty())
      return e.text("framework", "torch") + " " + e.text("version");
  return {};
}

}  // namespace

std::optional<Untested> why_untested(const JobSpec& job, const Trace& trace, bool gpu_found) {
  const bool sidecar = job.memory.reserve > 0 || job.memory.leave.has_value();
  bool fired = false, stepped = false, any_rules = false, any_inject = false;
  for (const Attempt& a : trace.attempts) {
    if (a.end_kind == AttemptEnd::failed_to_start || a.end_kind == AttemptEnd::interrupted) continue;
    const std::string which = attempt_name(a.index);
    if (auto outside = escaped(a)) return error(which + ": " + *outside);
    if (auto changed = tampering(a))
      return error(which + ": the job changed what is tested: " + *changed + ", so its verdicts cannot be believed");
    const bool needs_shim = plan_needs_shim(job, a.faults_enabled);
    if (needs_shim) {
      if (!a.shim || a.shim->processes == 0)
        return error(which + ": the shim never started in the job's processes, so no fault or cap was applied "
                             "(does the job clear LD_PRELOAD from its environment, or run a statically linked program?)");
      if (a.shim->rejected > 0)
        return error(which + ": the shim rejected the fault plan, so no fault or cap was applied: " + plan_error(a));
    }
    if (auto lost = refusals_lost(a)) return error(which + ": " + *lost);
    if (auto call = unsupported_call(a))
      return error(which + " died of a call the virtual CUDA device cannot run, not of anything its checks test, so its "
                           "verdicts cannot be believed: " + *call);
    fired = fired || fault_fired(a, sidecar);
    stepped = stepped || completed_a_step(a);
    any_rules = any_rules || has_rules(job, a);
    for (const Event& e : a.events) any_inject = any_inject || is_refusal(e);
    if (died(a)) {
      const bool can_fire = needs_shim || sidecar;
      if (can_fire ? !fired : !stepped) {
        std::string line = last_line(a);
        return error(which + " " + attempt_end_text(a) + (can_fire ? " before any fault fired" : " before its first training step") +
                     ": nothing was tested" + (line.empty() ? std::string() : " (it printed: " + line + ")"));
      }
    }
    // A driver call alone is not enough: on a GPU machine PyTorch asks the device's size even when the
    // training runs on the CPU (seen on the H100: `train.py --device cpu` under a cap passed).
    if (needs_shim && a.shim->allocations == 0 && !gpu_found && !trace.simulated_device &&
        job.device != DeviceChoice::virtual_device) {
      const std::string seen = framework_seen(a);
      return error(which + ": the shim saw no CUDA allocation, and this machine has no GPU (no NVIDIA driver was "
                   "found)" + (seen.empty() ? std::string() : ": the job's " + seen + " had no GPU to use") +
                   "; add --simulate (suite: device: virtual) to run it on the virtual CUDA device, or run it on a "
                   "machine with a GPU");
    }
    if (needs_shim && a.shim->allocations == 0)
      return error(which + ": the shim saw no CUDA allocation: this job did not use the GPU" +
                   (a.shim->driver_called ? " (it only asked the driver about the device)" : "") +
                   "; a CPU-only torch? the wrong interpreter? work done in a process the shim was not preloaded into?");
  }
  // The reference run (checkpoint_resume's `reference`) is evidence too: what it did outside the harness counts.
  for (const Attempt& a : trace.reference) {
    if (a.end_kind == AttemptEnd::failed_to_start || a.end_kind == AttemptEnd::interrupted) continue;
    if (auto outside = escaped(a)) return error("the reference run: " + *outside);
    if (auto changed = tampering(a))
      return error("the reference run: the job changed what is tested: " + *changed + ", so its verdicts cannot be believed");
  }
  if (any_rules && !any_inject)
    return Untested{JobStatus::inconclusive,
                    "no fault fired: the job's fault rules never matched an allocation, so its recovery was not tested "
                    "(is the step, phase or size of the rule one the job reaches?)"};
  return std::nullopt;
}

}  // namespace oomh
