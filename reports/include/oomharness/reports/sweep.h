#pragma once
// The sweep's coverage: which allocation sites of a step a training survives (`oomharness sweep`,
// docs/sweep.md). A view of the sweep's results.json: each site × mode is one ordinary job there, and this
// model only groups those jobs by site and names each outcome in one word. sweep.json is its JSON form.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/reports/result.h"

namespace oomh {

inline constexpr int kSweepSchemaVersion = 1;

// One allocation site: calls of the golden run's step alike in phase, entry point and size class
// (Note [Sweep sites] in runner/src/app/sweep_sites.h). `nth` names the first of them, the one the
// site's faults fail.
struct SweepSite {
  int index = 0;                  // from 1, as the table shows it
  int64_t step = 0;
  std::string phase;              // the probe's phase at the call, "none" when it said none
  std::string entry;              // "cuMemAlloc_v2"
  uint64_t size = 0;              // bytes asked by the first call of the site
  std::string size_class;         // "1 MiB..2 MiB"
  uint64_t nth = 0;               // the call's number in the step (a rule's `nth` with `step`)
  int calls = 0;                  // golden calls of the step this site stands for
  std::optional<std::string> where;  // the user's Python line, "train.py:77", when the recording knows it
                                     // (the virtual device; Note [The site of a recorded call])
};

// How one faulted run of a site ended, in one word (sweep_outcome):
//   recovered  the job passed and the training code saw the OOM
//   absorbed   the job passed; the fault never reached the code (the allocator's own retry took it)
//   crash      the job died (its last attempt ended by the OOM, a non-zero exit or a signal)
//   hang       the job was stopped at its timeout, or no_hang failed
//   leak       memory_stable failed: held memory did not return to its level after recovery
//   failed     another of the job's checks failed
//   error      the harness could not run or judge it; inconclusive, skipped, interrupted as their status
struct SweepCase {
  std::string mode;               // "transient" or "persistent"
  std::string fault;              // the --fault text that reproduces it alone
  std::string job;                // its job's name in results.json
  JobStatus status = JobStatus::passed;
  std::string outcome;
  std::string message;            // the job's one line
};

struct SweepSiteResult {
  SweepSite site;
  std::vector<SweepCase> cases;   // one per mode, in the order run
};

struct SweepResult {
  int schema_version = kSweepSchemaVersion;
  std::string job;                          // the job swept
  std::vector<std::string> command;
  std::vector<int64_t> steps;               // the steps swept, in order
  uint64_t calls_recorded = 0;              // allocation calls of those steps in the golden run
  double golden_seconds = 0;                // the golden run's duration
  double sweep_seconds = 0;                 // the faulted runs', together (packed with `jobs`)
  int jobs = 1;
  bool simulated = false;                   // the CPU driver double or the virtual device, not a GPU
  std::vector<SweepSiteResult> sites;

  // Sites whose every mode passed (recovered or absorbed).
  int survived() const;
};

// One word for a faulted job (the list above).
std::string sweep_outcome(const JobResult& job);

// The headline: "3 sites in step 2; survived 2; 1 not survived: site 3 (optimizer, 1 MiB..2 MiB): persistent
// crash" ("in steps 2, 3" for several).
std::string sweep_sentence(const SweepResult& sweep);
// The terminal's coverage table (sites × modes), the headline, and for each site not survived the
// --fault that reproduces it.
std::string render_sweep_text(const SweepResult& sweep, bool color = false);
// sweep.html: the coverage table as one self-contained page (inline CSS, no script), each run linked to its
// job in the run's report.html (`report` is that file's path relative to sweep.html; "" for no links).
std::string render_sweep_html(const SweepResult& sweep, const std::string& report = "report.html");
// sweep.json, pretty-printed, ending in a newline.
std::string render_sweep_json(const SweepResult& sweep);

void to_json(nlohmann::json& j, const SweepSite& v);
void to_json(nlohmann::json& j, const SweepCase& v);

}  // namespace oomh
