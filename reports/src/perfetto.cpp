// The run as a trace for ui.perfetto.dev and chrome://tracing, in the Trace Event Format (JSON).
//
// Note [Trace layout]
// One process per job (pid = its position in the run, from 1), placed on the run's time axis by the job's
// start, so that parallel jobs line up. In each process:
//   counters "GPU d memory" (ph C)   held and cap bytes, from the downsampled timeline; for a distributed
//                                    job "rank r memory", from the per-rank timeline (the ranks' figures
//                                    would mix per device)
//   thread 1 "attempts"   (ph X)     one slice per attempt, named with its outcome
//   thread 2 "steps"      (ph X)     one slice per training step, from step markers to the next step
//   thread 3 "events"     (ph i)     injected faults (visible or absorbed), OOMs, empty_cache, checkpoints
// A distributed job (docs/distributed.md) has one "steps" and one "events" lane per rank instead, threads
// kRankLanes + 2r and kRankLanes + 2r + 1, named "rank r steps" and "rank r events": its markers carry their rank.
// Injections are drawn from the fault records, which carry no rank: they stay on thread 3.
// Injections come from the job's fault records, which know whether the fault was visible; markers of
// kind "inject" repeat them and are not drawn twice. One event per line keeps golden diffs readable.

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "oomharness/reports/writers.h"
#include "oomharness/units.h"

namespace oomh {

namespace {

using nlohmann::json;

constexpr int kAttempts = 1, kSteps = 2, kEvents = 3, kRankLanes = 10;

int steps_lane(const Marker& m) { return m.rank ? kRankLanes + 2 * *m.rank : kSteps; }
int events_lane(const Marker& m) { return m.rank ? kRankLanes + 2 * *m.rank + 1 : kEvents; }

double micros(double seconds) { return std::round(seconds * 1e6 * 1000) / 1000; }  // ns precision, stable text

json metadata(const char* what, int pid, std::optional<int> tid, json args) {
  json e = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", std::move(args)}};
  if (tid) e["tid"] = *tid;
  return e;
}

void add_process(std::vector<json>& events, int pid, const SuiteResult& suite, const JobResult& job) {
  events.push_back(metadata("process_name", pid, std::nullopt, {{"name", suite.name + " / " + job.name}}));
  events.push_back(metadata("process_sort_index", pid, std::nullopt, {{"sort_index", pid}}));
  events.push_back(metadata("thread_name", pid, kAttempts, {{"name", "attempts"}}));
  events.push_back(metadata("thread_name", pid, kSteps, {{"name", "steps"}}));
  events.push_back(metadata("thread_name", pid, kEvents, {{"name", "events"}}));
  std::set<int> ranks;
  for (const Marker& m : job.markers)
    if (m.rank) ranks.insert(*m.rank);
  for (int r : ranks) {
    events.push_back(metadata("thread_name", pid, kRankLanes + 2 * r, {{"name", "rank " + std::to_string(r) + " steps"}}));
    events.push_back(metadata("thread_name", pid, kRankLanes + 2 * r + 1, {{"name", "rank " + std::to_string(r) + " events"}}));
  }
}

void add_counters(std::vector<json>& events, int pid, double offset, const JobResult& job) {
  const bool per_rank = !job.rank_timeline.empty();
  for (const auto& [key, points] : per_rank ? job.rank_timeline : job.timeline) {
    const std::string name = (per_rank ? "rank " : "GPU ") + std::to_string(key) + " memory";
    for (const TimelinePoint& p : points) {
      json args = {{"held", p.held}};
      if (p.cap) args["cap"] = p.cap;
      events.push_back({{"ph", "C"}, {"name", name}, {"pid", pid}, {"ts", micros(offset + p.t)}, {"args", std::move(args)}});
    }
  }
}

void add_attempts(std::vector<json>& events, int pid, double offset, const JobResult& job) {
  for (const AttemptResult& a : job.attempts) {
    json args = {{"outcome", outcome_name(a.outcome)}, {"last_step", a.last_step}, {"faults_enabled", a.faults_enabled}};
    if (a.exit_code) args["exit_code"] = *a.exit_code;
    if (a.signal) args["signal"] = *a.signal;
    events.push_back({{"ph", "X"}, {"name", attempt_name(a.index) + " (" + outcome_name(a.outcome) + ")"},
                      {"cat", "attempt"}, {"pid", pid}, {"tid", kAttempts}, {"ts", micros(offset + a.start)},
                      {"dur", micros(a.duration)}, {"args", std::move(args)}});
  }
}

double attempt_end(const JobResult& job, int attempt) {
  for (const AttemptResult& a : job.attempts)
    if (a.index == attempt) return a.start + a.duration;
  return job.duration;
}

void add_steps(std::vector<json>& events, int pid, double offset, const JobResult& job) {
  std::vector<const Marker*> steps;
  for (const Marker& m : job.markers)
    if (m.kind == "step") steps.push_back(&m);
  // By lane (rank), then time: a step lasts until the next step of the same rank and attempt.
  std::stable_sort(steps.begin(), steps.end(), [](const Marker* a, const Marker* b) {
    return std::pair(steps_lane(*a), a->t) < std::pair(steps_lane(*b), b->t);
  });
  for (size_t i = 0; i < steps.size(); ++i) {
    const Marker& m = *steps[i];
    const bool next_same = i + 1 < steps.size() && steps[i + 1]->attempt == m.attempt && steps[i + 1]->rank == m.rank;
    const double end = next_same ? steps[i + 1]->t : std::max(m.t, attempt_end(job, m.attempt));
    events.push_back({{"ph", "X"}, {"name", m.label.empty() ? "step" : m.label}, {"cat", "step"}, {"pid", pid},
                      {"tid", steps_lane(m)}, {"ts", micros(offset + m.t)}, {"dur", micros(end - m.t)},
                      {"args", {{"attempt", m.attempt}}}});
  }
}

void add_instants(std::vector<json>& events, int pid, double offset, const JobResult& job) {
  for (const FaultRecord& f : job.faults) {
    events.push_back({{"ph", "i"}, {"s", "t"}, {"name", std::string(f.visible ? "fault (visible) " : "fault (absorbed) ") +
                                                            f.entry + " " + format_bytes(f.size)},
                      {"cat", "inject"}, {"pid", pid}, {"tid", kEvents}, {"ts", micros(offset + f.t)},
                      {"args", {{"rule", f.rule}, {"entry", f.entry}, {"size", f.size}, {"device", f.device},
                                {"step", f.step}, {"phase", f.phase}, {"visible", f.visible}, {"attempt", f.attempt}}}});
  }
  for (const Marker& m : job.markers) {
    if (m.kind == "step" || m.kind == "inject") continue;
    events.push_back({{"ph", "i"}, {"s", "t"}, {"name", m.label.empty() ? m.kind : m.kind + ": " + m.label},
                      {"cat", m.kind}, {"pid", pid}, {"tid", events_lane(m)}, {"ts", micros(offset + m.t)},
                      {"args", {{"attempt", m.attempt}}}});
  }
}

}  // namespace

std::string render_perfetto(const RunResult& run) {
  std::vector<json> events;
  int pid = 0;
  for (const SuiteResult& suite : run.suites) {
    for (const JobResult& job : suite.jobs) {
      ++pid;
      const double offset = job.start > 0 && run.start > 0 ? job.start - run.start : 0;
      add_process(events, pid, suite, job);
      add_attempts(events, pid, offset, job);
      add_steps(events, pid, offset, job);
      add_instants(events, pid, offset, job);
      add_counters(events, pid, offset, job);
    }
  }
  std::string out = "{\"traceEvents\":[\n";
  for (size_t i = 0; i < events.size(); ++i) {
    out += events[i].dump(-1, ' ', false, json::error_handler_t::replace);
    out += i + 1 < events.size() ? ",\n" : "\n";
  }
  json other = {{"harness_version", run.environment.harness_version}, {"gpu_name", run.environment.gpu_name},
                {"simulated_device", run.environment.simulated_device}};
  out += "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" + other.dump(-1, ' ', false, json::error_handler_t::replace) +
         "}\n";
  return out;
}

}  // namespace oomh
