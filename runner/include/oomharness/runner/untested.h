#pragma once
// Note [Green means tested]
// A harness is worth exactly as much as its green. Before a job's checks are believed, the runner asks
// whether the job was tested at all, from facts only the harness has: the armed record of its shims
// (Note [Armed record] in include/oomharness/control_block.h), which faults fired, and how each attempt
// ended. A job that was not tested is never a pass:
//  - its plan had rules or caps, and in an attempt no process armed the shim, or one rejected the plan,
//    or no process ever allocated device memory through it (the job did not use the GPU: a CPU-only
//    torch, the wrong interpreter, work done elsewhere; a query of the device's size is not use): error;
//  - an attempt died (a non-zero exit or a signal) before any fault fired (an injection, an OOM the code
//    saw, or an OOM it died of), or, for a job with nothing to fire, before its first training step
//    (a ModuleNotFoundError, a missing file): error, naming the last line it printed;
//  - the job wrote into its control block what only the runner writes (a plan, a cap: Note [A plan only
//    the runner writes] in injector/engine/engine.h): error, even though the shims refused it;
//  - its event log holds lines that parse as events but were not sealed with the attempt's key (the job's own
//    code wrote them: Note [Sealed event lines] in include/oomharness/event_seal.h): error, and the lines are
//    no evidence;
//  - a process of the job held device memory outside the shim (it was started with LD_PRELOAD cleared, or is
//    static or setuid: Note [Processes outside the shim] in runner/src/exec/escapes.h): error, naming it;
//  - the shims' counters in the control block say they refused allocations and the attempt's event log
//    holds none of them (the job replaced its log: Note [An event log replaced] in
//    runner/src/exec/job_runner_attempts.cpp): error, saying what the counters say;
//  - its plan had fault rules and none of them fired in the whole job: it cannot pass (an `exit: 0` check
//    would pass a job whose fault never came), it is inconclusive.
// On a machine where no GPU was found a job sent to the GPU allocates nothing through the shim (a CUDA build
// of torch without a driver falls back to the CPU, or fails): its error says so, names the torch the probe
// saw, and points to --simulate.
// The sentence is the job's message; the terminal prints the attempt's last output lines under it.

#include <optional>
#include <string>

#include "oomharness/policies/trace.h"
#include "oomharness/reports/result.h"
#include "oomharness/runner/suite.h"

namespace oomh {

struct Untested {
  JobStatus status = JobStatus::error;  // error, or inconclusive (applies only to a job that would pass)
  std::string message;
};

// Why `trace` does not show that `job` was tested; nullopt when it does. An interrupted job is not asked.
// `gpu_found`: whether the run found a GPU on this machine (false under --simulate too).
std::optional<Untested> why_untested(const JobSpec& job, const Trace& trace, bool gpu_found = true);

}  // namespace oomh
