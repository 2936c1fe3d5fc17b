// Note [Run state] in run_state.h.

#include "app/run_state.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "oomharness/reports/writers.h"

namespace oomh::app {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFile = "lastfailed.json";
constexpr uint64_t kMaxBytes = 64ull << 20;

std::string state_path() { return (fs::path(run_state_dir()) / kFile).string(); }

// The whole file (every suite set's entry), or an error sentence.
nlohmann::json read_all(const std::string& path, std::string& problem) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return nlohmann::json::object();
  auto size = fs::file_size(path, ec);
  if (ec || size > kMaxBytes) {
    problem = "cannot read " + path + (ec ? ": " + ec.message() : ": larger than 64 MiB");
    return nlohmann::json::object();
  }
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sets") || !j["sets"].is_object()) {
    problem = path + " is not oomharness's run state (remove it: the next run writes a new one)";
    return nlohmann::json::object();
  }
  return j;
}

}  // namespace

std::string run_state_dir() {
  if (const char* dir = std::getenv("OOMH_CACHE_DIR"); dir && *dir) return dir;
  return ".oomharness-cache";
}

std::string suite_set_key(const std::vector<Suite>& suites) {
  std::vector<std::string> files;
  for (const Suite& s : suites) {
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(s.file, ec), ec);
    files.push_back(ec ? s.file : p.string());
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  std::string key;
  for (const auto& f : files) key += (key.empty() ? "" : "\n") + f;
  return key;
}

RunState load_run_state(const std::vector<Suite>& suites) {
  RunState state;
  state.path = state_path();
  state.key = suite_set_key(suites);
  nlohmann::json all = read_all(state.path, state.problem);
  if (!state.problem.empty() || !all.contains("sets") || !all["sets"].contains(state.key)) return state;
  const nlohmann::json& entry = all["sets"][state.key];
  if (!entry.is_object()) return state;
  state.found = true;
  for (const auto& [field, memory] : {std::pair{"failed", JobMemory::failed}, std::pair{"unrun", JobMemory::unrun}})
    if (entry.contains(field) && entry[field].is_array())
      for (const auto& name : entry[field])
        if (name.is_string()) state.jobs.emplace(name.get<std::string>(), memory);  // failed wins: read first
  return state;
}

std::optional<std::string> record_run_state(const std::vector<Suite>& suites, const RunResult& run) {
  RunState state = load_run_state(suites);
  for (const SuiteResult& s : run.suites)
    for (const JobResult& j : s.jobs) {
      const std::string name = s.name + "::" + j.name;
      switch (j.status) {
        case JobStatus::failed:
        case JobStatus::error: state.jobs[name] = JobMemory::failed; break;
        case JobStatus::passed:
        case JobStatus::inconclusive: state.jobs.erase(name); break;
        case JobStatus::interrupted:
          if (!state.jobs.count(name)) state.jobs[name] = JobMemory::unrun;
          break;
        case JobStatus::skipped:  // not started after -x/--maxfail: keeps what it had
          if (run.interrupted && !state.jobs.count(name)) state.jobs[name] = JobMemory::unrun;
          break;
      }
    }
  std::string problem;
  nlohmann::json all = read_all(state.path, problem);
  if (!problem.empty()) all = nlohmann::json::object();  // an unreadable file is replaced
  all["version"] = 1;
  if (!all.contains("sets")) all["sets"] = nlohmann::json::object();
  nlohmann::json entry = {{"failed", nlohmann::json::array()}, {"unrun", nlohmann::json::array()}};
  for (const auto& [name, memory] : state.jobs) entry[memory == JobMemory::failed ? "failed" : "unrun"].push_back(name);
  all["sets"][state.key] = entry;  // kept when empty: "nothing failed" is not "never ran"
  std::error_code ec;
  fs::create_directories(run_state_dir(), ec);
  if (ec) return "cannot create " + run_state_dir() + ": " + ec.message();
  // Like pytest's cache folder: a marker that tells tools it is a cache, and keeps it out of git.
  const fs::path ignore = fs::path(run_state_dir()) / ".gitignore";
  if (!fs::exists(ignore, ec)) std::ofstream(ignore) << "# made by oomharness: its run state (--lf)\n*\n";
  auto written = write_file_atomic(state.path, all.dump(1) + "\n");
  if (!written) return written.error();
  return std::nullopt;
}

}  // namespace oomh::app
