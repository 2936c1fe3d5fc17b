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

void check_version(const json& j, const char* what) {
  int v = j.is_object() && j.contains("version") && j["version"].is_number_integer() ? j["version"].get<int>() : 0;
  if (v != kAgentFormatVersion)
    throw std::runtime_error(std::string(what) + " has format version " + std::to_string(v) + ", this oomharness reads " +
                             std::to_string(kAgentFormatVersion) + " (the nodes run another oomharness than the submitter?)");
}

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

json to_json_value(const JobOutcome& o) {
  json j = o;
  j["version"] = kAgentFormatVersion;
  return j;
}

JobOutcome job_outcome_from_json(const json& j) {
  check_version(j, "the agent's results");
  json body = j;
  body.erase("version");
  return model_from_json<JobOutcome>(body, "job outcome");
}

json to_json_value(const AgentPlan& p) {
  return {{"version", kAgentFormatVersion}, {"job", p.job},
          {"paths", p.paths},               {"jobs_dir", p.jobs_dir},
          {"results_path", p.results_path}, {"threads", opt(p.threads)},
          {"ld_preload", opt(p.ld_preload)}, {"agent", p.agent}};
}

AgentPlan agent_plan_from_json(const json& j) {
  check_version(j, "the agent's plan");
  static_assert(field_count<AgentPlan>() == 7, "AgentPlan changed: carry the field in to_json_value and here");
  AgentPlan p;
  try {
    p.job = model_from_json<JobSpec>(j.at("job"), "job");
    p.paths = model_from_json<HarnessPaths>(j.at("paths"), "harness paths");
    p.jobs_dir = j.at("jobs_dir").get<std::string>();
    p.results_path = j.at("results_path").get<std::string>();
    if (!j.at("threads").is_null()) p.threads = j.at("threads").get<int>();
    if (!j.at("ld_preload").is_null()) p.ld_preload = j.at("ld_preload").get<std::string>();
    p.agent = j.at("agent").get<std::string>();
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("not a valid agent plan: ") + e.what());
  }
  return p;
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
