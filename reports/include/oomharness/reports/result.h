#pragma once
// The result model: what a run produced, the source of every report. Its JSON form is versioned
// (docs/results-schema.json); `oomharness report` and `oomharness compare` read it back.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/name_table.h"
#include "oomharness/policies/findings.h"
#include "oomharness/policies/trace.h"
#include "oomharness/policies/verdict.h"

namespace oomh {

inline constexpr int kResultsSchemaVersion = 1;

enum class JobStatus { passed, failed, error, skipped, inconclusive, interrupted };
const char* to_string(JobStatus s);
std::optional<JobStatus> job_status_from_string(const std::string& s);

// How an attempt, or one rank of it, ended: results.json's `outcome` (Note [Name tables] in
// oomharness/name_table.h). The results builder names each attempt from this table, the reader refuses a
// name it lacks, and tests/reports/result_test.cpp checks docs/results-schema.json's enums against it.
enum class AttemptOutcome { ok, oom, nonzero, signal, timeout, interrupted, failed_to_start };
inline constexpr NameTable<AttemptOutcome, 7> kAttemptOutcomes{{
    {AttemptOutcome::ok, "ok", "exited with code 0"},
    {AttemptOutcome::oom, "oom", "died of an out-of-memory error (its exit or the signal that ended it)"},
    {AttemptOutcome::nonzero, "nonzero", "exited with a code other than 0, not after an out-of-memory error"},
    {AttemptOutcome::signal, "signal", "a signal killed it, not after an out-of-memory error"},
    {AttemptOutcome::timeout, "timeout", "the runner stopped it at its timeout"},
    {AttemptOutcome::interrupted, "interrupted", "the run was interrupted while it ran"},
    {AttemptOutcome::failed_to_start, "failed_to_start", "its command could not be started"},
}};
inline std::string outcome_name(AttemptOutcome o) { return std::string(name_of(kAttemptOutcomes, o)); }

struct FaultRecord {
  int attempt = 0;
  double t = 0;               // seconds since the job started
  std::string rule;           // rule name, or "cap"
  std::string entry;          // "cuMemAlloc_v2"
  uint64_t size = 0;
  int device = 0;
  int64_t step = -1;
  std::string phase;
  bool visible = false;       // the training code saw an OOM for it (false: absorbed by the framework)
  std::string layer = "driver";  // where it was asked (Note [Where a step fault fires] in injector/engine/fault_plan.h)
};

struct TimelinePoint {
  double t = 0;               // seconds since the job started
  uint64_t held = 0;
  uint64_t cap = 0;
  int64_t step = -1;
};

struct Marker {               // what the timeline chart marks
  double t = 0;               // seconds since the job started
  int attempt = 0;
  std::string kind;           // "inject", "oom", "empty_cache", "checkpoint_save", "checkpoint_load", "restart", "step"
  std::string label;
  std::optional<int> rank;    // a distributed job's rank the event came from (docs/distributed.md)
};

// One rank of a distributed job's attempt (Note [Ranks] in policies' trace.h).
struct RankResult {
  int rank = 0;
  AttemptOutcome outcome = AttemptOutcome::ok;
  std::optional<int> exit_code;
  std::optional<int> signal;
  int64_t last_step = -1;
  std::string log_path;
  std::string stacks;         // every thread's stack when the runner found the job hung; empty otherwise
};

struct AttemptResult {
  int index = 0;              // from 0, as data; people read attempt_name(index)
  double start = 0;           // seconds since the job started
  double duration = 0;
  AttemptOutcome outcome = AttemptOutcome::ok;
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool faults_enabled = true;
  int64_t last_step = -1;
  std::string output_tail;    // last lines of the output
  std::string log_path;
  std::vector<RankResult> ranks;  // a job with ranks: N > 1; results.json leaves it out otherwise
};

// Every text a person reads numbers attempts from 1 with the trace model's attempt_name ("attempt 2" for
// index 1), as the policies' sentences do; results.json keeps the 0-based `index` (and Evidence::attempt,
// FaultRecord::attempt) as data.

struct JobResult {
  std::string name;
  JobStatus status = JobStatus::passed;
  std::string message;        // one line: the first failing verdict's reason, or the error
  double start = 0;           // wall-clock seconds
  double duration = 0;
  std::vector<std::string> command;
  std::optional<int> gpu;     // the GPU it ran on
  std::vector<int> gpus;      // a job with ranks on GPUs: each rank's GPU, in rank order (empty otherwise)
  std::vector<AttemptResult> attempts;
  std::vector<Verdict> verdicts;
  std::vector<FaultRecord> faults;
  std::map<int, std::vector<TimelinePoint>> timeline;  // per device, downsampled (at most kTimelinePoints)
  // A job with ranks: each rank's memory (its devices' held bytes summed, its cap), downsampled; the HTML
  // chart draws one line per rank from it instead of `timeline`, where the ranks' figures mix.
  std::map<int, std::vector<TimelinePoint>> rank_timeline;
  std::map<int, uint64_t> peak;                        // per device
  std::vector<Marker> markers;
  std::optional<std::string> snapshot;                 // a PyTorch memory snapshot saved at the OOM
  std::optional<double> recovery_seconds;              // from the first visible OOM to the next completed step
  // Set when the job ran on the virtual CUDA device, to the device's own words ("virtual CUDA device
  // (PyTorch 1.13.1 on the CPU, caching-allocator model)"), with what the device saw this job do that a GPU
  // would not (kind -> sentence). Note [Saying what was simulated].
  std::optional<std::string> virtual_device;
  // A capped job: what the fixed part (parameters, gradients, optimizer state, workspaces) took at its first
  // step, and what the cap left for the batch (Note [The cap, visible] in runner/src/app/results_builder.cpp).
  std::optional<std::string> cap_use;
  int step_base = 1;  // the number of its first step (Note [Step numbering] in runner/src/suite/job_fields.cpp)
  // The step training had to reach (`completes`' steps or the job's `target_step`); unset, whether training
  // completed was not checked, and the run's closing line says so of a pass (Note [A pass that did not check
  // completion] in reports/src/result.cpp).
  std::optional<int64_t> target_step;
  std::map<std::string, std::string> divergences;
  // What the runner, the shim or the event reader warned about in this job's attempts ("attempt 1: the
  // output log ... was cut: ..."), at most kMaxWarnings, the last one saying how many more there were.
  std::vector<std::string> warnings;
  // Why memory ran out or grew (policies' diagnose(), docs/diagnosis.md), and what held it: the probe's
  // memory_breakdown fields at each OOM and at each attempt's last peak, with `attempt` and `t` (seconds
  // since the job started) added.
  std::vector<Finding> findings;
  nlohmann::json breakdowns = nlohmann::json::array();
  int faults_visible() const;
  int faults_absorbed() const;
  // Note [Expected failures]: XFAIL and XPASS, derived from the verdicts.
  bool expected_failure() const;  // passed, and a must_fail check failed as expected
  bool unexpected_pass() const;   // failed only because a must_fail check passed
};
inline constexpr size_t kTimelinePoints = 600;
inline constexpr size_t kMaxWarnings = 20;

// Reduces a memory timeline to at most `max` points (max >= 2 keeps the first and the last) without
// losing its peaks: the points are cut into equal buckets and each bucket keeps its lowest and its
// highest point, in time order. A timeline already short enough is returned unchanged.
std::vector<TimelinePoint> downsample_timeline(const std::vector<TimelinePoint>& points, size_t max = kTimelinePoints);

struct SuiteResult {
  std::string name;
  std::string file;           // as given on the command line
  double start = 0;
  double duration = 0;
  std::vector<JobResult> jobs;
};

struct Environment {
  std::string hostname;
  std::string gpu_name;       // "NVIDIA H200", or "simulated (CPU driver double)"
  std::string driver_version;
  std::string cuda_version;
  bool simulated_device = false;
  std::string virtual_device;  // the virtual CUDA device's words when some job ran on it, else ""
  std::map<std::string, std::string> frameworks;  // "torch": "2.11.0+cu130"
  std::string harness_version;
  std::vector<std::string> command_line;
};

struct RunResult {
  int schema_version = kResultsSchemaVersion;
  double start = 0;           // wall-clock seconds
  double duration = 0;
  bool interrupted = false;
  Environment environment;
  std::vector<SuiteResult> suites;

  // By status; xfailed are counted in passed as well, xpassed in failed (Note [Expected failures]).
  struct Counts {
    int total = 0, passed = 0, failed = 0, errors = 0, skipped = 0, inconclusive = 0, interrupted = 0;
    int xfailed = 0, xpassed = 0;
  };
  Counts counts() const;
  int virtual_device_jobs() const;  // jobs that ran on the virtual CUDA device
  // No job at all, or none that passed, failed, erred or was interrupted (each was inconclusive or
  // skipped): the run showed nothing either way, and no headline may call it green.
  bool nothing_tested() const;
};

// The run's counts in one line, as every summary heads it (pytest's closing line without the time):
// "1 failed, 1 xpassed, 3 passed, 1 xfailed, 2 inconclusive"; when nothing_tested(), it says so first:
// "nothing was tested: 3 inconclusive", "nothing was tested: no job ran".
std::string counts_sentence(const RunResult& run);

// The last `lines` lines of an attempt's output (at most 4 KiB), made safe to print: terminal escapes
// and control characters dropped, \r as a line break, invalid UTF-8 replaced (the writers' rule).
std::string output_excerpt(const AttemptResult& attempt, size_t lines);

// `s` made safe to print on one line by the same rule (line breaks and tabs become spaces), at most
// `max_bytes` bytes: for texts a job can feed, such as the message of a warning event it writes.
std::string one_line(std::string_view s, size_t max_bytes = 1024);

// Which numbering the steps a job's messages name are in, said once per job by the terminal, the HTML
// and the Markdown: "steps counted from 1 (the first training step is step 1; step_base: 0 counts from 0)".
std::string step_numbering(int step_base);

// For an expected failure (XFAIL), which must_fail checks failed as expected and why:
// "memory_stable failed as expected (must_fail): memory held at step start grew ..."; "" otherwise.
std::string expected_failure_sentence(const JobResult& job);

// Note [Saying what was simulated]
// No GPU ran a job on the CPU driver double or on the virtual CUDA device, and every report (terminal,
// HTML, Markdown, JUnit) says so above its jobs in these same words. The driver double shows the harness,
// not a GPU. The virtual device runs the user's own PyTorch code: its recovery verdicts are meaningful, its
// absolute memory figures are modelled. A job on the virtual device also lists its divergences, what the
// device saw that job do that a GPU would not (python/oomharness/virtual_device/device.py, Note [Divergences]).
std::vector<std::string> simulation_notes(const RunResult& run);
// "attention: ...; autocast: ..." for a job's divergences; "" when it has none.
std::string divergence_list(const JobResult& job);

void to_json(nlohmann::json& j, const FaultRecord& v);
void from_json(const nlohmann::json& j, FaultRecord& v);
void to_json(nlohmann::json& j, const TimelinePoint& v);
void from_json(const nlohmann::json& j, TimelinePoint& v);
void to_json(nlohmann::json& j, const Marker& v);
void from_json(const nlohmann::json& j, Marker& v);
void to_json(nlohmann::json& j, const RankResult& v);
void from_json(const nlohmann::json& j, RankResult& v);
void to_json(nlohmann::json& j, const AttemptResult& v);
void from_json(const nlohmann::json& j, AttemptResult& v);
void to_json(nlohmann::json& j, const JobResult& v);
void from_json(const nlohmann::json& j, JobResult& v);
void to_json(nlohmann::json& j, const SuiteResult& v);
void from_json(const nlohmann::json& j, SuiteResult& v);
void to_json(nlohmann::json& j, const Environment& v);
void from_json(const nlohmann::json& j, Environment& v);
void to_json(nlohmann::json& j, const RunResult& v);
void from_json(const nlohmann::json& j, RunResult& v);

}  // namespace oomh
