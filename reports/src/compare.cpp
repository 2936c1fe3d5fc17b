// Comparing two runs; the rules are described in Note [--fail-on rules] (compare.h).

#include <algorithm>
#include <cmath>
#include <set>
#include <cstdio>
#include <map>
#include <sstream>

#include "oomharness/reports/compare.h"
#include "oomharness/units.h"
#include "text.h"

namespace oomh {

namespace {

using Metric = CompareRule::Metric;

constexpr const char* kRuleForms =
    "valid rules: verdict, removed, peak:+5%, peak:+256MiB, recovery:+20%, recovery:+2s, faults_visible:-0";

ReportExpected<CompareRule> bad_rule(const std::string& text, const std::string& why) {
  return ReportExpected<CompareRule>::failure("bad --fail-on rule '" + text + "': " + why + " (" + kRuleForms + ")");
}

// The change in percent; from 0 no percentage means anything ("+0.0%" for 0 B -> 10 GiB once hid a peak).
std::string pct(double base, double now) {
  if (!(base > 0)) return now > 0 ? "from 0" : "+0.0%";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", (now - base) / base * 100);
  return buf;
}

// "peak grew +12.0% (1.00 GiB -> 1.12 GiB)", or "peak grew from 0 B to 10.00 GiB".
std::string grew_text(const char* what, double base, double now, const std::string& base_text, const std::string& now_text) {
  if (!(base > 0)) return std::string(what) + " from " + base_text + " to " + now_text;
  return std::string(what) + " " + pct(base, now) + " (" + base_text + " -> " + now_text + ")";
}

std::string arrow(const std::string& a, const std::string& b) { return a == b ? a : a + " -> " + b; }

// True when the growth from base to now is more than the rule tolerates.
bool grew_beyond(const CompareRule& rule, double base, double now) {
  if (rule.relative) return base > 0 ? (now - base) / base * 100 > rule.threshold : now > 0;  // from zero: infinite growth
  return now - base > rule.threshold;
}

std::string regression(const JobComparison& j, const CompareRule& rule) {
  switch (rule.metric) {
    case Metric::verdict: {
      if (!j.base_status || !j.new_status) return "";
      if (*j.base_status == JobStatus::passed && *j.new_status != JobStatus::passed)
        return std::string("passed before, ") + to_string(*j.new_status) + " now";
      for (const VerdictChange& v : j.verdict_changes)
        if (v.base == VerdictStatus::pass && v.now == VerdictStatus::fail) return "verdict " + v.policy + " went pass -> fail";
      return "";
    }
    case Metric::removed:
      return j.removed() ? "missing from the new run" : "";
    case Metric::peak:
      if (!j.base_peak || !j.new_peak) return "";
      if (!grew_beyond(rule, static_cast<double>(*j.base_peak), static_cast<double>(*j.new_peak))) return "";
      return grew_text("peak grew", static_cast<double>(*j.base_peak), static_cast<double>(*j.new_peak),
                       format_bytes(*j.base_peak), format_bytes(*j.new_peak)) +
             ", more than " + rule.text + " allows";
    case Metric::recovery:
      if (!j.base_recovery || !j.new_recovery) return "";
      if (!grew_beyond(rule, *j.base_recovery, *j.new_recovery)) return "";
      if (!(*j.base_recovery > 0))
        return "recovery took " + format_duration(*j.new_recovery) + " (" + format_duration(*j.base_recovery) +
               " before), more than " + rule.text + " allows";
      return "recovery took " + pct(*j.base_recovery, *j.new_recovery) + " longer (" + format_duration(*j.base_recovery) +
             " -> " + format_duration(*j.new_recovery) + "), more than " + rule.text + " allows";
    case Metric::faults_visible:
      if (!j.base_status || !j.new_status) return "";
      if (j.base_faults_visible - j.new_faults_visible <= rule.threshold) return "";
      return "the training code saw " + std::to_string(j.new_faults_visible) + " injected fault(s), " +
             std::to_string(j.base_faults_visible) + " before (more are absorbed), more than " + rule.text + " allows";
  }
  return "";
}

void fill_side(const JobResult& job, bool base, JobComparison& c) {
  (base ? c.base_status : c.new_status) = job.status;
  (base ? c.base_peak : c.new_peak) = text::job_peak(job);
  (base ? c.base_recovery : c.new_recovery) = job.recovery_seconds;
  (base ? c.base_faults_visible : c.new_faults_visible) = job.faults_visible();
}

// Verdicts are matched by policy name and by their order among verdicts of that policy.
std::vector<VerdictChange> verdict_changes(const JobResult* base, const JobResult* now) {
  std::map<std::pair<std::string, int>, VerdictChange> by_key;
  std::vector<std::pair<std::string, int>> order;
  const auto add = [&](const JobResult* job, bool is_base) {
    if (!job) return;
    std::map<std::string, int> seen;
    for (const Verdict& v : job->verdicts) {
      const auto key = std::make_pair(v.policy, seen[v.policy]++);
      auto [it, fresh] = by_key.try_emplace(key);
      if (fresh) { order.push_back(key); it->second.policy = v.policy; }
      (is_base ? it->second.base : it->second.now) = v.status;
    }
  };
  add(base, true);
  add(now, false);
  std::vector<VerdictChange> out;
  for (const auto& key : order)
    if (by_key[key].base != by_key[key].now) out.push_back(by_key[key]);
  return out;
}

}  // namespace

ReportExpected<CompareRule> parse_fail_on(const std::string& text) {
  CompareRule rule;
  rule.text = text;
  const size_t colon = text.find(':');
  const std::string metric = text.substr(0, colon);
  std::string value = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (metric == "verdict" || metric == "removed") {
    if (!value.empty()) return bad_rule(text, "'" + metric + "' takes no threshold");
    rule.metric = metric == "verdict" ? Metric::verdict : Metric::removed;
    return ReportExpected<CompareRule>::success(rule);
  }
  if (metric == "faults_visible") {
    rule.metric = Metric::faults_visible;
    if (value.empty()) return ReportExpected<CompareRule>::success(rule);
    if (value.front() != '-') return bad_rule(text, "the tolerated drop needs its sign, like -0 or -1");
    value.erase(0, 1);
    size_t used = 0;
    int n = -1;
    try { n = std::stoi(value, &used); } catch (const std::exception&) { used = 0; }
    if (used == 0 || used != value.size() || n < 0) return bad_rule(text, "expected a count of faults, like -0 or -1");
    rule.threshold = n;
    return ReportExpected<CompareRule>::success(rule);
  }
  if (metric != "peak" && metric != "recovery") return bad_rule(text, "unknown metric '" + metric + "'");
  rule.metric = metric == "peak" ? Metric::peak : Metric::recovery;
  rule.relative = true;
  if (value.empty()) return ReportExpected<CompareRule>::success(rule);
  // The sign is required so that "peak:5" is not silently read as 5 bytes when 5% was meant.
  if (value.front() != '+') return bad_rule(text, "the tolerated growth needs its sign, like +5%");
  value.erase(0, 1);
  if (!value.empty() && value.back() == '%') {
    value.pop_back();
    double d = 0;
    size_t used = 0;
    try { d = std::stod(value, &used); } catch (const std::exception&) { used = 0; }
    // NaN compares false with everything and +inf% tolerates any growth: neither would ever fire.
    if (used == 0 || used != value.size() || !std::isfinite(d) || d < 0)
      return bad_rule(text, "expected a finite percentage like +5%");
    rule.threshold = d;
    return ReportExpected<CompareRule>::success(rule);
  }
  rule.relative = false;
  const Expected<double> parsed = rule.metric == Metric::peak ? parse_bytes(value) : parse_duration(value);
  if (!parsed) return bad_rule(text, parsed.error().str());
  if (!std::isfinite(static_cast<double>(*parsed)))
    return bad_rule(text, "the tolerated growth must be a finite amount");
  rule.threshold = *parsed;
  return ReportExpected<CompareRule>::success(rule);
}

bool Comparison::regressed() const { return regression_count() > 0; }

int Comparison::regression_count() const {
  int n = 0;
  for (const JobComparison& j : jobs) n += static_cast<int>(j.regressions.size());
  return n;
}

SuitePairing pair_suites(const RunResult& base, const RunResult& now) {
  std::map<std::string, std::set<std::string>> base_jobs, new_jobs;  // suite -> its job names
  for (const SuiteResult& s : base.suites)
    for (const JobResult& j : s.jobs) base_jobs[s.name].insert(j.name);
  for (const SuiteResult& s : now.suites)
    for (const JobResult& j : s.jobs) new_jobs[s.name].insert(j.name);
  // Candidates: a suite only the base has and a suite only the new run has that share a job name.
  std::map<std::string, std::vector<std::string>> of_base, of_new;
  for (const auto& [b, b_jobs] : base_jobs) {
    if (new_jobs.count(b)) continue;
    for (const auto& [n, n_jobs] : new_jobs) {
      if (base_jobs.count(n)) continue;
      const std::set<std::string>& theirs = n_jobs;
      if (std::any_of(b_jobs.begin(), b_jobs.end(), [&](const std::string& job) { return theirs.count(job) > 0; })) {
        of_base[b].push_back(n);
        of_new[n].push_back(b);
      }
    }
  }
  const auto quoted_list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& x : names) out += (out.empty() ? "'" : ", '") + x + "'";
    return out;
  };
  const std::string why = ": which was renamed to which cannot be told, and a job that regressed would show as one removed "
                          "job and one new one; compare runs of the same suites";
  SuitePairing out;
  for (const auto& [b, ns] : of_base)
    if (ns.size() > 1) {
      out.ambiguous = "the base run's suite '" + b + "' is missing from the new run, whose suites " + quoted_list(ns) +
                      " (missing from the base) have jobs of the same names" + why;
      return out;
    }
  for (const auto& [n, bs] : of_new)
    if (bs.size() > 1) {
      out.ambiguous = "the new run's suite '" + n + "' is missing from the base run, whose suites " + quoted_list(bs) +
                      " (missing from the new run) have jobs of the same names" + why;
      return out;
    }
  for (const auto& [b, ns] : of_base) out.renamed.push_back({b, ns.front()});
  return out;
}

Comparison compare(const RunResult& base, const RunResult& now, const std::vector<CompareRule>& rules) {
  using Key = std::pair<std::string, std::string>;
  std::map<Key, const JobResult*> in_new;
  for (const SuiteResult& s : now.suites)
    for (const JobResult& j : s.jobs) in_new.emplace(Key{s.name, j.name}, &j);
  std::map<Key, bool> in_new_paired;

  Comparison out;
  // Note [A renamed suite] (compare.h): the base's suite is looked up under its new name.
  const SuitePairing pairing = pair_suites(base, now);
  if (!pairing.ambiguous) out.renamed = pairing.renamed;
  std::map<std::string, std::string> new_name;
  for (const SuiteRename& r : out.renamed) new_name[r.base] = r.now;
  const auto add = [&](const std::string& suite, const JobResult* b, const JobResult* n, const std::string& was) {
    JobComparison c;
    c.suite = suite;
    c.renamed_from = was;
    c.job = b ? b->name : n->name;
    if (b) fill_side(*b, true, c);
    if (n) fill_side(*n, false, c);
    c.verdict_changes = verdict_changes(b, n);
    for (const CompareRule& rule : rules) {
      std::string r = regression(c, rule);
      if (!r.empty()) c.regressions.push_back(r);
    }
    out.jobs.push_back(std::move(c));
  };
  for (const SuiteResult& s : base.suites) {
    const auto renamed = new_name.find(s.name);
    const std::string suite = renamed == new_name.end() ? s.name : renamed->second;
    for (const JobResult& j : s.jobs) {
      auto it = in_new.find(Key{suite, j.name});
      // A job the renamed suite no longer has stays under its old name: it was removed, not renamed.
      if (it == in_new.end()) {
        add(s.name, &j, nullptr, "");
        continue;
      }
      in_new_paired[Key{suite, j.name}] = true;
      add(suite, &j, it->second, suite == s.name ? "" : s.name);
    }
  }
  for (const SuiteResult& s : now.suites)
    for (const JobResult& j : s.jobs)
      if (!in_new_paired.count(Key{s.name, j.name})) add(s.name, nullptr, &j, "");
  return out;
}

// ---- rendering -------------------------------------------------------------------------------------------

namespace {

struct Row { std::string job, status, verdicts, peak, recovery, faults; };

Row row(const JobComparison& j) {
  Row r;
  r.job = j.full_name() + (j.renamed_from.empty() ? "" : " (was " + j.renamed_from + "::" + j.job + ")");
  const auto status = [](const std::optional<JobStatus>& s) { return s ? std::string(to_string(*s)) : std::string("absent"); };
  r.status = j.added() ? "new: " + status(j.new_status) : j.removed() ? "removed" : arrow(status(j.base_status), status(j.new_status));
  for (const VerdictChange& v : j.verdict_changes) {
    if (!r.verdicts.empty()) r.verdicts += ", ";
    r.verdicts += v.policy + " " + (v.base ? to_string(*v.base) : "-") + " -> " + (v.now ? to_string(*v.now) : "-");
  }
  if (r.verdicts.empty()) r.verdicts = "=";
  const auto bytes = [](const std::optional<uint64_t>& b) { return b ? format_bytes(*b) : std::string("-"); };
  r.peak = arrow(bytes(j.base_peak), bytes(j.new_peak));
  if (j.base_peak && j.new_peak && *j.base_peak != *j.new_peak)
    r.peak += " (" + pct(static_cast<double>(*j.base_peak), static_cast<double>(*j.new_peak)) + ")";
  const auto secs = [](const std::optional<double>& s) { return s ? format_duration(*s) : std::string("-"); };
  r.recovery = arrow(secs(j.base_recovery), secs(j.new_recovery));
  if (j.base_recovery && j.new_recovery && *j.base_recovery != *j.new_recovery)
    r.recovery += " (" + pct(*j.base_recovery, *j.new_recovery) + ")";
  const auto count = [](const std::optional<JobStatus>& present, int n) { return present ? std::to_string(n) : std::string("-"); };
  r.faults = arrow(count(j.base_status, j.base_faults_visible), count(j.new_status, j.new_faults_visible));
  return r;
}

constexpr const char* kHeaders[] = {"job", "status", "verdict changes", "peak", "recovery", "faults visible"};

std::vector<std::string> cells(const Row& r) { return {r.job, r.status, r.verdicts, r.peak, r.recovery, r.faults}; }

std::string summary_line(const Comparison& c) {
  int added = 0, removed = 0;
  for (const JobComparison& j : c.jobs) { added += j.added(); removed += j.removed(); }
  std::string s = std::to_string(c.jobs.size()) + " jobs compared, " + std::to_string(added) + " new, " +
                  std::to_string(removed) + " removed: ";
  s += c.regressed() ? std::to_string(c.regression_count()) + " regression(s)" : "no regressions";
  for (const SuiteRename& r : c.renamed)
    s += "; the suite '" + r.base + "' is '" + r.now + "' in the new run: its jobs are compared by name";
  return s;
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char ch : text::sanitize_text(s)) {
    if (ch == '|') out += "\\|";
    else if (ch == '`') out += "\\`";
    else if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '\n') out += ' ';
    else out += ch;
  }
  return out;
}

}  // namespace

std::string render_comparison_text(const Comparison& c) {
  std::vector<std::vector<std::string>> table = {{std::begin(kHeaders), std::end(kHeaders)}};
  for (const JobComparison& j : c.jobs) table.push_back(cells(row(j)));
  std::vector<size_t> width(table[0].size(), 0);
  for (const auto& r : table)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], text::sanitize_text(r[i]).size());
  std::ostringstream out;
  for (const auto& r : table) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      std::string v = text::sanitize_text(r[i]);
      if (i + 1 < r.size()) v.resize(width[i], ' ');
      line += (i ? "  " : "") + v;
    }
    out << line << "\n";
  }
  out << "\n" << summary_line(c) << "\n";
  for (const JobComparison& j : c.jobs)
    for (const std::string& r : j.regressions) out << "  REGRESSION " << text::sanitize_text(j.full_name()) << ": " << r << "\n";
  return out.str();
}

std::string render_comparison_markdown(const Comparison& c) {
  std::ostringstream out;
  out << "## " << (c.regressed() ? "&#x274C;" : "&#x2705;") << " oomharness compare: " << summary_line(c) << "\n\n";
  out << "|";
  for (const char* h : kHeaders) out << " " << h << " |";
  out << "\n|";
  for (size_t i = 0; i < std::size(kHeaders); ++i) out << " --- |";
  out << "\n";
  for (const JobComparison& j : c.jobs) {
    out << "|";
    for (const std::string& v : cells(row(j))) out << " " << md_cell(v) << " |";
    out << "\n";
  }
  if (c.regressed()) {
    out << "\n### Regressions\n\n";
    for (const JobComparison& j : c.jobs)
      for (const std::string& r : j.regressions) out << "- **" << md_cell(j.full_name()) << "**: " << md_cell(r) << "\n";
  }
  return out.str();
}

std::optional<std::string> job_listed_twice(const RunResult& run) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const SuiteResult& suite : run.suites)
    for (const JobResult& job : suite.jobs)
      if (!seen.emplace(suite.name, job.name).second) return suite.name + "::" + job.name;
  return std::nullopt;
}

}  // namespace oomh
