// The Markdown summary, for $GITHUB_STEP_SUMMARY and PR comments (GitHub-flavoured Markdown).
//
// Note [Markdown size]
// GitHub refuses a step summary over 1 MiB and a comment over 65536 characters, so the summary is kept
// under max_bytes: when the whole run does not fit, jobs that did not pass are kept first (they are what
// the reader came for), then as many passing ones as fit, and a line says "(truncated: N more jobs)".
// Which jobs fit is found by bisection on the number of jobs rendered.

#include <algorithm>
#include <sstream>

#include "oomharness/reports/explain.h"
#include "oomharness/reports/writers.h"
#include "oomharness/units.h"
#include "text.h"

namespace oomh {

namespace {

// Text in a table cell: one line, no pipes, no HTML, no inline code spans or emphasis that the text
// did not mean.
std::string cell(const std::string& s) {
  const std::string clean = text::sanitize_text(s);
  std::string out;
  for (char c : clean) {
    switch (c) {
      case '\n': case '\t': out += ' '; break;
      case '|': out += "\\|"; break;
      case '`': out += "\\`"; break;
      case '*': out += "\\*"; break;
      case '_': out += "\\_"; break;
      case '[': out += "\\["; break;
      case ']': out += "\\]"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      default: out += c;
    }
  }
  return out;
}

// Text inside an HTML element (the <summary> line): Markdown does not apply there, HTML escaping does.
std::string inline_html(const std::string& s) {
  std::string out = text::xml_escape(s);
  std::replace(out.begin(), out.end(), '\n', ' ');
  std::replace(out.begin(), out.end(), '\t', ' ');
  return out;
}

// A fenced block that its content cannot close: the fence is longer than any backtick run inside.
std::string fenced(const std::string& content) {
  const std::string clean = text::sanitize_text(content);
  size_t longest = 0, run = 0;
  for (char c : clean) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(std::max<size_t>(3, longest + 1), '`');
  std::string out = fence + "text\n" + clean;
  if (!clean.empty() && clean.back() != '\n') out += '\n';
  return out + fence + "\n";
}

struct Entry {
  const SuiteResult* suite;
  const JobResult* job;
};

void heading(std::ostream& out, const RunResult& run) {
  const RunResult::Counts c = run.counts();
  // Green only for a run that tested something and saw no failure: a run of inconclusive or skipped jobs
  // showed nothing, and says so (RunResult::nothing_tested).
  const char* icon = c.failed || c.errors || c.interrupted ? "&#x274C;"
                     : run.nothing_tested()                ? "&#x26A0;&#xFE0F;"
                                                           : "&#x2705;";
  out << "## " << icon << " oomharness: " << counts_sentence(run) << " (" << c.total << (c.total == 1 ? " job, " : " jobs, ")
      << format_duration(run.duration) << ")\n\n";
  for (const std::string& note : simulation_notes(run))  // Note [Saying what was simulated]
    out << "> **" << inline_html(note) << "**\n\n";
  if (run.interrupted) out << "> **the run was interrupted**\n\n";
}

void table(std::ostream& out, const std::vector<Entry>& entries) {
  out << "| job | suite | status | verdicts | attempts | faults injected / visible | peak | duration |\n"
         "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n";
  for (const Entry& e : entries) {
    const auto peak = text::job_peak(*e.job);
    out << "| " << cell(e.job->name) << " | " << cell(e.suite->name) << " | " << text::status_word(*e.job)
        << " | " << cell(text::verdict_list(*e.job)) << " | " << e.job->attempts.size() << " | " << e.job->faults.size()
        << " / " << e.job->faults_visible() << " | " << (peak ? format_bytes(*peak) : "-") << " | "
        << format_duration(e.job->duration) << " |\n";
  }
  out << "\n";
}

void details(std::ostream& out, const Entry& e) {
  const JobResult& job = *e.job;
  out << "<details><summary><b>" << inline_html(job.name) << "</b> (" << inline_html(e.suite->name) << "): "
      << text::status_word(job) << " &mdash; " << inline_html(job.message) << "</summary>\n\n";
  // What needs explaining: checks that went against the suite's expectation, and inconclusive ones.
  auto worth_listing = [](const Verdict& v) { return against_expectation(v) || v.status == VerdictStatus::inconclusive; };
  const bool explained = std::any_of(job.verdicts.begin(), job.verdicts.end(), worth_listing);
  if (!explained && !job.message.empty()) out << "- " << cell(job.message) << "\n";
  for (const std::string& f : finding_lines(job)) out << "- " << cell(f) << "\n";  // docs/diagnosis.md
  for (const Verdict& v : job.verdicts) {
    if (!worth_listing(v)) continue;
    out << "- **" << cell(v.policy) << "** " << text::verdict_word(v)
        << (v.must_fail ? " (must_fail: expected to fail)" : "") << ": " << cell(v.reason) << "\n";
    for (const Evidence& ev : v.evidence)
      out << "  - " << attempt_name(ev.attempt) << ", " << text::seconds(ev.t, 2) << "s: " << cell(ev.what) << "\n";
  }
  out << "- " << cell(step_numbering(job.step_base)) << "\n";  // Note [Step numbering]
  if (!job.attempts.empty()) {
    const AttemptResult& last = job.attempts.back();
    if (!last.output_tail.empty()) {
      out << "\nOutput of " << attempt_name(last.index) << " (" << cell(outcome_name(last.outcome)) << "), last lines:\n\n"
          << fenced(text::tail(last.output_tail, 40, 8 * 1024));
    }
  }
  out << "\n</details>\n\n";
}

std::string render(const RunResult& run, const std::vector<Entry>& entries, size_t left_out) {
  std::ostringstream out;
  heading(out, run);
  table(out, entries);
  bool diverged = false;  // Note [Saying what was simulated]
  for (const Entry& e : entries) {
    if (e.job->divergences.empty()) continue;
    if (!diverged) out << "### Where the virtual device differed from a GPU\n\n";
    diverged = true;
    out << "- **" << cell(e.job->name) << "**: " << cell(divergence_list(*e.job)) << "\n";
  }
  if (diverged) out << "\n";
  bool warned = false;
  for (const Entry& e : entries) {
    if (e.job->warnings.empty()) continue;
    if (!warned) out << "### Warnings\n\n";
    warned = true;
    for (const std::string& w : e.job->warnings) out << "- **" << cell(e.job->name) << "**: " << cell(w) << "\n";
  }
  if (warned) out << "\n";
  bool any = false;
  for (const Entry& e : entries) {
    if (e.job->status == JobStatus::passed || e.job->status == JobStatus::skipped) continue;
    if (!any) out << "### Jobs that did not pass\n\n";
    any = true;
    details(out, e);
  }
  if (left_out) out << "_(truncated: " << left_out << " more jobs)_\n";
  return out.str();
}

}  // namespace

std::string render_markdown(const RunResult& run, size_t max_bytes) {
  std::vector<Entry> entries;
  for (const SuiteResult& s : run.suites)
    for (const JobResult& j : s.jobs) entries.push_back({&s, &j});
  std::string full = render(run, entries, 0);
  if (full.size() <= max_bytes) return full;

  std::stable_partition(entries.begin(), entries.end(),
                        [](const Entry& e) { return e.job->status != JobStatus::passed; });
  size_t lo = 0, hi = entries.size();  // the largest count that fits lies in [lo, hi)
  while (lo + 1 < hi) {
    const size_t mid = (lo + hi) / 2;
    std::vector<Entry> some(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(mid));
    if (render(run, some, entries.size() - mid).size() <= max_bytes) lo = mid; else hi = mid;
  }
  std::vector<Entry> some(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(lo));
  std::string out = render(run, some, entries.size() - lo);
  if (out.size() > max_bytes) {  // even the heading does not fit: cut, and still say so
    const std::string note = "\n_(truncated: " + std::to_string(entries.size()) + " more jobs)_\n";
    out = text::utf8_prefix(out, max_bytes > note.size() ? max_bytes - note.size() : 0) + note;
    if (out.size() > max_bytes) out = text::utf8_prefix(note, max_bytes);
  }
  return out;
}

}  // namespace oomh
