// Live progress and the summary table.

#include "oomharness/runner/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "oomharness/units.h"

namespace oomh {

namespace {

const char* kReset = "\033[0m";

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

std::string progress_line(const std::string& name, const JobProgress& p) {
  std::ostringstream s;
  const char* state = p.state == JobProgress::State::restarting ? "restarting" : p.state == JobProgress::State::waiting ? "waiting" : "running";
  s << state << "  " << name << "  attempt " << (p.attempt + 1);
  if (p.step >= 0) s << "  step " << p.step;
  s << "  " << format_bytes(p.held);
  if (p.cap) s << " / " << format_bytes(p.cap);
  s << "  " << p.faults << (p.faults == 1 ? " fault" : " faults");
  if (p.gpu) s << "  gpu " << *p.gpu;
  s << "  " << format_duration(p.elapsed);
  return s.str();
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
  if (style_.live) clear_live();
  out_ << line << "\n";
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
    return;
  }
  if (!job.started) {
    job.started = true;
    job.attempt = p.attempt;
    job.last = p;
    std::string line = "start  " + p.job + (p.gpu ? "  (gpu " + std::to_string(*p.gpu) + ")" : std::string());
    if (!style_.live) print_permanent(line);
  }
  if (job.started && p.attempt > job.attempt) {
    // The runner moved to a later attempt: the previous one ended (the trace will say how).
    std::string line = "       " + p.job + ": attempt " + std::to_string(job.attempt + 1) + " ended" +
                       (job.last.step >= 0 ? " after step " + std::to_string(job.last.step) : std::string()) +
                       ", attempt " + std::to_string(p.attempt + 1) + " starts";
    job.attempt = p.attempt;
    print_permanent(line);
  }
  job.last = p;
  redraw(false);
}

void ProgressView::on_job_done(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string name = index < names_.size() ? names_[index] : "job " + std::to_string(index);
  JobState& job = jobs_[name];
  job.done = true;
  std::string line = "done   " + name;
  if (job.started)
    line += "  (" + std::to_string(job.last.attempt + 1) + (job.last.attempt == 0 ? " attempt, " : " attempts, ") +
            format_duration(job.last.elapsed) + ")";
  print_permanent(line);
}

void ProgressView::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (style_.live) clear_live();
  out_.flush();
}

namespace {

std::string verdict_summary(const JobResult& job) {
  if (job.verdicts.empty()) return "-";
  int pass = 0, fail = 0, inconclusive = 0;
  for (const auto& v : job.verdicts) {
    if (v.status == VerdictStatus::pass) ++pass;
    else if (v.status == VerdictStatus::fail) ++fail;
    else ++inconclusive;
  }
  std::string s;
  auto add = [&](int n, const char* word) {
    if (!n) return;
    if (!s.empty()) s += ", ";
    s += std::to_string(n) + " " + word;
  };
  add(pass, "pass");
  add(fail, "fail");
  add(inconclusive, "inconclusive");
  return s;
}

std::string peak_text(const JobResult& job) {
  uint64_t peak = 0;
  for (const auto& [device, bytes] : job.peak) peak = std::max(peak, bytes);
  return job.peak.empty() ? "-" : format_bytes(peak);
}

}  // namespace

std::string summary_table(const RunResult& run, bool color) {
  struct Row { std::string job, status, verdicts, attempts, peak, time; JobStatus s; std::string message; };
  std::vector<Row> rows;
  for (const auto& suite : run.suites)
    for (const auto& job : suite.jobs)
      rows.push_back({suite.name + "::" + job.name, status_word(job.status),
                      verdict_summary(job), std::to_string(job.attempts.size()), peak_text(job),
                      format_duration(job.duration), job.status, job.message});
  const std::vector<std::string> head = {"job", "status", "verdicts", "attempts", "peak", "time"};
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (const auto& r : rows) {
    const std::string* cells[] = {&r.job, &r.status, &r.verdicts, &r.attempts, &r.peak, &r.time};
    for (size_t i = 0; i < head.size(); ++i) w[i] = std::max(w[i], cells[i]->size());
  }
  std::ostringstream out;
  for (size_t i = 0; i < head.size(); ++i) out << (i ? "  " : "") << (i + 1 < head.size() ? pad(head[i], w[i]) : head[i]);
  out << "\n";
  for (size_t i = 0; i < head.size(); ++i) out << (i ? "  " : "") << std::string(w[i], '-');
  out << "\n";
  for (const auto& r : rows) {
    out << pad(r.job, w[0]) << "  ";
    if (color) out << status_color(r.s) << pad(r.status, w[1]) << kReset;
    else out << pad(r.status, w[1]);
    out << "  " << pad(r.verdicts, w[2]) << "  " << pad(r.attempts, w[3]) << "  " << pad(r.peak, w[4]) << "  " << r.time << "\n";
    bool explain = r.s == JobStatus::failed || r.s == JobStatus::error || r.s == JobStatus::inconclusive ||
                   r.s == JobStatus::interrupted;
    if (explain && !r.message.empty()) out << "    -> " << r.message << "\n";
  }

  int passed = 0, failed = 0, errors = 0, skipped = 0, inconclusive = 0, interrupted = 0;
  for (const auto& r : rows) {
    switch (r.s) {
      case JobStatus::passed: ++passed; break;
      case JobStatus::failed: ++failed; break;
      case JobStatus::error: ++errors; break;
      case JobStatus::skipped: ++skipped; break;
      case JobStatus::inconclusive: ++inconclusive; break;
      case JobStatus::interrupted: ++interrupted; break;
    }
  }
  std::vector<std::string> parts;
  auto part = [&](int n, const char* word) { if (n) parts.push_back(std::to_string(n) + " " + word); };
  part(failed, "failed");
  part(errors, errors == 1 ? "error" : "errors");
  part(passed, "passed");
  part(inconclusive, "inconclusive");
  part(skipped, "skipped");
  part(interrupted, "interrupted");
  if (parts.empty()) parts.push_back("no jobs ran");
  std::string tail;
  for (size_t i = 0; i < parts.size(); ++i) tail += (i ? ", " : "") + parts[i];
  tail += " in " + format_duration(run.duration);
  if (run.interrupted) tail += " (interrupted)";
  const char* c = failed || errors ? "\033[31m" : interrupted || run.interrupted ? "\033[33m" : "\033[32m";
  out << "\n" << (color ? c : "") << "==== " << tail << " ====" << (color ? kReset : "") << "\n";
  return out.str();
}

}  // namespace oomh
