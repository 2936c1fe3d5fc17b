// The results file: writing it (--json) and reading it back (`oomharness report`, `oomharness compare`).

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "oomharness/reports/writers.h"
#include "result_json.h"

namespace oomh {

using nlohmann::json;

std::string render_json(const RunResult& run) {
  // Job output may hold invalid UTF-8; `replace` writes U+FFFD for it instead of throwing.
  return json(run).dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

// "line:column" of a byte offset (nlohmann counts bytes from 1).
std::string position(const std::string& text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace

Expected<RunResult> parse_results(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string message = detail::clean_json_error(e.what());
    if (message.rfind("parse error at line", 0) == 0) message.erase(0, message.find(": ") + 2);
    return Expected<RunResult>::failure(name + ":" + position(text, e.byte) + ": " + message);
  }
  if (!j.is_object())
    return Expected<RunResult>::failure(name + ": not an oomharness results file (expected a JSON object, found " +
                                        j.type_name() + ")");
  auto version = j.find("schema_version");
  if (version == j.end())
    return Expected<RunResult>::failure(name + ": not an oomharness results file (no schema_version)");
  if (!version->is_number_integer() || version->get<int64_t>() != kResultsSchemaVersion)
    return Expected<RunResult>::failure(name + ": schema_version " + version->dump() +
                                        " is not supported: this oomharness reads schema_version " +
                                        std::to_string(kResultsSchemaVersion) +
                                        " (use the oomharness that wrote the file, or run the suite again)");
  try {
    return Expected<RunResult>::success(j.get<RunResult>());
  } catch (const std::exception& e) {  // FieldError, or a json exception from a nested model
    return Expected<RunResult>::failure(name + ": " + detail::clean_json_error(e.what()));
  }
}

namespace {
constexpr const char* kStreamName = "oomharness jobs";

std::string one_json_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

// A job stream (Note [Results as they come]): one header line, job lines, maybe an end line. A last line
// cut by the kill is ignored; any other bad line is an error naming its line.
Expected<RunResult> parse_job_stream(const std::string& text, const std::string& name) {
  RunResult run;
  run.interrupted = true;
  std::istringstream in(text);
  std::string line;
  size_t number = 0;
  std::map<std::pair<std::string, std::string>, size_t> suite_index;
  while (std::getline(in, line)) {
    ++number;
    const bool last = in.peek() == std::char_traits<char>::eof();
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      if (last && !text.empty() && text.back() != '\n') break;  // the write the kill cut short
      return Expected<RunResult>::failure(name + ":" + std::to_string(number) + ": not a JSON object");
    }
    try {
      if (number == 1) {
        if (j.value("schema_version", 0) != kResultsSchemaVersion)
          return Expected<RunResult>::failure(name + ":1: schema_version " + j.value("schema_version", json()).dump() +
                                              " is not supported: this oomharness reads schema_version " +
                                              std::to_string(kResultsSchemaVersion));
        run.start = j.value("start", 0.0);
        run.environment.command_line = j.value("command_line", std::vector<std::string>{});
        run.environment.harness_version = j.value("harness_version", std::string());
      } else if (j.contains("end")) {
        run.interrupted = j.value("interrupted", false);
        run.duration = j.value("duration", 0.0);
      } else {
        SuiteResult suite;
        suite.name = j.at("suite").get<std::string>();
        suite.file = j.value("file", std::string());
        JobResult job = j.at("job").get<JobResult>();
        auto [it, fresh] = suite_index.try_emplace({suite.name, suite.file}, run.suites.size());
        if (fresh) run.suites.push_back(std::move(suite));
        SuiteResult& s = run.suites[it->second];
        if (s.start == 0 || (job.start > 0 && job.start < s.start)) s.start = job.start;
        s.duration = std::max(s.duration, job.start + job.duration - s.start);
        s.jobs.push_back(std::move(job));
      }
    } catch (const std::exception& e) {
      return Expected<RunResult>::failure(name + ":" + std::to_string(number) + ": " + detail::clean_json_error(e.what()));
    }
  }
  if (number == 0) return Expected<RunResult>::failure(name + ": empty");
  return Expected<RunResult>::success(std::move(run));
}

bool is_job_stream(const std::string& text) {
  const size_t end = text.find('\n');
  json j = json::parse(text.substr(0, end), nullptr, false);
  return j.is_object() && j.value("stream", std::string()) == kStreamName;
}
}  // namespace

std::string job_stream_header(const RunResult& run) {
  return one_json_line({{"stream", kStreamName}, {"schema_version", kResultsSchemaVersion}, {"start", run.start},
                        {"command_line", run.environment.command_line}, {"harness_version", run.environment.harness_version}});
}
std::string job_stream_line(const SuiteResult& suite, const JobResult& job) {
  return one_json_line({{"suite", suite.name}, {"file", suite.file}, {"job", job}});
}
std::string job_stream_end(const RunResult& run) {
  return one_json_line({{"end", true}, {"interrupted", run.interrupted}, {"duration", run.duration}});
}

Expected<RunResult> load_results(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Expected<RunResult>::failure(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Expected<RunResult>::failure(path + ": cannot read: " + std::strerror(errno));
  if (is_job_stream(text.str())) return parse_job_stream(text.str(), path);
  return parse_results(text.str(), path);
}

}  // namespace oomh
