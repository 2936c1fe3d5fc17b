// The results file: writing it (--json) and reading it back (`oomharness report`, `oomharness compare`).

#include <cerrno>
#include <cstring>
#include <fstream>
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

Expected<RunResult> load_results(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Expected<RunResult>::failure(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Expected<RunResult>::failure(path + ": cannot read: " + std::strerror(errno));
  return parse_results(text.str(), path);
}

}  // namespace oomh
