#include "oomharness/reports/sweep.h"

#include "text.h"
#include "oomharness/reports/terminal_text.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace oomh {

namespace {

bool check_failed(const JobResult& job, const char* policy) {
  for (const auto& v : job.verdicts)
    if (v.policy == policy && against_expectation(v)) return true;
  return false;
}

bool survived(const SweepCase& c) { return c.outcome == "recovered" || c.outcome == "absorbed"; }

std::string steps_words(const SweepResult& sweep) {
  std::string out = sweep.steps.size() == 1 ? "step " : "steps ";
  for (size_t i = 0; i < sweep.steps.size(); ++i) out += (i ? ", " : "") + std::to_string(sweep.steps[i]);
  return out;
}

std::string site_words(const SweepSite& s) {
  return "site " + std::to_string(s.index) + " (" + s.phase + ", " + s.size_class + (s.where ? ", " + *s.where : "") + ")";
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

int SweepResult::survived() const {
  int n = 0;
  for (const auto& s : sites)
    if (std::all_of(s.cases.begin(), s.cases.end(), [](const SweepCase& c) { return oomh::survived(c); })) ++n;
  return n;
}

std::string sweep_outcome(const JobResult& job) {
  switch (job.status) {
    case JobStatus::error: return "error";
    case JobStatus::skipped: return "skipped";
    case JobStatus::interrupted: return "interrupted";
    case JobStatus::inconclusive: return "inconclusive";
    case JobStatus::passed: return job.faults_visible() > 0 ? "recovered" : "absorbed";
    case JobStatus::failed: break;
  }
  const std::optional<AttemptOutcome> last =
      job.attempts.empty() ? std::nullopt : std::optional<AttemptOutcome>(job.attempts.back().outcome);
  if (last == AttemptOutcome::timeout || check_failed(job, "no_hang")) return "hang";
  if (last == AttemptOutcome::oom || last == AttemptOutcome::nonzero || last == AttemptOutcome::signal) return "crash";
  if (check_failed(job, "memory_stable")) return "leak";
  return "failed";
}

std::string sweep_sentence(const SweepResult& sweep) {
  std::ostringstream o;
  const size_t n = sweep.sites.size();
  o << n << (n == 1 ? " site" : " sites") << " in " << steps_words(sweep) << "; survived " << sweep.survived();
  std::vector<std::string> lost;
  for (const auto& s : sweep.sites) {
    std::vector<std::string> how;
    for (const auto& c : s.cases)
      if (!survived(c)) how.push_back(c.mode + " " + c.outcome);
    if (how.empty()) continue;
    std::string words = site_words(s.site) + ": ";
    for (size_t i = 0; i < how.size(); ++i) words += (i ? ", " : "") + how[i];
    lost.push_back(words);
  }
  if (!lost.empty()) {
    o << "; " << lost.size() << " not survived: ";
    for (size_t i = 0; i < lost.size(); ++i) o << (i ? "; " : "") << lost[i];
  }
  return o.str();
}

std::string render_sweep_text(const SweepResult& sweep, bool color) {
  const char* red = color ? "\033[31m" : "";
  const char* green = color ? "\033[32m" : "";
  const char* reset = color ? "\033[0m" : "";
  std::vector<std::string> modes;
  for (const auto& s : sweep.sites)
    for (const auto& c : s.cases)
      if (std::find(modes.begin(), modes.end(), c.mode) == modes.end()) modes.push_back(c.mode);
  std::ostringstream o;
  o << "Sweep of " << steps_words(sweep) << ": " << sweep.calls_recorded << " allocation calls in the golden run, "
    << sweep.sites.size() << " sites" << (sweep.simulated ? " (simulated device)" : "") << "\n";
  const bool lines = std::any_of(sweep.sites.begin(), sweep.sites.end(), [](const SweepSiteResult& s) { return s.site.where.has_value(); });
  o << pad("site", 6) << pad("step", 6) << pad("phase", 11) << pad("entry", 16) << pad("size", 24) << pad("nth", 6) << pad("calls", 7);
  for (const auto& m : modes) o << pad(m, 13);
  if (lines) o << "line";
  o << "\n";
  for (const auto& s : sweep.sites) {
    o << pad(std::to_string(s.site.index), 6) << pad(std::to_string(s.site.step), 6) << pad(s.site.phase, 11) << pad(s.site.entry, 16)
      << pad(s.site.size_class, 24) << pad(std::to_string(s.site.nth), 6) << pad(std::to_string(s.site.calls), 7);
    for (const auto& m : modes) {
      auto c = std::find_if(s.cases.begin(), s.cases.end(), [&](const SweepCase& x) { return x.mode == m; });
      if (c == s.cases.end()) {
        o << pad("-", 13);
        continue;
      }
      o << (survived(*c) ? green : red) << pad(c->outcome, 13) << reset;
    }
    if (lines) o << s.site.where.value_or("-");
    o << "\n";
  }
  o << sweep_sentence(sweep) << "\n";
  bool header = false;
  for (const auto& s : sweep.sites)
    for (const auto& c : s.cases) {
      if (survived(c)) continue;
      if (!header) o << "Reproduce one alone (oomharness exec ... --fault SPEC -- CMD):\n";
      header = true;
      // The site and the message come from the job (Note [Text for a terminal]).
      o << terminal_text("  " + site_words(s.site) + " " + c.mode + ": --fault '" + c.fault + "'  (" + c.message + ")") << "\n";
    }
  size_t runs = 0;
  for (const auto& s : sweep.sites) runs += s.cases.size();
  char times[160];
  std::snprintf(times, sizeof times, "Golden run %.2fs; %zu faulted runs in %.2fs with --jobs %d\n",
                sweep.golden_seconds, runs, sweep.sweep_seconds, sweep.jobs);
  o << times;
  return o.str();
}

std::string render_sweep_html(const SweepResult& sweep, const std::string& report) {
  using text::seconds;
  using text::xml_escape;
  std::vector<std::string> modes;
  for (const auto& s : sweep.sites)
    for (const auto& c : s.cases)
      if (std::find(modes.begin(), modes.end(), c.mode) == modes.end()) modes.push_back(c.mode);
  const bool all = sweep.survived() == static_cast<int>(sweep.sites.size()) && !sweep.sites.empty();
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>oomharness sweep: "
    << xml_escape(sweep.job) << "</title>\n<style>"
    << "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    << "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left}"
    << "th{background:#f3f3f3}td.n{text-align:right}.ok{background:#e6f4e6}.bad{background:#fbe3e3}"
    << ".headline{font-size:1.1em;padding:.5em;border-radius:4px}.h-ok{background:#e6f4e6}.h-fail{background:#fbe3e3}"
    << "code{background:#f6f6f6;padding:0 .2em}.muted{color:#777}"
    << "</style>\n</head>\n<body>\n<h1>Sweep of " << xml_escape(sweep.job) << ", " << steps_words(sweep) << "</h1>\n";
  o << "<p class=\"headline " << (all ? "h-ok" : "h-fail") << "\">" << xml_escape(sweep_sentence(sweep)) << "</p>\n";
  o << "<p class=\"muted\">" << sweep.calls_recorded << " allocation calls in the golden run ("
    << xml_escape(seconds(sweep.golden_seconds, 2)) << " s); the faulted runs took " << xml_escape(seconds(sweep.sweep_seconds, 2))
    << " s with --jobs " << sweep.jobs << (sweep.simulated ? ". Simulated device: no GPU ran these jobs." : ".")
    << "</p>\n<table>\n<tr><th>site</th><th>step</th><th>phase</th><th>entry</th><th>size</th><th>nth</th><th>calls</th>";
  const bool lines = std::any_of(sweep.sites.begin(), sweep.sites.end(), [](const SweepSiteResult& s) { return s.site.where.has_value(); });
  if (lines) o << "<th>line</th>";
  for (const auto& m : modes) o << "<th>" << xml_escape(m) << "</th>";
  o << "</tr>\n";
  for (const auto& s : sweep.sites) {
    o << "<tr><td class=\"n\">" << s.site.index << "</td><td class=\"n\">" << s.site.step << "</td><td>" << xml_escape(s.site.phase) << "</td><td>"
      << xml_escape(s.site.entry) << "</td><td>" << xml_escape(s.site.size_class) << "</td><td class=\"n\">"
      << s.site.nth << "</td><td class=\"n\">" << s.site.calls << "</td>";
    if (lines) o << "<td><code>" << xml_escape(s.site.where.value_or("-")) << "</code></td>";
    for (const auto& m : modes) {
      auto c = std::find_if(s.cases.begin(), s.cases.end(), [&](const SweepCase& x) { return x.mode == m; });
      if (c == s.cases.end()) {
        o << "<td>-</td>";
        continue;
      }
      o << "<td class=\"" << (survived(*c) ? "ok" : "bad") << "\" title=\"" << xml_escape(c->message) << "\">";
      if (!report.empty()) o << "<a href=\"" << xml_escape(report) << "\">" << xml_escape(c->outcome) << "</a>";
      else o << xml_escape(c->outcome);
      if (!survived(*c)) o << "<br><code>--fault " << xml_escape(c->fault) << "</code>";
      o << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</table>\n</body>\n</html>\n";
  return o.str();
}

void to_json(nlohmann::json& j, const SweepSite& v) {
  j = {{"index", v.index},   {"step", v.step}, {"phase", v.phase}, {"entry", v.entry},  {"size", v.size},
       {"size_class", v.size_class}, {"nth", v.nth}, {"calls", v.calls}};
  j["where"] = v.where ? nlohmann::json(*v.where) : nlohmann::json(nullptr);
}

void to_json(nlohmann::json& j, const SweepCase& v) {
  j = {{"mode", v.mode},       {"fault", v.fault},     {"job", v.job},
       {"status", to_string(v.status)}, {"outcome", v.outcome}, {"message", v.message}};
}

std::string render_sweep_json(const SweepResult& sweep) {
  nlohmann::json j;
  j["schema_version"] = sweep.schema_version;
  j["job"] = sweep.job;
  j["command"] = sweep.command;
  j["steps"] = sweep.steps;
  j["calls_recorded"] = sweep.calls_recorded;
  j["golden_seconds"] = sweep.golden_seconds;
  j["sweep_seconds"] = sweep.sweep_seconds;
  j["jobs"] = sweep.jobs;
  j["simulated"] = sweep.simulated;
  j["summary"] = sweep_sentence(sweep);
  j["survived"] = sweep.survived();
  nlohmann::json sites = nlohmann::json::array();
  for (const auto& s : sweep.sites) {
    nlohmann::json site = s.site;
    site["cases"] = s.cases;
    sites.push_back(std::move(site));
  }
  j["sites"] = std::move(sites);
  return j.dump(2) + "\n";
}

}  // namespace oomh
