// The agent's plan and results as JSON (Note [Agent plan and results] in agent_plan.h).

#include "oomharness/runner/agent_plan.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace oomh {

using nlohmann::json;

namespace {

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

template <class T>
std::optional<T> get_opt(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<T>();
}

template <class T>
T get_or(const json& j, const char* key, T fallback) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return j.at(key).get<T>();
}

json location(const SourceLocation& w) { return {{"file", w.file}, {"line", w.line}, {"column", w.column}}; }
SourceLocation location_from(const json& j) {
  SourceLocation w;
  if (!j.is_object()) return w;
  w.file = get_or<std::string>(j, "file", "");
  w.line = get_or<int>(j, "line", 0);
  w.column = get_or<int>(j, "column", 0);
  return w;
}

const char* end_name(AttemptEnd e) {
  switch (e) {
    case AttemptEnd::exited: return "exited";
    case AttemptEnd::signalled: return "signalled";
    case AttemptEnd::timed_out: return "timed_out";
    case AttemptEnd::interrupted: return "interrupted";
    case AttemptEnd::failed_to_start: return "failed_to_start";
  }
  return "exited";
}

AttemptEnd end_from(const std::string& s) {
  if (s == "exited") return AttemptEnd::exited;
  if (s == "signalled") return AttemptEnd::signalled;
  if (s == "timed_out") return AttemptEnd::timed_out;
  if (s == "interrupted") return AttemptEnd::interrupted;
  if (s == "failed_to_start") return AttemptEnd::failed_to_start;
  throw std::runtime_error("unknown attempt end '" + s + "'");
}

json attempt_json(const Attempt& a) {
  json events = json::array();
  for (const Event& e : a.events) events.push_back(e);
  json samples = json::array();
  for (const MemorySample& s : a.samples)
    samples.push_back(json::array({s.t, s.device, s.held, s.peak, s.cap, s.step}));
  json shim = nullptr;
  if (a.shim)
    shim = {{"processes", a.shim->processes}, {"armed", a.shim->armed},         {"rejected", a.shim->rejected},
            {"ways_in", a.shim->ways_in},     {"driver_called", a.shim->driver_called}, {"allocations", a.shim->allocations}};
  json ranks = json::array();  // Note [Ranks] in trace.h
  for (const RankEnd& r : a.ranks)
    ranks.push_back({{"rank", r.rank}, {"start", r.start}, {"end", r.end}, {"end_kind", end_name(r.end_kind)},
                     {"exit_code", opt(r.exit_code)}, {"signal", opt(r.signal)}, {"ended_by_oom", r.ended_by_oom},
                     {"last_step", r.last_step}, {"log_path", r.log_path}, {"stacks", r.stacks}});
  return {{"index", a.index},           {"start", a.start},
          {"end", a.end},               {"end_kind", end_name(a.end_kind)},
          {"ranks", std::move(ranks)},
          {"exit_code", opt(a.exit_code)}, {"signal", opt(a.signal)},
          {"oom_message", a.oom_message}, {"faults_enabled", a.faults_enabled},
          {"events", std::move(events)}, {"samples", std::move(samples)},
          {"output_tail", a.output_tail}, {"log_path", a.log_path},
          {"shim", std::move(shim)}};
}

Attempt attempt_from(const json& j) {
  Attempt a;
  a.index = j.at("index").get<int>();
  a.start = j.at("start").get<double>();
  a.end = j.at("end").get<double>();
  a.end_kind = end_from(j.at("end_kind").get<std::string>());
  a.exit_code = get_opt<int>(j, "exit_code");
  a.signal = get_opt<int>(j, "signal");
  a.oom_message = get_or<bool>(j, "oom_message", false);
  a.faults_enabled = get_or<bool>(j, "faults_enabled", true);
  for (const json& e : j.at("events")) a.events.push_back(e.get<Event>());
  for (const json& s : j.at("samples")) {
    MemorySample m;
    m.t = s.at(0).get<double>();
    m.device = s.at(1).get<int>();
    m.held = s.at(2).get<uint64_t>();
    m.peak = s.at(3).get<uint64_t>();
    m.cap = s.at(4).get<uint64_t>();
    m.step = s.at(5).get<int64_t>();
    a.samples.push_back(m);
  }
  a.output_tail = get_or<std::string>(j, "output_tail", "");
  a.log_path = get_or<std::string>(j, "log_path", "");
  if (j.contains("ranks"))
    for (const json& r : j.at("ranks")) {
      RankEnd re;
      re.rank = r.at("rank").get<int>();
      re.start = r.at("start").get<double>();
      re.end = r.at("end").get<double>();
      re.end_kind = end_from(r.at("end_kind").get<std::string>());
      re.exit_code = get_opt<int>(r, "exit_code");
      re.signal = get_opt<int>(r, "signal");
      re.ended_by_oom = get_or<bool>(r, "ended_by_oom", false);
      re.last_step = get_or<int64_t>(r, "last_step", -1);
      re.log_path = get_or<std::string>(r, "log_path", "");
      re.stacks = get_or<std::string>(r, "stacks", "");
      a.ranks.push_back(std::move(re));
    }
  if (j.contains("shim") && j.at("shim").is_object()) {
    const json& s = j.at("shim");
    ShimRecord r;
    r.processes = s.at("processes").get<uint32_t>();
    r.armed = s.at("armed").get<uint32_t>();
    r.rejected = s.at("rejected").get<uint32_t>();
    r.ways_in = s.at("ways_in").get<uint32_t>();
    r.driver_called = s.at("driver_called").get<bool>();
    r.allocations = s.at("allocations").get<uint64_t>();
    a.shim = r;
  }
  return a;
}

json paths_json(const HarnessPaths& p) {
  return {{"inject_library", p.inject_library},         {"python_probe_dir", p.python_probe_dir},
          {"reserve_program", p.reserve_program},       {"driver_library_dir", p.driver_library_dir},
          {"virtual_driver_dir", p.virtual_driver_dir}};
}

HarnessPaths paths_from(const json& j) {
  HarnessPaths p;
  p.inject_library = get_or<std::string>(j, "inject_library", "");
  p.python_probe_dir = get_or<std::string>(j, "python_probe_dir", "");
  p.reserve_program = get_or<std::string>(j, "reserve_program", "");
  p.driver_library_dir = get_or<std::string>(j, "driver_library_dir", "");
  p.virtual_driver_dir = get_or<std::string>(j, "virtual_driver_dir", "");
  return p;
}

template <class F>
auto parsing(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("not a valid ") + what + ": " + e.what());
  }
}

void check_version(const json& j, const char* what) {
  int v = get_or<int>(j, "version", 0);
  if (v != kAgentFormatVersion)
    throw std::runtime_error(std::string(what) + " has format version " + std::to_string(v) + ", this oomharness reads " +
                             std::to_string(kAgentFormatVersion) + " (the nodes run another oomharness than the submitter?)");
}

}  // namespace

json to_json_value(const JobSpec& job) {
  json observe = json::array();
  for (const ObserveSpec& o : job.observe) observe.push_back({{"key", o.key}, {"pattern", o.pattern}, {"where", location(o.where)}});
  json schedule = json::array();
  for (const CapChange& c : job.memory.schedule)
    schedule.push_back({{"at_step", opt(c.at_step)}, {"at_seconds", opt(c.at_seconds)}, {"limit", c.limit}});
  json memory = {{"limit", opt(job.memory.limit)},
                 {"counts_footprint", job.memory.counts_footprint},
                 {"schedule", std::move(schedule)},
                 {"reserve", job.memory.reserve},
                 {"leave", opt(job.memory.leave)},
                 {"reserve_chunk", opt(job.memory.reserve_chunk)},
                 {"snapshot", job.memory.snapshot}};
  json faults = json::array();
  for (const FaultSpec& f : job.faults) faults.push_back({{"name", f.name}, {"rule", f.rule}, {"where", location(f.where)}});
  json expect = json::array();
  for (const ExpectSpec& e : job.expect)
    expect.push_back({{"policy", e.policy}, {"args", e.args}, {"where", location(e.where)}, {"must_fail", e.must_fail}});
  return {{"name", job.name},
          {"argv", job.argv},
          {"shell", job.shell},
          {"env", job.env},
          {"cwd", opt(job.cwd)},
          {"timeout", job.timeout},
          {"grace", job.grace},
          {"probe", probe_mode_name(job.probe)},
          {"device", device_choice_name(job.device)},
          {"observe", std::move(observe)},
          {"memory", std::move(memory)},
          {"faults", std::move(faults)},
          {"restart", {{"max", job.restart.max}, {"on", job.restart.on}, {"clear_faults", job.restart.clear_faults}}},
          {"expect", std::move(expect)},
          {"target_step", opt(job.target_step)},
          {"ranks", job.ranks},
          {"hang_stall", job.hang_stall},
          {"matrix", job.matrix},
          {"where", location(job.where)}};
}

JobSpec job_spec_from_json(const json& j) {
  return parsing("job", [&] {
    JobSpec job;
    job.name = j.at("name").get<std::string>();
    job.argv = j.at("argv").get<std::vector<std::string>>();
    job.shell = get_or<bool>(j, "shell", false);
    job.env = j.at("env").get<std::map<std::string, std::string>>();
    job.cwd = get_opt<std::string>(j, "cwd");
    job.timeout = j.at("timeout").get<double>();
    job.grace = j.at("grace").get<double>();
    job.probe = probe_mode_from_name(get_or<std::string>(j, "probe", "auto")).value_or(ProbeMode::auto_);
    auto device = device_choice_from_name(get_or<std::string>(j, "device", "auto"));
    if (!device) throw std::runtime_error("unknown device '" + j.at("device").get<std::string>() + "'");
    job.device = *device;
    for (const json& o : j.at("observe")) job.observe.push_back({o.at("key").get<std::string>(), o.at("pattern").get<std::string>(), location_from(o.at("where"))});
    const json& m = j.at("memory");
    job.memory.limit = get_opt<uint64_t>(m, "limit");
    job.memory.counts_footprint = get_or<bool>(m, "counts_footprint", false);
    for (const json& c : m.at("schedule")) {
      CapChange change;
      change.at_step = get_opt<int64_t>(c, "at_step");
      change.at_seconds = get_opt<double>(c, "at_seconds");
      change.limit = c.at("limit").get<uint64_t>();
      job.memory.schedule.push_back(change);
    }
    job.memory.reserve = get_or<uint64_t>(m, "reserve", 0);
    job.memory.leave = get_opt<uint64_t>(m, "leave");
    job.memory.reserve_chunk = get_opt<uint64_t>(m, "reserve_chunk");
    job.memory.snapshot = get_or<bool>(m, "snapshot", false);
    for (const json& f : j.at("faults")) job.faults.push_back({f.at("name").get<std::string>(), f.at("rule"), location_from(f.at("where"))});
    const json& r = j.at("restart");
    job.restart.max = r.at("max").get<int>();
    job.restart.on = r.at("on").get<std::vector<std::string>>();
    job.restart.clear_faults = r.at("clear_faults").get<bool>();
    for (const json& e : j.at("expect")) {
      ExpectSpec spec;
      spec.policy = e.at("policy").get<std::string>();
      spec.args = e.at("args");
      spec.where = location_from(e.at("where"));
      spec.must_fail = get_or<bool>(e, "must_fail", false);
      job.expect.push_back(std::move(spec));
    }
    job.target_step = get_opt<int64_t>(j, "target_step");
    job.ranks = get_or<int>(j, "ranks", 1);
    job.hang_stall = get_or<double>(j, "hang_stall", job.hang_stall);
    job.matrix = j.at("matrix").get<std::map<std::string, std::string>>();
    job.where = location_from(j.at("where"));
    return job;
  });
}

json to_json_value(const JobOutcome& o) {
  json attempts = json::array(), reference = json::array();
  for (const Attempt& a : o.trace.attempts) attempts.push_back(attempt_json(a));
  for (const Attempt& a : o.trace.reference) reference.push_back(attempt_json(a));
  return {{"version", kAgentFormatVersion},
          {"trace", {{"job", o.trace.job},
                     {"attempts", std::move(attempts)},
                     {"reference", std::move(reference)},
                     {"target_step", opt(o.trace.target_step)},
                     {"simulated_device", o.trace.simulated_device}}},
          {"gpu", opt(o.gpu)},
          {"interrupted", o.interrupted},
          {"error", o.error},
          {"start", o.start},
          {"end", o.end},
          {"argv", o.argv},
          {"work_dir", o.work_dir}};
}

JobOutcome job_outcome_from_json(const json& j) {
  check_version(j, "the agent's results");
  return parsing("job outcome", [&] {
    JobOutcome o;
    const json& t = j.at("trace");
    o.trace.job = t.at("job").get<std::string>();
    for (const json& a : t.at("attempts")) o.trace.attempts.push_back(attempt_from(a));
    for (const json& a : t.at("reference")) o.trace.reference.push_back(attempt_from(a));
    o.trace.target_step = get_opt<int64_t>(t, "target_step");
    o.trace.simulated_device = get_or<bool>(t, "simulated_device", false);
    o.gpu = get_opt<int>(j, "gpu");
    o.interrupted = get_or<bool>(j, "interrupted", false);
    o.error = get_or<std::string>(j, "error", "");
    o.start = j.at("start").get<double>();
    o.end = j.at("end").get<double>();
    o.argv = j.at("argv").get<std::vector<std::string>>();
    o.work_dir = get_or<std::string>(j, "work_dir", "");
    return o;
  });
}

json to_json_value(const AgentPlan& p) {
  return {{"version", kAgentFormatVersion},     {"job", to_json_value(p.job)},
          {"paths", paths_json(p.paths)},       {"jobs_dir", p.jobs_dir},
          {"results_path", p.results_path},     {"threads", opt(p.threads)},
          {"ld_preload", opt(p.ld_preload)}};
}

AgentPlan agent_plan_from_json(const json& j) {
  check_version(j, "the agent's plan");
  AgentPlan p;
  p.job = job_spec_from_json(j.at("job"));
  return parsing("agent plan", [&] {
    p.paths = paths_from(j.at("paths"));
    p.jobs_dir = j.at("jobs_dir").get<std::string>();
    p.results_path = j.at("results_path").get<std::string>();
    p.threads = get_opt<int>(j, "threads");
    p.ld_preload = get_opt<std::string>(j, "ld_preload");
    return p;
  });
}

std::optional<std::string> write_text_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wbe");
  if (!f) return "cannot write " + tmp + ": " + std::strerror(errno);
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  int e = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return "cannot write " + tmp + ": " + std::strerror(e);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    e = errno;
    std::remove(tmp.c_str());
    return "cannot rename " + tmp + " to " + path + ": " + std::strerror(e);
  }
  return std::nullopt;
}

}  // namespace oomh
