// Job output: the OOM detector, `observe:` regexes, the output tail and event-log ingestion.

#include "exec/output.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include <re2/re2.h>

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

namespace {
// A std::regex_error that says what RE2 said.
class BadPattern : public std::regex_error {
 public:
  explicit BadPattern(std::string message) : std::regex_error(std::regex_constants::error_complexity), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};
}  // namespace

LineObserver::LineObserver(const std::vector<ObserveSpec>& specs) {
  RE2::Options options;  // the suite loader checks patterns with the same options (suite/load.cpp)
  options.set_log_errors(false);
  for (const ObserveSpec& s : specs) {
    auto re = std::make_unique<RE2>(s.pattern, options);
    if (!re->ok()) throw BadPattern("'" + s.pattern + "': " + re->error());
    rules_.push_back({s.key, std::move(re)});
  }
}

LineObserver::~LineObserver() = default;
LineObserver::LineObserver(LineObserver&&) noexcept = default;
LineObserver& LineObserver::operator=(LineObserver&&) noexcept = default;

void LineObserver::match(std::string_view line, const char* stream, double t, int pid, std::vector<Event>& out) const {
  const re2::StringPiece text(line.data(), std::min(line.size(), kMaxMatched));
  for (const Rule& r : rules_) {
    // Group 1 when the pattern has one (the loader insists on exactly one), else the whole match.
    const int groups = std::min(r.re->NumberOfCapturingGroups(), 1);
    re2::StringPiece m[2];
    if (!r.re->Match(text, 0, text.size(), RE2::UNANCHORED, m, groups + 1)) continue;
    Event e;
    e.t = t;
    e.pid = pid;
    e.src = events::kSrcRunner;
    e.kind = events::kObserved;
    e.fields = {{"key", r.key},
                {"value", std::string(m[groups].data() ? m[groups].data() : "", m[groups].size())},
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

std::vector<Event> read_event_log(const std::string& path, size_t* bad_lines, std::optional<LogFold>* thinned) {
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
  if (thinned) *thinned = reader.thinned() ? std::optional<LogFold>(reader.fold()) : std::nullopt;
  std::vector<Event> out = std::move(reader.events());
  for (Event& w : reader.warnings(path)) out.push_back(std::move(w));
  return out;
}

}  // namespace oomh::exec
