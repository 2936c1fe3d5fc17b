// Job output: the OOM detector, `observe:` regexes, the output tail and event-log ingestion.

#include "exec/output.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "oomharness/events.h"

namespace oomh::exec {

bool is_oom_message(std::string_view line) {
  static constexpr std::string_view kNeedles[] = {"out of memory", "outofmemoryerror", "cuda_error_out_of_memory",
                                                  "cudaerrormemoryallocation", "resource_exhausted"};
  std::string lowered(line);
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view needle : kNeedles)
    if (lowered.find(needle) != std::string::npos) return true;
  return false;
}

LineObserver::LineObserver(const std::vector<ObserveSpec>& specs) {
  for (const ObserveSpec& s : specs) rules_.push_back({s.key, std::regex(s.pattern, std::regex::ECMAScript)});
}

void LineObserver::match(std::string_view line, const char* stream, double t, int pid, std::vector<Event>& out) const {
  for (const Rule& r : rules_) {
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_search(line.begin(), line.end(), m, r.re)) continue;
    Event e;
    e.t = t;
    e.pid = pid;
    e.src = events::kSrcRunner;
    e.kind = events::kObserved;
    e.fields = {{"key", r.key},
                {"value", m.size() > 1 ? m[1].str() : m[0].str()},
                {"stream", stream},
                {"line", std::string(line)}};
    out.push_back(std::move(e));
  }
}

void OutputTail::add(std::string_view line) {
  if (max_ == 0) return;
  if (lines_.size() == max_) lines_.pop_front();
  lines_.emplace_back(line);
}

std::string OutputTail::text() const {
  std::string s;
  for (const std::string& l : lines_) {
    s += l;
    s += '\n';
  }
  return s;
}

std::vector<Event> read_event_log(const std::string& path, size_t* bad_lines) {
  // Streamed in 64 KiB chunks through the trace's reader (Note [Event log limits] in trace.h): a 512 MiB
  // line is skipped without being held, a deeply nested one is not parsed, and what was skipped comes
  // back as `warning` events.
  EventLogReader reader;
  if (FILE* f = std::fopen(path.c_str(), "re")) {
    char buf[64 * 1024];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) reader.feed(std::string_view(buf, n));
    reader.finish();
    std::fclose(f);
  }
  if (bad_lines) *bad_lines = reader.bad_lines();
  std::vector<Event> out = std::move(reader.events());
  for (Event& w : reader.warnings(path)) out.push_back(std::move(w));
  return out;
}

}  // namespace oomh::exec
