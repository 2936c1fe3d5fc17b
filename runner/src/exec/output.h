#pragma once
// What the runner reads from a job's stdout and stderr: whole lines, matched against the suite's
// `observe:` regexes (each hit becomes an `observed` runner event) and against the out-of-memory detector
// (Attempt::oom_message), with the last lines kept for reports (Attempt::output_tail).
//
// Note [Job output]
// Each attempt's stdout and stderr are saved together to `<out>/<job>/attempt-<n>.log`, one complete
// line at a time in the order the runner read them, without prefixes: the file reads like the terminal
// would. Writing whole lines keeps a stdout line and a stderr line from splitting each other. A line
// longer than kMaxLine without a newline is cut there (progress bars that only use '\r').

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <regex>  // std::regex_error, which a bad pattern throws (job_runner_scheduling.cpp catches it)
#include <string>
#include <string_view>
#include <vector>

#include "oomharness/policies/trace.h"
#include "oomharness/runner/suite.h"

namespace re2 {
class RE2;
}

namespace oomh::exec {

inline constexpr size_t kMaxLine = 64 * 1024;

// Splits a byte stream into lines. A trailing '\r' is dropped from each line.
class LineSplitter {
 public:
  template <typename OnLine>
  void feed(const char* data, size_t n, OnLine&& on_line) {
    for (size_t i = 0; i < n; ++i) {
      char c = data[i];
      if (c == '\n') {
        emit(on_line);
        continue;
      }
      partial_.push_back(c);
      if (partial_.size() >= kMaxLine) emit(on_line);
    }
  }
  // The stream ended: a last line without its newline still counts.
  template <typename OnLine>
  void finish(OnLine&& on_line) {
    if (!partial_.empty()) emit(on_line);
  }

 private:
  template <typename OnLine>
  void emit(OnLine& on_line) {
    if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
    on_line(std::string_view(partial_));
    partial_.clear();
  }
  std::string partial_;
};

// The runner's out-of-memory detector: a line holding the words of a row of the OOM table or its loose
// words (oom::is_oom_message, Note [Which errors are OOMs] in oomharness/policies/oom_kinds.h),
// case-insensitive, by substring search (no regex per line).
bool is_oom_message(std::string_view line);

// How much of a line `observe:` patterns see: RE2 is linear, so this bounds the time per line.
inline constexpr size_t kMaxMatched = 64 * 1024;

// Note [Bounded observed values]
// A job may print a million lines that an `observe:` pattern matches (the runner once reached 3.7 GB on
// four million). Like the event log (Note [Event log limits] in trace.h), what is kept is bounded whatever
// the job prints: a value and its line are kept up to kMaxObservedText bytes each, and an attempt keeps
// the hits of at most kMaxObserved events' worth of lines; beyond, every other kept line is dropped and
// from then on only every 2nd (4th, ...) matching line is kept, so the record stays even over the whole
// run. The attempt gets a warning event that says how many were dropped.
inline constexpr size_t kMaxObservedText = 512;
inline constexpr size_t kMaxObserved = 20000;

class ObservedValues {
 public:
  explicit ObservedValues(size_t max = kMaxObserved) : max_(std::max<size_t>(max, 2)) {}
  // The hits of one line (LineObserver::match); `hits` is left empty.
  void add(std::vector<Event>& hits);
  std::vector<Event> take();
  uint64_t dropped() const { return dropped_; }
  uint64_t stride() const { return stride_; }

 private:
  size_t max_;
  std::vector<Event> events_;
  std::vector<uint64_t> line_of_;  // the matching line's number, per kept event
  uint64_t lines_ = 0, stride_ = 1, dropped_ = 0;
};

// The suite's `observe:` regexes, matched with RE2 (linear time, no recursion: std::regex crashed on a
// 30,000-character line and froze on `(x+x+)+y`). Each has one capture group; a line that matches gives
// {"key","value","stream","line"}.
class LineObserver {
 public:
  // Throws a std::regex_error for a bad pattern (the suite loader has already checked them with the
  // same engine and options); what() says what is wrong.
  explicit LineObserver(const std::vector<ObserveSpec>& specs);
  ~LineObserver();
  LineObserver(LineObserver&&) noexcept;
  LineObserver& operator=(LineObserver&&) noexcept;
  // Appends one `observed` event per matching regex to `out`.
  void match(std::string_view line, const char* stream, double t, int pid, std::vector<Event>& out) const;
  bool empty() const { return rules_.empty(); }

 private:
  struct Rule {
    std::string key;
    std::unique_ptr<re2::RE2> re;
  };
  std::vector<Rule> rules_;
};

// The last `max_lines` lines of output.
class OutputTail {
 public:
  explicit OutputTail(size_t max_lines = 60) : max_(max_lines) {}
  void add(std::string_view line);
  std::string text() const;

 private:
  size_t max_;
  std::deque<std::string> lines_;
};

// Reads an attempt's event log (JSON lines), streamed within the limits of Note [Event log limits]
// (policies/trace.h). Lines that are not valid events are skipped and counted in `bad_lines`; lines
// over 1 MiB or nested too deep, and inject events past the cap, are skipped and reported by `warning`
// events at the end of the result; a missing file gives no events (a job that never loaded the shim
// writes none).
// `thinned` gets what was folded from every line when the reader thinned the log (Note [Thinned event logs]).
// Note [Sealed event lines] in include/oomharness/event_seal.h: the lines of a log read with the attempt's key
// that parse as events but were not sealed with it (no seal, or a wrong one). None of them is in the events.
struct ForgedLines {
  uint64_t count = 0;
  std::string first;  // the first of them, described: "a `step` line (src probe, pid 42)"
};

std::vector<Event> read_event_log(const std::string& path, size_t* bad_lines = nullptr,
                                  std::optional<LogFold>* thinned = nullptr, const unsigned char* seal_key = nullptr,
                                  ForgedLines* forged = nullptr);

// The same from a descriptor the runner holds on the file it made (read from its start; `path` for messages):
// Note [An event log replaced] in job_runner_attempts.cpp. With `seal_key` set (the attempt's key), only
// lines sealed with it are events; the others are counted in `forged`.
std::vector<Event> read_event_log_at(int fd, const std::string& path, size_t* bad_lines = nullptr,
                                     std::optional<LogFold>* thinned = nullptr, const unsigned char* seal_key = nullptr,
                                     ForgedLines* forged = nullptr);

}  // namespace oomh::exec
