// Job output: the OOM detector, `observe:` regexes, the output tail and event-log ingestion.

#include "exec/output.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <re2/re2.h>

#include "oomharness/event_seal.h"
#include "oomharness/events.h"
#include "oomharness/policies/oom_kinds.h"

namespace oomh::exec {

bool is_oom_message(std::string_view line) { return oom::is_oom_message(line); }

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
    // Note [Bounded observed values] in output.h: the value and the line are kept up to a size.
    e.fields = {{"key", r.key},
                {"value", std::string(m[groups].data() ? m[groups].data() : "", std::min(m[groups].size(), kMaxObservedText))},
                {"stream", stream},
                {"line", std::string(line.substr(0, kMaxObservedText))}};
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

void ObservedValues::add(std::vector<Event>& hits) {
  if (hits.empty()) return;
  const uint64_t seq = lines_++;
  if (seq % stride_ != 0) {
    dropped_ += hits.size();
    hits.clear();
    return;
  }
  for (Event& e : hits) {
    events_.push_back(std::move(e));
    line_of_.push_back(seq);
  }
  hits.clear();
  if (events_.size() < max_) return;
  // Every other kept line goes (a line's hits stay together: observed_steps groups them by line).
  stride_ *= 2;
  size_t kept = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    if (line_of_[i] % stride_ != 0) {
      ++dropped_;
      continue;
    }
    events_[kept] = std::move(events_[i]);
    line_of_[kept] = line_of_[i];
    ++kept;
  }
  events_.resize(kept);
  line_of_.resize(kept);
}

std::vector<Event> ObservedValues::take() {
  std::vector<Event> out = std::move(events_);
  events_.clear();
  line_of_.clear();
  return out;
}

std::vector<Event> read_event_log(const std::string& path, size_t* bad_lines, std::optional<LogFold>* thinned,
                                  const unsigned char* seal_key, ForgedLines* forged) {
  // Streamed in 64 KiB chunks through the trace's reader (Note [Event log limits] in trace.h): a 512 MiB
  // line is skipped without being held, a deeply nested one is not parsed, and what was skipped comes
  // back as `warning` events. The job writes this file and may have put something else in its place: a
  // link is not followed, and only a regular file is read, up to the size it had when opened (a FIFO would
  // block the runner, /dev/zero would never end).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  std::vector<Event> out = read_event_log_at(fd, path, bad_lines, thinned, seal_key, forged);
  if (fd >= 0) ::close(fd);
  return out;
}

namespace {

// Note [Sealed event lines]: stands between the file and the trace's reader, line by line. A sealed line
// goes on without its seal; a line that parses as an event without the attempt's seal is counted and goes
// nowhere; anything else (a line that is no event, one too long to hold) goes on as it is, for the reader to
// count and skip as before.
class SealFilter {
 public:
  SealFilter(EventLogReader& reader, const unsigned char* key, ForgedLines* forged)
      : reader_(reader), key_(key), forged_(forged) {}

  void feed(std::string_view chunk) {
    while (!chunk.empty()) {
      const size_t nl = chunk.find('\n');
      const std::string_view piece = chunk.substr(0, nl);
      if (passing_) {
        reader_.feed(nl == std::string_view::npos ? piece : chunk.substr(0, nl + 1));
      } else if (line_.size() + piece.size() > kMaxEventLineBytes) {
        // Longer than any line the harness writes and than the reader holds: the reader skips it and says so.
        reader_.feed(line_);
        reader_.feed(nl == std::string_view::npos ? piece : chunk.substr(0, nl + 1));
        std::string().swap(line_);
        passing_ = true;
      } else {
        line_.append(piece);
        if (nl != std::string_view::npos) take(true);
      }
      if (nl == std::string_view::npos) return;
      passing_ = false;
      chunk.remove_prefix(nl + 1);
    }
  }
  void finish() {
    if (!passing_ && !line_.empty()) take(false);
    reader_.finish();
  }

 private:
  void take(bool newline) {
    text_.resize(line_.size());
    size_t size = 0;
    const events::SealCheck c = events::check_seal(key_, line_, text_.data(), &size);
    if (c == events::SealCheck::sealed) {
      text_.resize(size);
      if (newline) text_.push_back('\n');
      reader_.feed(text_);
    } else if (std::optional<Event> e = parse_event_line(line_); e || c == events::SealCheck::wrong) {
      if (forged_ && forged_->count++ == 0)
        forged_->first = e ? "a `" + e->kind + "` line (src " + e->src + ", pid " + std::to_string(e->pid) + ")"
                           : "a line with a wrong seal";
    } else {
      if (newline) line_.push_back('\n');
      reader_.feed(line_);  // not an event: the reader counts it as a bad line
    }
    line_.clear();
  }

  EventLogReader& reader_;
  const unsigned char* key_;
  ForgedLines* forged_;
  std::string line_, text_;
  bool passing_ = false;  // inside a line too long to hold
};

}  // namespace

std::vector<Event> read_event_log_at(int fd, const std::string& path, size_t* bad_lines, std::optional<LogFold>* thinned,
                                     const unsigned char* seal_key, ForgedLines* forged) {
  EventLogReader reader;
  std::optional<SealFilter> filter;
  if (events::seal_key_set(seal_key)) filter.emplace(reader, seal_key, forged);
  struct stat st {};
  if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char buf[64 * 1024];
    uint64_t left = static_cast<uint64_t>(st.st_size);
    off_t at = 0;
    ssize_t n;
    while (left > 0 && (n = ::pread(fd, buf, static_cast<size_t>(std::min<uint64_t>(sizeof buf, left)), at)) > 0) {
      if (filter) filter->feed(std::string_view(buf, static_cast<size_t>(n)));
      else reader.feed(std::string_view(buf, static_cast<size_t>(n)));
      left -= static_cast<uint64_t>(n);
      at += n;
    }
    if (filter) filter->finish();
    else reader.finish();
  }
  if (bad_lines) *bad_lines = reader.bad_lines();
  if (thinned) *thinned = reader.thinned() ? std::optional<LogFold>(reader.fold()) : std::nullopt;
  std::vector<Event> out = std::move(reader.events());
  for (Event& w : reader.warnings(path)) out.push_back(std::move(w));
  return out;
}

}  // namespace oomh::exec
