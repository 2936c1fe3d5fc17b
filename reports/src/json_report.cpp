// The results file: writing it (--json) and reading it back (`oomharness report`, `oomharness compare`).

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "oomharness/json_number.h"
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

// Note [Bounded results files] in writers.h: the schema's required fields, with the path of the first
// missing one ("suites[0].jobs[2]: no 'status'"), before any is read with a default.
std::optional<std::string> missing_required(const json& j, const std::string& at, std::initializer_list<const char*> keys) {
  if (!j.is_object()) return (at.empty() ? std::string("the file") : at) + ": expected an object, found " + j.type_name();
  for (const char* k : keys)
    if (!j.contains(k)) return (at.empty() ? std::string() : at + ": ") + "no '" + k + "' (a required field)";
  return std::nullopt;
}

std::optional<std::string> missing_in_job(const json& job, const std::string& at) {
  if (auto m = missing_required(job, at, {"name", "status"})) return m;
  for (const char* list : {"attempts", "verdicts"}) {
    auto it = job.find(list);
    if (it == job.end() || !it->is_array()) continue;
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = at + "." + list + "[" + std::to_string(i) + "]";
      auto m = std::string(list) == "attempts" ? missing_required((*it)[i], where, {"index", "outcome"})
                                               : missing_required((*it)[i], where, {"policy", "status", "reason"});
      if (m) return m;
    }
  }
  return std::nullopt;
}

std::optional<std::string> missing_in_results(const json& j) {
  if (auto m = missing_required(j, "", {"schema_version", "suites"})) return m;
  const json& suites = j.at("suites");
  if (!suites.is_array()) return std::string("suites: expected an array, found ") + suites.type_name();
  for (size_t s = 0; s < suites.size(); ++s) {
    const std::string at = "suites[" + std::to_string(s) + "]";
    if (auto m = missing_required(suites[s], at, {"name", "jobs"})) return m;
    const json& jobs = suites[s].at("jobs");
    if (!jobs.is_array()) continue;  // the typed reader names the wrong type
    for (size_t k = 0; k < jobs.size(); ++k)
      if (auto m = missing_in_job(jobs[k], at + ".jobs[" + std::to_string(k) + "]")) return m;
  }
  return std::nullopt;
}

}  // namespace

ReportExpected<RunResult> parse_results(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string message = detail::clean_json_error(e.what());
    if (message.rfind("parse error at line", 0) == 0) message.erase(0, message.find(": ") + 2);
    return ReportExpected<RunResult>::failure(name + ":" + position(text, e.byte) + ": " + message);
  } catch (const json::out_of_range& e) {
    // A number too large for a double ("1e99999"): the parser names the number, not its byte, so the
    // number's first occurrence is its place (found by fuzz_results: it once ended `report` as an internal error).
    std::string message = detail::clean_json_error(e.what());
    const size_t open = message.find('\''), close = message.rfind('\'');
    const size_t at = open < close ? text.find(message.substr(open + 1, close - open - 1)) : std::string::npos;
    return ReportExpected<RunResult>::failure(name + ":" + (at == std::string::npos ? std::string("1:1") : position(text, at + 1)) +
                                              ": " + message);
  }
  if (!j.is_object())
    return ReportExpected<RunResult>::failure(name + ": not an oomharness results file (expected a JSON object, found " +
                                        j.type_name() + ")");
  auto version = j.find("schema_version");
  if (version == j.end())
    return ReportExpected<RunResult>::failure(name + ": not an oomharness results file (no schema_version)");
  if (!version->is_number_integer() || version->get<int64_t>() != kResultsSchemaVersion)
    return ReportExpected<RunResult>::failure(name + ": schema_version " + version->dump() +
                                        " is not supported: this oomharness reads schema_version " +
                                        std::to_string(kResultsSchemaVersion) +
                                        " (use the oomharness that wrote the file, or run the suite again)");
  if (auto missing = missing_in_results(j))
    return ReportExpected<RunResult>::failure(name + ": not a complete oomharness results file: " + *missing);
  try {
    return ReportExpected<RunResult>::success(j.get<RunResult>());
  } catch (const std::exception& e) {  // FieldError, or a json exception from a nested model
    return ReportExpected<RunResult>::failure(name + ": " + detail::clean_json_error(e.what()));
  }
}

namespace {
constexpr const char* kStreamName = "oomharness jobs";

std::string one_json_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

// A job stream (Note [Results as they come]): one header line, job lines, maybe an end line. A last line
// cut by the kill is ignored; any other bad line is an error naming its line. Lines are fed one at a time,
// so that load_results streams a job stream from its file instead of holding its text whole.
class JobStreamReader {
 public:
  explicit JobStreamReader(std::string name) : name_(std::move(name)) { run_.interrupted = true; }

  // One line, without its newline. `unterminated`: the file ends in it with no newline (the write the kill
  // cut short may be there). False after an error (error() says it) or when the reading is over.
  bool line(const std::string& text, bool unterminated) {
    ++number_;
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      if (unterminated) return false;  // the write the kill cut short
      return fail(": not a JSON object");
    }
    try {
      if (number_ == 1) {
        if (!j.contains("schema_version") || whole_number<int>(j["schema_version"]) != kResultsSchemaVersion)
          return fail(": schema_version " + j.value("schema_version", json()).dump() +
                      " is not supported: this oomharness reads schema_version " + std::to_string(kResultsSchemaVersion));
        run_.start = j.value("start", 0.0);
        run_.environment.command_line = j.value("command_line", std::vector<std::string>{});
        run_.environment.harness_version = j.value("harness_version", std::string());
      } else if (j.contains("end")) {
        run_.interrupted = j.value("interrupted", false);
        run_.duration = j.value("duration", 0.0);
      } else {
        if (auto missing = missing_required(j, "", {"suite", "job"})) return fail(": " + *missing);
        if (auto missing = missing_in_job(j.at("job"), "job")) return fail(": " + *missing);
        SuiteResult suite;
        suite.name = j.at("suite").get<std::string>();
        suite.file = j.value("file", std::string());
        JobResult job = j.at("job").get<JobResult>();
        auto [it, fresh] = suite_index_.try_emplace({suite.name, suite.file}, run_.suites.size());
        if (fresh) run_.suites.push_back(std::move(suite));
        SuiteResult& s = run_.suites[it->second];
        if (s.start == 0 || (job.start > 0 && job.start < s.start)) s.start = job.start;
        s.duration = std::max(s.duration, job.start + job.duration - s.start);
        s.jobs.push_back(std::move(job));
      }
    } catch (const std::exception& e) {
      return fail(": " + detail::clean_json_error(e.what()));
    }
    return true;
  }

  ReportExpected<RunResult> finish() {
    if (!error_.empty()) return ReportExpected<RunResult>::failure(error_);
    if (number_ == 0) return ReportExpected<RunResult>::failure(name_ + ": empty");
    return ReportExpected<RunResult>::success(std::move(run_));
  }

 private:
  bool fail(const std::string& what) {
    error_ = name_ + ":" + std::to_string(number_) + what;
    return false;
  }
  std::string name_, error_;
  RunResult run_;
  size_t number_ = 0;
  std::map<std::pair<std::string, std::string>, size_t> suite_index_;
};

bool is_job_stream(const std::string& text) {
  const size_t end = text.find('\n');
  json j = json::parse(text.substr(0, end), nullptr, false);
  if (!j.is_object()) return false;
  const auto stream = j.find("stream");  // not j.value(): a "stream" that is not a string is not ours, not a throw
  return stream != j.end() && stream->is_string() && stream->get<std::string>() == kStreamName;
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

// Note [Bounded results files] in writers.h.
ReportExpected<RunResult> load_results(const std::string& path, uint64_t max_bytes) {
  auto fail = [&](const std::string& why) { return ReportExpected<RunResult>::failure(path + ": " + why); };
  // O_NONBLOCK: opening a FIFO with no writer must not wait for one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return fail(std::string("cannot read: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(std::string("cannot read: ") + std::strerror(errno));
  const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISREG(st.st_mode)  ? nullptr
                                            : "not a regular file";
  if (what) return fail(std::string("is ") + what + ", not a results file (give a results.json or a jobs.jsonl)");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto too_large = [&](uint64_t n) {
    return fail("is " + std::to_string(n) + " bytes, over the limit of " + std::to_string(max_bytes) +
                " bytes for a results file (raise it with --max-file-size)");
  };
  if (size > max_bytes) return too_large(size);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // A results file is one JSON document and is read whole; a job stream is read line by line.
  std::string text;
  std::optional<JobStreamReader> stream;
  uint64_t total = 0;
  size_t from = 0;  // where the next line of a stream starts in `text`
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    if (total > max_bytes) return too_large(total);  // it grew while being read
    text.append(buf, static_cast<size_t>(n));
    if (!stream && total == static_cast<uint64_t>(n) && is_job_stream(text)) stream.emplace(path);
    if (!stream) continue;
    for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1)
      if (!stream->line(text.substr(from, nl - from), false)) return stream->finish();
    text.erase(0, from);
    from = 0;
  }
  if (!stream) return parse_results(text, path);
  if (!text.empty()) stream->line(text, true);
  return stream->finish();
}

}  // namespace oomh
