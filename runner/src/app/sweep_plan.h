#pragma once
// A sweep as steps any command can take (docs/sweep.md): `oomharness sweep` runs one job's; `oomharness
// run` runs those of every job of its suites that has a `sweep:` block, its faulted runs beside the
// suites' other jobs (Note [A suite's sweeps] in run_command.cpp).
//   1. setup_sweep: the job and what to sweep, checked before anything runs;
//   2. prepare_sweep: the golden run, the sites, one faulted job per site and mode;
//   3. (the caller runs the faulted jobs, with run_suites)
//   4. sweep_coverage and write_sweep: the coverage of their results, sweep.json and sweep.html.

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/sweep_sites.h"
#include "oomharness/reports/sweep.h"

namespace oomh::app {

// What to sweep, as flags or a suite's `sweep:` say it; empty / -1: not said.
struct SweepSettings {
  std::string steps;        // "3", "2,5", "2..4"
  std::string modes;        // "transient,persistent"
  int transient_times = -1;
};

struct SweepSetup {
  JobSpec base;             // the job, its checks completed (no_hang, memory_stable), no faults
  std::vector<int64_t> steps;
  std::string steps_text;   // "2,3,4"
  std::vector<SweepMode> modes;
  int transient_times = 2;
  std::string suite_dir;
};

struct PlannedRun {
  size_t site = 0;          // index in PreparedSweep::sites
  SweepMode mode = SweepMode::transient;
  std::string fault;        // the --fault text
};

struct PreparedSweep {
  SweepSetup setup;
  std::vector<SweepSite> sites;
  size_t calls = 0;                   // calls the golden run recorded
  double golden_seconds = 0;
  std::vector<PlannedRun> planned;
  std::vector<JobSpec> jobs;          // one per planned run, in the same order
};

// Step 1. `who` starts each message ("oomharness sweep", "oomharness: suite::job's sweep"). nullopt: go on.
std::optional<ExitCode> setup_sweep(JobSpec base, SweepSettings settings, const std::string& suite_dir,
                                    const std::string& who, SweepSetup& setup, std::ostream& err);

// Step 2. The golden run goes to `golden_out` with `run`'s simulate/strict/device settings; `jobs` is how
// many faulted runs will run at once (Note [Packing a sweep's runs]). nullopt: `prepared` is filled.
std::optional<ExitCode> prepare_sweep(const SweepSetup& setup, const RunArgs& run, const std::string& golden_out,
                                      int jobs, const std::string& who, PreparedSweep& prepared, std::ostream& out,
                                      std::ostream& err);

// Step 4. `results`: the run's job results, found by the planned jobs' names.
SweepResult sweep_coverage(const PreparedSweep& prepared, const std::vector<JobResult>& results, double seconds,
                           int jobs, bool simulated);
// Writes DIR/sweep.json and DIR/sweep.html (linking to `report`, relative to DIR) and prints the coverage.
// False when a file could not be written (said on `err`).
bool write_sweep(const SweepResult& sweep, const std::string& dir, const std::string& report, std::ostream& out,
                 std::ostream& err, int dir_fd = -1);

}  // namespace oomh::app
