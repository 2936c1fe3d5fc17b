#pragma once
// Finding a step's allocation sites in a golden run, and the faults that fail each (`oomharness sweep`).
//
// Note [Sweep sites]
// The golden run records every allocation call of the chosen step (Note [Recording a step's allocations]
// in injector/engine/engine.h): its entry point, size, the probe's phase, and `nth`, its number among the
// step's calls in that process. Calls alike in (phase, entry, size class) are one site: a training that
// survives an OOM at one forward activation of 1-2 MiB survives it at the next one too, and K sites, not
// every call, is what a sweep can afford to run twice. The size class is the power of two below the size
// (a site holds sizes from 2^k to 2^(k+1) - 1); the user's Python line joins the key when the recording has
// one (the virtual device's allocator model names it: Note [The site of a recorded call] in
// injector/engine/engine.h).
// A site is failed at its first call: `step=S,nth=K` in the rule schema every front end shares, so the
// `--fault` printed for a site is exactly the rule its job ran.
//  - transient: `times=T`, T failures in a row (default 2: PyTorch's caching allocator frees its cache and
//    retries once, so two failures reach the code as torch.OutOfMemoryError; docs/design/DESIGN.md, "the spike"), then
//    the driver answers again;
//  - persistent: `until_freed=1`, every allocation fails until the process frees memory.
// Only the first process's calls are swept (the one that recorded the first call of the step): a rule's
// counters are per process, so another process's nth would fail that process's call instead.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/policies/trace.h"
#include "oomharness/runner/suite.h"
#include "oomharness/reports/sweep.h"

namespace oomh::app {

struct RecordedCall {
  int pid = 0;
  std::string entry;
  uint64_t size = 0;
  int device = 0;
  int64_t step = 0;
  std::string phase;
  uint64_t nth = 0;
  std::optional<std::string> where;  // the user's line (Note [The site of a recorded call])
};

// The `alloc` events of the trace's first attempt for `step`, in order, of the process that made the first.
// Several steps: call it per step and join the lists.
std::vector<RecordedCall> recorded_calls(const Trace& trace, int64_t step);

// "1 MiB..2 MiB": the power-of-two class of `size` (0 is its own class, "0 B").
std::string size_class(uint64_t size);

// The calls grouped into sites (Note [Sweep sites]; a site never spans two steps), numbered from 1 in the
// order of their first call.
std::vector<SweepSite> sweep_sites(const std::vector<RecordedCall>& calls);

// `--step`: "3", "2,5" or "2..4" (at most kMaxSweepSteps steps, each from 1), sorted; "" when it is fine,
// else why not.
inline constexpr size_t kMaxSweepSteps = 64;
std::string parse_sweep_steps(const std::string& text, std::vector<int64_t>& steps);

enum class SweepMode { transient, persistent };
const char* sweep_mode_name(SweepMode m);
// "transient", "persistent"; nullopt for anything else.
std::optional<SweepMode> sweep_mode_from_name(const std::string& name);

// The --fault text that fails `site` in `mode`: "step=3,nth=2,times=2" or "step=3,nth=2,until_freed=1".
std::string site_fault_text(const SweepSite& site, SweepMode mode, int transient_times);

// Note [Packing a sweep's runs]
// The runner gives a job without a cap a GPU to itself (Note [GPU packing]), so uncapped faulted runs
// ran one after another on the H100 (42 runs in 376 s, ten times the sweep's time bound). With --jobs
// above 1 on a GPU, each faulted run of a job that has no cap or reservation gets one of twice the golden
// run's peak plus 256 MiB: room for any recovery that needs no more than the golden run held, and a need
// the packer can place beside others. Not on the driver double or the virtual device (no GPU to share),
// nor with a cap of the user's own; the terminal says when it is set.
//
// The cap each faulted run gets, or nullopt: jobs > 1, not simulated, no cap or reservation of the job's
// own, and a golden peak known.
std::optional<uint64_t> sweep_packing_cap(const JobSpec& job, uint64_t golden_peak, int jobs, bool simulate);

}  // namespace oomh::app
