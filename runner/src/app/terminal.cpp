// Live progress and the summary table.

#include "oomharness/runner/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <sstream>

#include "oomharness/reports/explain.h"
#include "oomharness/reports/terminal_text.h"
#include "oomharness/units.h"

namespace oomh {

namespace {

const char* kReset = "\033[0m";

const char* kGreen = "\033[32m";
const char* kRed = "\033[31m";
const char* kYellow = "\033[33m";

const char* status_color(JobStatus s) {
  switch (s) {
    case JobStatus::passed: return "\033[32m";
    case JobStatus::failed:
    case JobStatus::error: return "\033[31m";
    case JobStatus::skipped:
    case JobStatus::inconclusive:
    case JobStatus::interrupted: return "\033[33m";
  }
  return "";
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// Cuts `s` to `width` printable columns (our lines are ASCII but for the arrows: count bytes, a little
// conservatively).
std::string cut(const std::string& s, int width) {
  if (width <= 4 || static_cast<int>(s.size()) <= width) return s;
  return s.substr(0, static_cast<size_t>(width - 3)) + "...";
}

}  // namespace

TerminalStyle detect_terminal_style() {
  TerminalStyle style;
  bool tty = isatty(STDOUT_FILENO) == 1;
  const char* ci = std::getenv("CI");
  const char* no_color = std::getenv("NO_COLOR");
  style.live = tty && !(ci && *ci);
  style.color = tty && !(no_color && *no_color);
  winsize ws{};
  if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) style.width = ws.ws_col;
  if (const char* beat = std::getenv("OOMH_HEARTBEAT"); beat && *beat) {
    char* end = nullptr;
    double s = std::strtod(beat, &end);
    if (end && *end == '\0' && s >= 0 && s <= 86400) style.heartbeat = s;
  }
  return style;
}

const char* status_word(JobStatus status) {
  switch (status) {
    case JobStatus::passed: return "PASSED";
    case JobStatus::failed: return "FAILED";
    case JobStatus::error: return "ERROR";
    case JobStatus::skipped: return "SKIPPED";
    case JobStatus::inconclusive: return "INCONCLUSIVE";
    case JobStatus::interrupted: return "INTERRUPTED";
  }
  return "ERROR";
}

const char* status_word(const JobResult& job) {
  if (job.expected_failure()) return "XFAIL";
  if (job.unexpected_pass()) return "XPASS";
  return status_word(job.status);
}

std::string progress_line(const std::string& name, const JobProgress& p) {
  std::ostringstream s;
  const char* state = p.state == JobProgress::State::restarting ? "restarting" : p.state == JobProgress::State::waiting ? "waiting" : "running";
  s << state << "  " << terminal_text(name) << "  ";
  if (p.reference) s << "reference run";
  else s << attempt_name(p.attempt);
  if (p.step >= 0) s << "  step " << p.step;
  s << "  " << format_bytes(p.held);
  if (p.cap) s << " / " << format_bytes(p.cap);
  s << "  " << p.faults << (p.faults == 1 ? " fault" : " faults");
  if (p.gpu) s << "  gpu " << *p.gpu;
  s << "  " << format_duration(p.elapsed);
  return s.str();
}

std::string heartbeat_line(const std::string& clock, size_t done, size_t total,
                           const std::vector<std::pair<std::string, JobProgress>>& running) {
  std::ostringstream s;
  s << "[" << clock << "] " << done << "/" << total << " done";
  if (!running.empty()) {
    s << ", running: ";
    for (size_t i = 0; i < running.size(); ++i) {
      const JobProgress& p = running[i].second;
      s << (i ? ", " : "") << terminal_text(running[i].first) << " (" << format_duration(p.elapsed);
      if (p.step >= 0) s << ", step " << p.step;
      s << ")";
    }
  }
  return s.str();
}

namespace {
std::string escape_annotation(const std::string& text, bool property) {
  std::string out;
  for (char c : text) {
    if (c == '%') out += "%25";
    else if (c == '\r') out += "%0D";
    else if (c == '\n') out += "%0A";
    else if (property && c == ':') out += "%3A";
    else if (property && c == ',') out += "%2C";
    else out += c;
  }
  return out;
}
}  // namespace

std::string github_error_annotation(const std::string& file, int line, const std::string& title,
                                    const std::string& message) {
  std::string props;
  if (!file.empty()) {
    props = "file=" + escape_annotation(file, true);
    if (line > 0) props += ",line=" + std::to_string(line);
  }
  if (!title.empty()) props += std::string(props.empty() ? "" : ",") + "title=" + escape_annotation(title, true);
  return "::error" + (props.empty() ? std::string() : " " + props) + "::" + escape_annotation(message, false);
}

ProgressView::ProgressView(std::ostream& out, TerminalStyle style, std::vector<std::string> names)
    : out_(out), style_(style), names_(std::move(names)) {}

ProgressView::~ProgressView() { finish(); }

size_t ProgressView::index_of(const std::string& runner_name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == runner_name) return i;
  return names_.size();
}

void ProgressView::clear_live() {
  if (drawn_ > 0) out_ << "\033[" << drawn_ << "F\033[J";
  drawn_ = 0;
}

void ProgressView::print_permanent(const std::string& line) {
  if (style_.verbosity < 0) return;  // -q: only the live lines and the summary
  print_line(line);
}

void ProgressView::print_line(const std::string& line) {
  if (style_.live) clear_live();
  out_ << terminal_text(line) << "\n";  // the start/done lines name jobs (Note [Text for a terminal])
  if (style_.live) redraw(true);
  out_.flush();
}

void ProgressView::redraw(bool force) {
  if (!style_.live) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::ostringstream frame;
  if (drawn_ > 0) frame << "\033[" << drawn_ << "F";
  int lines = 0;
  for (const auto& [name, job] : jobs_) {
    if (!job.started || job.done) continue;
    frame << "\033[2K" << cut(progress_line(name, job.last), style_.width - 1) << "\n";
    ++lines;
  }
  frame << "\033[J";
  drawn_ = lines;
  out_ << frame.str();
  out_.flush();
}

void ProgressView::on_progress(const JobProgress& p) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobState& job = jobs_[p.job];
  if (job.done) return;
  if (p.state == JobProgress::State::done || p.state == JobProgress::State::waiting) {
    // Outside an attempt the runner counts attempts instead of naming one: keep the last attempt's view.
    if (job.started) job.last.elapsed = p.elapsed;
    if (p.state == JobProgress::State::done) job.attempts = p.attempt;
    return;
  }
  if (!job.started) {
    job.started = true;
    job.attempt = p.attempt;
    job.last = p;
    std::string line = "start  " + p.job + (p.gpu ? "  (gpu " + std::to_string(*p.gpu) + ")" : std::string());
    if (!style_.live) print_permanent(line);
  }
  const bool next_attempt = !p.reference && p.attempt > job.attempt;
  const bool reference_starts = p.reference && !job.reference;
  if (next_attempt || reference_starts) {
    // The runner moved to a later attempt, or to the reference run: the attempt before ended. The step it
    // reached is the last one it completed by the results' rule (JobProgress::last_step), not the last
    // sample of the control block, which is up to 50 ms old and names a step begun, not finished.
    std::string line = "       " + p.job + ": " + attempt_name(job.attempt) + " ended" +
                       (p.last_step >= 0 ? " after step " + std::to_string(p.last_step) : std::string()) + ", " +
                       (reference_starts ? std::string("the reference run (no faults) starts") : attempt_name(p.attempt) + " starts");
    if (next_attempt) job.attempt = p.attempt;
    job.reference = job.reference || p.reference;
    print_permanent(line);
  }
  job.last = p;
  redraw(false);
  heartbeat_if_due();
}

void ProgressView::heartbeat_if_due() {
  if (style_.live || style_.heartbeat <= 0) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_heartbeat_ < std::chrono::duration<double>(style_.heartbeat)) return;
  last_heartbeat_ = now;
  std::vector<std::pair<std::string, JobProgress>> running;
  size_t done = 0;
  for (const auto& [name, job] : jobs_) {
    if (job.done) ++done;
    else if (job.started) running.emplace_back(name, job.last);
  }
  char clock[16] = "";
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  if (localtime_r(&t, &tm)) std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  // Even under -q: the heartbeat is what keeps a quiet log alive.
  out_ << heartbeat_line(clock, done, names_.size(), running) << "\n";
  out_.flush();
}

void ProgressView::on_job_done(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string name = index < names_.size() ? names_[index] : "job " + std::to_string(index);
  JobState& job = jobs_[name];
  job.done = true;
  std::string line = "done   " + name;
  if (job.started) {
    // As many attempts as results.json lists; the reference run is not one of them.
    const int attempts = std::max(job.attempts, job.attempt + 1);
    line += "  (" + std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts") +
            (job.reference ? " + reference run" : "") + ", " + format_duration(job.last.elapsed) + ")";
  }
  print_permanent(line);
}

void ProgressView::say(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  print_line(line);
}

void ProgressView::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (style_.live) clear_live();
  out_.flush();
}

namespace {

std::string verdict_summary(const JobResult& job) {
  if (job.verdicts.empty()) return "-";
  int pass = 0, fail = 0, xfail = 0, xpass = 0, inconclusive = 0;
  for (const auto& v : job.verdicts) {
    if (v.status == VerdictStatus::inconclusive) ++inconclusive;
    else if (v.must_fail) ++(v.status == VerdictStatus::fail ? xfail : xpass);  // Note [Expected failures]
    else if (v.status == VerdictStatus::pass) ++pass;
    else ++fail;
  }
  std::string s;
  auto add = [&](int n, const char* word) {
    if (!n) return;
    if (!s.empty()) s += ", ";
    s += std::to_string(n) + " " + word;
  };
  add(pass, "pass");
  add(fail, "fail");
  add(xfail, "xfail");
  add(xpass, "xpass");
  add(inconclusive, "inconclusive");
  return s;
}

std::string peak_text(const JobResult& job) {
  uint64_t peak = 0;
  for (const auto& [device, bytes] : job.peak) peak = std::max(peak, bytes);
  return job.peak.empty() ? "-" : format_bytes(peak);
}

// "step 5", "steps 3-9": a line that names a step by its number (not "per step").
bool names_a_step(const std::string& line) {
  for (size_t at = line.find("step"); at != std::string::npos; at = line.find("step", at + 4)) {
    size_t i = at + 4;
    if (i < line.size() && line[i] == 's') ++i;
    if (i + 1 < line.size() && line[i] == ' ' && std::isdigit(static_cast<unsigned char>(line[i + 1]))) return true;
  }
  return false;
}

// The lines printed under a job in the summary: why it failed, erred, was inconclusive or skipped (its message),
// which check failed as expected (XFAIL), and for a failed or erred job the end of its last attempt's
// output, so that a CI log shows why without opening a report.
std::vector<std::string> explanation(const JobResult& job, int verbosity) {
  std::vector<std::string> lines;
  if (verbosity > 0) {  // -v: every verdict's sentence, passed ones too
    for (const auto& v : job.verdicts)
      lines.push_back("    " + v.policy + ": " + to_string(v.status) + (v.must_fail ? " (must_fail)" : "") + ": " + v.reason);
  }
  const JobStatus s = job.status;
  const bool explain = s == JobStatus::failed || s == JobStatus::error || s == JobStatus::inconclusive ||
                       s == JobStatus::interrupted || s == JobStatus::skipped;
  if (explain && !job.message.empty()) lines.push_back("    -> " + job.message);
  if (job.expected_failure()) lines.push_back("    -> expected failure: " + expected_failure_sentence(job));
  // Warnings under every job, passed ones too (-q shows only the jobs that need a look): at most three
  // unless -v; the reports carry them all.
  const size_t shown = verbosity > 0 ? job.warnings.size() : std::min<size_t>(job.warnings.size(), 3);
  for (size_t i = 0; i < shown; ++i) lines.push_back("    warning: " + job.warnings[i]);
  if (shown < job.warnings.size())
    lines.push_back("    (" + std::to_string(job.warnings.size() - shown) + " more warning(s) in the reports; -v shows them)");
  for (const std::string& f : finding_lines(job)) lines.push_back("    -> " + f);  // docs/diagnosis.md
  if (job.cap_use && verbosity >= 0) lines.push_back("    " + *job.cap_use);  // Note [The cap, visible]
  // Note [Step numbering]: lines that name a step say, once, which numbering they are in.
  if (std::any_of(lines.begin(), lines.end(), names_a_step)) lines.push_back("    (" + step_numbering(job.step_base) + ")");
  const bool show_output = (s == JobStatus::failed && !job.unexpected_pass()) || s == JobStatus::error;
  if (show_output && !job.attempts.empty()) {
    const AttemptResult& last = job.attempts.back();
    const std::string excerpt = output_excerpt(last, kOutputLines);
    if (!excerpt.empty() && excerpt != job.message) {  // a job that never started has the message as output
      lines.push_back("    output of " + attempt_name(last.index) + " (" + outcome_name(last.outcome) + "), last lines:");
      std::istringstream in(excerpt);
      for (std::string line; std::getline(in, line);) lines.push_back("    | " + line);
    }
  }
  // Messages, warnings and output come from the job and the results file: Note [Text for a terminal].
  for (std::string& line : lines) line = terminal_text(line);
  return lines;
}

}  // namespace

std::string summary_table(const RunResult& run, bool color, int verbosity) {
  struct Row { std::string job, status, verdicts, attempts, peak, time; const JobResult* result; };
  std::vector<Row> rows;
  for (const auto& suite : run.suites)
    for (const auto& job : suite.jobs) {
      // -q: the jobs that need a look; the closing line counts the rest.
      const bool fine = job.status == JobStatus::passed || job.status == JobStatus::skipped;
      if (verbosity < 0 && fine && !job.unexpected_pass()) continue;
      rows.push_back({terminal_text(suite.name + "::" + job.name), status_word(job), verdict_summary(job),
                      std::to_string(job.attempts.size()), peak_text(job), format_duration(job.duration), &job});
    }
  const std::vector<std::string> head = {"job", "status", "verdicts", "attempts", "peak", "time"};
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (const auto& r : rows) {
    const std::string* cells[] = {&r.job, &r.status, &r.verdicts, &r.attempts, &r.peak, &r.time};
    for (size_t i = 0; i < head.size(); ++i) w[i] = std::max(w[i], cells[i]->size());
  }
  std::ostringstream out;
  if (!rows.empty() || verbosity >= 0) {
    for (size_t i = 0; i < head.size(); ++i) out << (i ? "  " : "") << (i + 1 < head.size() ? pad(head[i], w[i]) : head[i]);
    out << "\n";
    for (size_t i = 0; i < head.size(); ++i) out << (i ? "  " : "") << std::string(w[i], '-');
    out << "\n";
  }
  for (const auto& r : rows) {
    out << pad(r.job, w[0]) << "  ";
    if (color) out << status_color(r.result->status) << pad(r.status, w[1]) << kReset;
    else out << pad(r.status, w[1]);
    out << "  " << pad(r.verdicts, w[2]) << "  " << pad(r.attempts, w[3]) << "  " << pad(r.peak, w[4]) << "  " << r.time << "\n";
    for (const std::string& line : explanation(*r.result, verbosity)) out << line << "\n";
  }

  // Note [Saying what was simulated]: what stood in for the GPU, and where it differed from one.
  std::string diverged;
  for (const auto& suite : run.suites)
    for (const auto& job : suite.jobs)
      if (!job.divergences.empty()) {
        diverged += (diverged.empty() ? "" : "; ") + terminal_text(suite.name + "::" + job.name) + " (";
        std::string kinds;
        for (const auto& [kind, detail] : job.divergences) kinds += (kinds.empty() ? "" : ", ") + terminal_text(kind);
        diverged += kinds + ")";
      }
  const std::vector<std::string> notes = simulation_notes(run);
  if (!notes.empty()) out << "\n";
  for (const std::string& note : notes) out << note << "\n";
  if (!diverged.empty()) out << "Where the virtual device differed from a GPU (details in the reports): " << diverged << "\n";

  // The closing line is green only for a run that tested something and saw no failure.
  const RunResult::Counts c = run.counts();
  std::string tail = counts_sentence(run) + " in " + format_duration(run.duration);
  if (run.interrupted) tail += " (interrupted)";
  const char* tone = c.failed || c.errors                                        ? kRed
                     : c.interrupted || run.interrupted || run.nothing_tested() ? kYellow
                                                                                : kGreen;
  out << "\n" << (color ? tone : "") << "==== " << tail << " ====" << (color ? kReset : "") << "\n";
  return out.str();
}

}  // namespace oomh
