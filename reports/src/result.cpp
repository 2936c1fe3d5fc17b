// The result model's JSON form (docs/results-schema.json) and its small helpers.
//
// Note [Reading results back]
// from_json throws FieldError, a std::runtime_error whose message is the path of the offending field and
// the problem ("suites[0].jobs[2].status: unknown status 'passd'"). Each level catches what the level below
// threw and puts its own name in front, so that a bad value deep in a file is named exactly; the loader
// (json_report.cpp) then puts the file's name in front of that. Optional fields may be absent or null.

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "oomharness/json_number.h"
#include "oomharness/reports/result.h"
#include "result_json.h"
#include "text.h"

namespace oomh {

using nlohmann::json;

const char* to_string(JobStatus s) {
  switch (s) {
    case JobStatus::passed: return "passed";
    case JobStatus::failed: return "failed";
    case JobStatus::error: return "error";
    case JobStatus::skipped: return "skipped";
    case JobStatus::inconclusive: return "inconclusive";
    case JobStatus::interrupted: return "interrupted";
  }
  return "error";
}

std::optional<JobStatus> job_status_from_string(const std::string& s) {
  for (JobStatus v : {JobStatus::passed, JobStatus::failed, JobStatus::error, JobStatus::skipped,
                      JobStatus::inconclusive, JobStatus::interrupted}) {
    if (s == to_string(v)) return v;
  }
  return std::nullopt;
}

int JobResult::faults_visible() const {
  return static_cast<int>(std::count_if(faults.begin(), faults.end(), [](const FaultRecord& f) { return f.visible; }));
}

int JobResult::faults_absorbed() const { return static_cast<int>(faults.size()) - faults_visible(); }

// Note [Expected failures]
// A check written with `must_fail: true` belongs to a broken trainer kept in a suite to show that the
// check catches it. The job's status stays what the runner judged (job_status: a must_fail check that
// fails leaves the job passed, one that passes fails it); the reports name the two cases as pytest does:
//   XFAIL  the job passed and at least one must_fail check failed, as expected;
//   XPASS  the job failed, and only because a must_fail check passed (no ordinary check failed: that
//          job is simply FAILED, its failing check being what a reader must see first).
// Both are derived here, from the verdicts, so that the terminal, Markdown, HTML and JUnit cannot
// disagree. JUnit shows XFAIL as a passing testcase whose output names the check, XPASS as a failure.
// In results.json's `counts`, xfailed and xpassed are counted within passed and failed as well (a CI
// script reading `.counts.failed` still sees an XPASS); the human summaries show them apart.
bool JobResult::expected_failure() const {
  if (status != JobStatus::passed) return false;
  return std::any_of(verdicts.begin(), verdicts.end(),
                     [](const Verdict& v) { return v.must_fail && v.status == VerdictStatus::fail; });
}

bool JobResult::unexpected_pass() const {
  if (status != JobStatus::failed) return false;
  bool xpass = false;
  for (const Verdict& v : verdicts) {
    if (!against_expectation(v)) continue;
    if (!v.must_fail) return false;
    xpass = true;
  }
  return xpass;
}

RunResult::Counts RunResult::counts() const {
  Counts c;
  for (const SuiteResult& suite : suites) {
    for (const JobResult& job : suite.jobs) {
      ++c.total;
      c.xfailed += job.expected_failure();
      c.xpassed += job.unexpected_pass();
      switch (job.status) {
        case JobStatus::passed: ++c.passed; break;
        case JobStatus::failed: ++c.failed; break;
        case JobStatus::error: ++c.errors; break;
        case JobStatus::skipped: ++c.skipped; break;
        case JobStatus::inconclusive: ++c.inconclusive; break;
        case JobStatus::interrupted: ++c.interrupted; break;
      }
    }
  }
  return c;
}

std::vector<std::string> simulation_notes(const RunResult& run) {
  std::vector<std::string> notes;
  int total = run.counts().total;
  int on_device = run.virtual_device_jobs();
  if (on_device > 0) {
    std::string who = on_device == total ? (total == 1 ? std::string("this job") : "these " + std::to_string(total) + " jobs")
                                         : std::to_string(on_device) + " of these " + std::to_string(total) + " jobs";
    notes.push_back("No GPU ran " + who + ": " + (on_device == 1 ? "it" : "they") + " ran on the " +
                    (run.environment.virtual_device.empty() ? std::string("virtual CUDA device") : run.environment.virtual_device) +
                    ". Recovery verdicts (batch halving, empty_cache retry, checkpoint resume, leaks) are meaningful; "
                    "absolute memory figures are modelled. Confirm on a GPU before a long training.");
  }
  if (run.environment.simulated_device && on_device < total)
    notes.push_back("device simulated (CPU driver double): " +
                    std::string(on_device > 0 ? "the other jobs' results" : "these results") +
                    " show the harness, not a GPU.");
  return notes;
}

std::string divergence_list(const JobResult& job) {
  std::string s;
  for (const auto& [kind, detail] : job.divergences) s += (s.empty() ? "" : "; ") + kind + ": " + detail;
  return s;
}

int RunResult::virtual_device_jobs() const {
  int n = 0;
  for (const SuiteResult& suite : suites)
    for (const JobResult& job : suite.jobs) n += job.virtual_device.has_value();
  return n;
}


std::string step_numbering(int step_base) {
  if (step_base == 0) return "steps counted from 0, as the code counts them (step_base: 0)";
  return "steps counted from 1: the first training step is step 1; step_base: 0 counts from 0";
}

std::string expected_failure_sentence(const JobResult& job) {
  if (!job.expected_failure()) return {};
  std::string s;
  for (const Verdict& v : job.verdicts) {
    if (!v.must_fail || v.status != VerdictStatus::fail) continue;
    s += (s.empty() ? "" : "; ") + v.policy + " failed as expected (must_fail): " + v.reason;
  }
  return s;
}

std::string output_excerpt(const AttemptResult& attempt, size_t lines) {
  return text::tail(text::sanitize_text(attempt.output_tail), lines, 4 * 1024);
}

std::string one_line(std::string_view s, size_t max_bytes) {
  std::string out = text::sanitize_text(s);
  std::replace_if(out.begin(), out.end(), [](char c) { return c == '\n' || c == '\t'; }, ' ');
  if (out.size() > max_bytes) out = text::utf8_prefix(out, max_bytes) + "...";
  return out;
}

bool RunResult::nothing_tested() const {
  const Counts c = counts();
  return c.passed + c.failed + c.errors + c.interrupted == 0;
}

std::string counts_sentence(const RunResult& run) {
  const RunResult::Counts c = run.counts();
  std::string s;
  auto part = [&](int n, const char* word) {
    if (n) s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + word;
  };
  part(c.failed - c.xpassed, "failed");
  part(c.xpassed, "xpassed");
  part(c.errors, c.errors == 1 ? "error" : "errors");
  part(c.passed - c.xfailed, "passed");
  // Note [A pass that did not check completion] (issue 42): a job with no target step (no `completes`, no
  // `target_step`) passes without anyone checking that its training completed: a trainer that halves, trains
  // one more step and quits passes its exit code and batch_halving. Its checks' sentences say so; the closing
  // line of every report (terminal, Markdown, HTML, JUnit) counts such passes.
  const int passed = c.passed - c.xfailed;
  int unchecked = 0;
  for (const auto& suite : run.suites)
    for (const auto& job : suite.jobs)
      if (job.status == JobStatus::passed && !job.expected_failure() && !job.target_step) ++unchecked;
  if (unchecked)
    s += unchecked == passed ? std::string(" (no target step: completion not checked)")
                             : " (" + std::to_string(unchecked) + " with no target step: completion not checked)";
  part(c.xfailed, "xfailed");
  part(c.inconclusive, "inconclusive");
  part(c.skipped, "skipped");
  part(c.interrupted, "interrupted");
  if (!run.nothing_tested()) return s;
  return "nothing was tested: " + (s.empty() ? std::string("no job ran") : s);
}

std::vector<TimelinePoint> downsample_timeline(const std::vector<TimelinePoint>& points, size_t max) {
  if (points.size() <= max) return points;
  if (max == 0) return {};
  if (max == 1) return {*std::max_element(points.begin(), points.end(),
                                          [](const TimelinePoint& a, const TimelinePoint& b) { return a.held < b.held; })};
  std::vector<TimelinePoint> out;
  out.reserve(max);
  out.push_back(points.front());
  // The interior points (all but the first and the last) go into buckets of two survivors each.
  const size_t interior = points.size() - 2;
  const size_t buckets = (max - 2) / 2;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = 1 + b * interior / buckets;
    const size_t hi = 1 + (b + 1) * interior / buckets;  // exclusive
    if (lo >= hi) continue;
    size_t min_i = lo, max_i = lo;
    for (size_t i = lo; i < hi; ++i) {
      if (points[i].held < points[min_i].held) min_i = i;
      if (points[i].held > points[max_i].held) max_i = i;
    }
    out.push_back(points[std::min(min_i, max_i)]);
    if (min_i != max_i) out.push_back(points[std::max(min_i, max_i)]);
  }
  out.push_back(points.back());
  return out;
}

// ---- reading helpers ---------------------------------------------------------------------------------

namespace detail {

FieldError::FieldError(std::string path, std::string problem)
    : std::runtime_error(path.empty() ? problem : path + ": " + problem), path_(std::move(path)), problem_(std::move(problem)) {}

FieldError FieldError::within(const std::string& parent) const {
  if (parent.empty()) return *this;
  if (path_.empty()) return FieldError(parent, problem_);
  return FieldError(parent + (path_.front() == '[' ? "" : ".") + path_, problem_);
}

std::string clean_json_error(const char* what) {
  // "[json.exception.type_error.302] type must be string, but is number" -> "type must be string, but is number"
  std::string s = what;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  return s;
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) throw FieldError("", std::string("expected an object, found ") + j.type_name());
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& required(const json& j, const char* key) {
  const json* v = member(j, key);
  if (!v) throw FieldError(key, "missing");
  return *v;
}

}  // namespace detail

namespace {

using detail::FieldError;
using detail::member;
using detail::within;

// One value: an integer through read_whole (Note [Whole numbers from JSON]), anything else by its codec.
template <class T>
T decode(const json& v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return read_whole<T>(v);
  else return v.get<T>();
}

template <class T>
void get(const json& j, const char* key, T& out) {
  const json* v = member(j, key);
  if (!v) return;  // absent: keep the default
  within(key, [&] { out = decode<T>(*v); });
}

template <class T>
void get(const json& j, const char* key, std::optional<T>& out) {
  const json* v = member(j, key);
  if (!v) { out.reset(); return; }
  within(key, [&] { out = decode<T>(*v); });
}

template <class T>
void get_list(const json& j, const char* key, std::vector<T>& out) {
  out.clear();
  const json* v = member(j, key);
  if (!v) return;
  within(key, [&] {
    if (!v->is_array()) throw FieldError("", std::string("expected an array, found ") + v->type_name());
    for (size_t i = 0; i < v->size(); ++i) {
      within("[" + std::to_string(i) + "]", [&] { out.push_back(decode<T>((*v)[i])); });
    }
  });
}

int device_key(const std::string& key) {
  size_t used = 0;
  int d = -1;
  try { d = std::stoi(key, &used); } catch (const std::exception&) { used = 0; }
  if (used != key.size() || d < 0) throw FieldError("", "device '" + key + "' is not a device number");
  return d;
}

template <class T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

}  // namespace

void to_json(json& j, const FaultRecord& v) {
  j = json{{"attempt", v.attempt}, {"t", v.t}, {"rule", v.rule}, {"entry", v.entry}, {"size", v.size},
           {"device", v.device}, {"step", v.step}, {"phase", v.phase}, {"visible", v.visible}, {"layer", v.layer}};
}
void from_json(const json& j, FaultRecord& v) {
  get(j, "attempt", v.attempt); get(j, "t", v.t); get(j, "rule", v.rule); get(j, "entry", v.entry);
  get(j, "size", v.size); get(j, "device", v.device); get(j, "step", v.step); get(j, "phase", v.phase);
  get(j, "visible", v.visible); get(j, "layer", v.layer);
}

void to_json(json& j, const TimelinePoint& v) {
  j = json{{"t", v.t}, {"held", v.held}, {"cap", v.cap}, {"step", v.step}};
}
void from_json(const json& j, TimelinePoint& v) {
  get(j, "t", v.t); get(j, "held", v.held); get(j, "cap", v.cap); get(j, "step", v.step);
}

void to_json(json& j, const Marker& v) {
  j = json{{"t", v.t}, {"attempt", v.attempt}, {"kind", v.kind}, {"label", v.label}};
  put(j, "rank", v.rank);
}
void from_json(const json& j, Marker& v) {
  get(j, "t", v.t); get(j, "attempt", v.attempt);
  detail::required(j, "kind");
  get(j, "kind", v.kind); get(j, "label", v.label); get(j, "rank", v.rank);
}

namespace {

// An attempt's or a rank's `outcome`, read by kAttemptOutcomes.
AttemptOutcome outcome_from(const json& j) {
  AttemptOutcome out{};
  within("outcome", [&] {
    const json& o = detail::required(j, "outcome");
    if (!o.is_string()) throw FieldError("", "expected a string");
    std::optional<AttemptOutcome> named = value_named(kAttemptOutcomes, o.get<std::string>());
    if (!named) throw FieldError("", "unknown outcome '" + o.get<std::string>() + "' (" + names_text(kAttemptOutcomes) + ")");
    out = *named;
  });
  return out;
}

}  // namespace

void to_json(json& j, const RankResult& v) {
  j = json{{"rank", v.rank}, {"outcome", outcome_name(v.outcome)}, {"last_step", v.last_step}, {"log_path", v.log_path}, {"stacks", v.stacks}};
  put(j, "exit_code", v.exit_code);
  put(j, "signal", v.signal);
}
void from_json(const json& j, RankResult& v) {
  get(j, "rank", v.rank); v.outcome = outcome_from(j); get(j, "exit_code", v.exit_code); get(j, "signal", v.signal);
  get(j, "last_step", v.last_step); get(j, "log_path", v.log_path); get(j, "stacks", v.stacks);
}

void to_json(json& j, const AttemptResult& v) {
  j = json{{"index", v.index}, {"start", v.start}, {"duration", v.duration}, {"outcome", outcome_name(v.outcome)},
           {"faults_enabled", v.faults_enabled}, {"last_step", v.last_step}, {"output_tail", v.output_tail},
           {"log_path", v.log_path}};
  put(j, "exit_code", v.exit_code);
  put(j, "signal", v.signal);
  if (!v.ranks.empty()) j["ranks"] = v.ranks;
}
void from_json(const json& j, AttemptResult& v) {
  get(j, "index", v.index); get(j, "start", v.start); get(j, "duration", v.duration); v.outcome = outcome_from(j);
  get(j, "exit_code", v.exit_code); get(j, "signal", v.signal); get(j, "faults_enabled", v.faults_enabled);
  get(j, "last_step", v.last_step); get(j, "output_tail", v.output_tail); get(j, "log_path", v.log_path);
  get_list(j, "ranks", v.ranks);
}

void to_json(json& j, const JobResult& v) {
  j = json{{"name", v.name}, {"status", to_string(v.status)}, {"message", v.message}, {"start", v.start},
           {"duration", v.duration}, {"command", v.command}};
  put(j, "gpu", v.gpu);
  if (!v.gpus.empty()) j["gpus"] = v.gpus;
  j["attempts"] = v.attempts;
  j["verdicts"] = v.verdicts;
  j["faults"] = v.faults;
  json timeline = json::object();
  // The schema bounds a timeline; a caller that forgot to downsample still writes a bounded file.
  for (const auto& [device, points] : v.timeline) timeline[std::to_string(device)] = downsample_timeline(points);
  j["timeline"] = std::move(timeline);
  if (!v.rank_timeline.empty()) {
    json lanes = json::object();
    for (const auto& [rank, points] : v.rank_timeline) lanes[std::to_string(rank)] = downsample_timeline(points);
    j["rank_timeline"] = std::move(lanes);
  }
  json peak = json::object();
  for (const auto& [device, bytes] : v.peak) peak[std::to_string(device)] = bytes;
  j["peak"] = std::move(peak);
  j["markers"] = v.markers;
  put(j, "snapshot", v.snapshot);
  put(j, "recovery_seconds", v.recovery_seconds);
  put(j, "virtual_device", v.virtual_device);
  put(j, "cap_use", v.cap_use);
  j["step_base"] = v.step_base;
  put(j, "target_step", v.target_step);
  j["step_numbering"] = step_numbering(v.step_base);  // for readers that print steps (the pytest plugin)
  if (!v.divergences.empty()) j["divergences"] = v.divergences;
  if (!v.warnings.empty()) j["warnings"] = v.warnings;
  if (!v.findings.empty()) j["findings"] = v.findings;
  if (v.breakdowns.is_array() && !v.breakdowns.empty()) j["breakdowns"] = v.breakdowns;
}
void from_json(const json& j, JobResult& v) {
  within("name", [&] {
    if (!detail::required(j, "name").is_string()) throw FieldError("", "expected a string");
  });
  get(j, "name", v.name);
  within("status", [&] {
    const json& s = detail::required(j, "status");
    if (!s.is_string()) throw FieldError("", "expected a string");
    auto st = job_status_from_string(s.get<std::string>());
    if (!st) throw FieldError("", "unknown status '" + s.get<std::string>() +
                                      "' (passed, failed, error, skipped, inconclusive, interrupted)");
    v.status = *st;
  });
  get(j, "message", v.message); get(j, "start", v.start); get(j, "duration", v.duration);
  get_list(j, "command", v.command); get(j, "gpu", v.gpu); get_list(j, "gpus", v.gpus);
  get_list(j, "attempts", v.attempts); get_list(j, "verdicts", v.verdicts); get_list(j, "faults", v.faults);
  v.timeline.clear();
  if (const json* t = member(j, "timeline")) {
    within("timeline", [&] {
      if (!t->is_object()) throw FieldError("", "expected an object keyed by device");
      // Named copies, not structured bindings: clang 14 rejects lambdas that capture those.
      for (const auto& item : t->items()) {
        const std::string key = item.key();
        const json& points = item.value();
        within(key, [&] {
          auto& out = v.timeline[device_key(key)];
          if (!points.is_array()) throw FieldError("", "expected an array of points");
          for (size_t i = 0; i < points.size(); ++i)
            within("[" + std::to_string(i) + "]", [&] { out.push_back(points[i].get<TimelinePoint>()); });
        });
      }
    });
  }
  v.rank_timeline.clear();
  if (const json* t = member(j, "rank_timeline")) {
    within("rank_timeline", [&] {
      if (!t->is_object()) throw FieldError("", "expected an object keyed by rank");
      for (const auto& item : t->items()) {
        const std::string key = item.key();
        const json& points = item.value();
        within(key, [&] {
          auto& out = v.rank_timeline[device_key(key)];
          if (!points.is_array()) throw FieldError("", "expected an array of points");
          for (size_t i = 0; i < points.size(); ++i)
            within("[" + std::to_string(i) + "]", [&] { out.push_back(points[i].get<TimelinePoint>()); });
        });
      }
    });
  }
  v.peak.clear();
  if (const json* p = member(j, "peak")) {
    within("peak", [&] {
      if (!p->is_object()) throw FieldError("", "expected an object keyed by device");
      for (const auto& item : p->items()) {
        const std::string key = item.key();
        const json& bytes = item.value();
        within(key, [&] { v.peak[device_key(key)] = decode<uint64_t>(bytes); });
      }
    });
  }
  get_list(j, "markers", v.markers);
  get(j, "snapshot", v.snapshot);
  get(j, "recovery_seconds", v.recovery_seconds);
  get(j, "virtual_device", v.virtual_device);
  get(j, "cap_use", v.cap_use);
  get(j, "step_base", v.step_base);
  get(j, "target_step", v.target_step);
  get(j, "divergences", v.divergences);
  get(j, "warnings", v.warnings);
  get_list(j, "findings", v.findings);
  if (const json* b = member(j, "breakdowns"); b && b->is_array()) v.breakdowns = *b;
}

void to_json(json& j, const SuiteResult& v) {
  j = json{{"name", v.name}, {"file", v.file}, {"start", v.start}, {"duration", v.duration}, {"jobs", v.jobs}};
}
void from_json(const json& j, SuiteResult& v) {
  get(j, "name", v.name); get(j, "file", v.file); get(j, "start", v.start); get(j, "duration", v.duration);
  get_list(j, "jobs", v.jobs);
}

void to_json(json& j, const Environment& v) {
  j = json{{"hostname", v.hostname}, {"gpu_name", v.gpu_name}, {"driver_version", v.driver_version},
           {"cuda_version", v.cuda_version}, {"simulated_device", v.simulated_device},
           {"frameworks", v.frameworks}, {"harness_version", v.harness_version}, {"command_line", v.command_line}};
  if (!v.virtual_device.empty()) j["virtual_device"] = v.virtual_device;
}
void from_json(const json& j, Environment& v) {
  get(j, "hostname", v.hostname); get(j, "gpu_name", v.gpu_name); get(j, "driver_version", v.driver_version);
  get(j, "cuda_version", v.cuda_version); get(j, "simulated_device", v.simulated_device);
  get(j, "virtual_device", v.virtual_device); get(j, "frameworks", v.frameworks); get(j, "harness_version", v.harness_version);
  get_list(j, "command_line", v.command_line);
}

void to_json(json& j, const RunResult& v) {
  const RunResult::Counts c = v.counts();
  // `counts` is derived (readers ignore it); it is there for `jq .counts.failed` in CI scripts.
  j = json{{"schema_version", v.schema_version},
           {"start", v.start},
           {"duration", v.duration},
           {"interrupted", v.interrupted},
           {"counts", {{"total", c.total}, {"passed", c.passed}, {"failed", c.failed}, {"errors", c.errors},
                       {"skipped", c.skipped}, {"inconclusive", c.inconclusive}, {"interrupted", c.interrupted},
                       {"xfailed", c.xfailed}, {"xpassed", c.xpassed}}},
           {"environment", v.environment},
           {"suites", v.suites}};
}
void from_json(const json& j, RunResult& v) {
  within("schema_version", [&] {
    const json& s = detail::required(j, "schema_version");
    if (whole_number<int>(s) != kResultsSchemaVersion)
      throw FieldError("", "version " + s.dump() + " is not supported (this oomharness reads version " +
                               std::to_string(kResultsSchemaVersion) + ")");
    v.schema_version = kResultsSchemaVersion;
  });
  get(j, "start", v.start); get(j, "duration", v.duration); get(j, "interrupted", v.interrupted);
  get(j, "environment", v.environment);
  get_list(j, "suites", v.suites);
}

}  // namespace oomh
