// `oomharness validate`, `report` and `compare`: commands that run no job.

#include <filesystem>

#include "app/commands.h"
#include "oomharness/reports/compare.h"
#include "oomharness/reports/explain.h"
#include "oomharness/reports/terminal_text.h"
#include "oomharness/runner/cli_specs.h"
#include "oomharness/reports/writers.h"
#include "oomharness/units.h"
#include "oomharness/runner/name_tables.h"
#include "suite/job_table.h"

namespace fs = std::filesystem;

namespace oomh::app {

ExitCode command_validate(const std::vector<std::string>& suites, std::ostream& out, std::ostream& err,
                          const SuiteLimits& limits) {
  bool bad = false;
  for (const auto& file : suites) {
    auto load = load_suite(file, limits);
    if (!load) {
      for (const auto& e : load.error()) err << e.str() << "\n";
      bad = true;
      continue;
    }
    size_t n = load->jobs.size();
    out << "ok: " << n << (n == 1 ? " job" : " jobs") << " in " << file << "\n";
    for (const auto& job : load->jobs) out << "  " << terminal_text(load->name + "::" + job.name) << "\n";  // Note [Text for a terminal]
  }
  return bad ? ExitCode::usage_error : ExitCode::ok;
}

namespace {
bool write_one(const std::string& path, const std::string& content, std::ostream& out, std::ostream& err) {
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  auto w = write_file_atomic(path, content);
  if (!w) {
    err << "oomharness: " << w.error() << "\n";
    return false;
  }
  out << "wrote " << path << "\n";
  return true;
}
}  // namespace

std::optional<uint64_t> max_file_size(const std::string& text, const std::string& who, std::ostream& err) {
  if (text.empty()) return kMaxResultsFileBytes;
  Expected<double> size = parse_bytes(text);
  if (!size || *size < 1) {
    err << who << ": bad --max-file-size: " << (size ? "bad size '" + text + "': at least 1B" : size.error().str()) << "\n";
    return std::nullopt;
  }
  return static_cast<uint64_t>(*size);
}

ExitCode command_explain(const std::string& results, const std::vector<std::string>& filters, std::ostream& out,
                         std::ostream& err, const std::string& max_size) {
  auto limit = max_file_size(max_size, "oomharness explain", err);
  if (!limit) return ExitCode::usage_error;
  auto run = load_results(results, *limit);
  if (!run) {
    err << "oomharness explain: " << terminal_text(run.error()) << "\n";
    return ExitCode::usage_error;
  }
  std::vector<JobFilter> parsed;
  for (const std::string& expression : filters) {
    auto f = JobFilter::parse(expression);
    if (!f) {
      err << "oomharness explain: " << f.error() << "\n";
      return ExitCode::usage_error;
    }
    parsed.push_back(*f);
  }
  size_t shown = 0;
  for (const SuiteResult& suite : run.value().suites)
    for (const JobResult& job : suite.jobs) {
      bool wanted = parsed.empty();
      for (const JobFilter& f : parsed) wanted = wanted || f.matches(suite.name, job.name);
      if (!wanted) continue;
      out << (shown++ ? "\n" : "") << terminal_text(explain_job(suite.name, job));  // Note [Text for a terminal]
    }
  if (shown == 0) {
    err << "oomharness explain: no job in " << results << " matches -k\n";
    return ExitCode::usage_error;
  }
  return ExitCode::ok;
}

ExitCode command_report(const std::string& results, const ReportFlags& flags, std::ostream& out, std::ostream& err,
                        const std::string& max_size) {
  auto limit = max_file_size(max_size, "oomharness report", err);
  if (!limit) return ExitCode::usage_error;
  auto run = load_results(results, *limit);
  if (!run) {
    err << "oomharness report: " << terminal_text(run.error()) << "\n";
    return ExitCode::usage_error;
  }
  ReportFlags f = flags;
  // With no format asked for, the report a person wants: HTML next to the results file.
  if (f.html.empty() && f.junit.empty() && f.markdown.empty() && f.perfetto.empty() && f.json.empty())
    f.html = (fs::path(results).parent_path() / "report.html").string();
  bool ok = true;
  if (!f.html.empty()) {
    std::string dir = fs::path(f.html).parent_path().string();
    ok &= write_one(f.html, render_html(run.value(), HtmlOptions{dir.empty() ? "." : dir}), out, err);
  }
  if (!f.junit.empty()) ok &= write_one(f.junit, render_junit(run.value()), out, err);
  if (!f.markdown.empty()) ok &= write_one(f.markdown, render_markdown(run.value()), out, err);
  if (!f.perfetto.empty()) ok &= write_one(f.perfetto, render_perfetto(run.value()), out, err);
  if (!f.json.empty()) ok &= write_one(f.json, render_json(run.value()), out, err);
  return ok ? ExitCode::ok : ExitCode::internal_error;
}

ExitCode command_compare(const CompareArgs& args, std::ostream& out, std::ostream& err) {
  std::vector<CompareRule> rules;
  std::vector<std::string> texts = args.fail_on;
  if (texts.empty()) texts = {"verdict"};  // a job that stopped passing is a regression by default
  for (const auto& t : texts) {
    auto r = parse_fail_on(t);
    if (!r) {
      err << "oomharness compare: " << r.error() << "\n";
      return ExitCode::usage_error;
    }
    rules.push_back(r.value());
  }
  auto limit = max_file_size(args.max_file_size, "oomharness compare", err);
  if (!limit) return ExitCode::usage_error;
  auto base = load_results(args.base, *limit);
  if (!base) {
    err << "oomharness compare: " << terminal_text(base.error()) << "\n";
    return ExitCode::usage_error;
  }
  auto now = load_results(args.now, *limit);
  if (!now) {
    err << "oomharness compare: " << terminal_text(now.error()) << "\n";
    return ExitCode::usage_error;
  }
  // Jobs are paired by name: one listed twice would leave the other copy unread.
  using Named = std::pair<const std::string*, const RunResult*>;
  for (const Named& named : {Named{&args.base, &base.value()}, Named{&args.now, &now.value()}})
    if (auto twice = job_listed_twice(*named.second)) {
      err << "oomharness compare: " << terminal_text(*named.first) << " lists the job " << terminal_text(*twice)
          << " twice: a results file names each job once\n";
      return ExitCode::usage_error;
    }
  // Note [A renamed suite] in compare.h.
  if (const SuitePairing pairing = pair_suites(base.value(), now.value()); pairing.ambiguous) {
    err << "oomharness compare: " << terminal_text(*pairing.ambiguous) << "\n";
    return ExitCode::usage_error;
  }
  Comparison c = compare(base.value(), now.value(), rules);
  out << terminal_text(render_comparison_text(c));  // Note [Text for a terminal]
  if (!args.markdown.empty()) {
    auto w = write_file_atomic(args.markdown, render_comparison_markdown(c));
    if (!w) {
      err << "oomharness compare: " << w.error() << "\n";
      return ExitCode::internal_error;
    }
  }
  return c.regressed() ? ExitCode::tests_failed : ExitCode::ok;
}

ExitCode command_dev_job_keys(std::ostream& out) {
  nlohmann::json keys = nlohmann::json::array();
  for (const suite::JobKey& k : suite::job_keys()) {
    nlohmann::json flags = nlohmann::json::array();
    for (const suite::JobFlag& f : k.flags)
      if (!f.name.empty()) flags.push_back({{"flag", f.name}, {"help", f.help}});
    keys.push_back({{"key", k.key}, {"takes", k.takes}, {"default", k.default_text}, {"help", k.help},
                    {"in_defaults", k.in_defaults}, {"flags", flags}});
  }
  out << keys.dump(2) << "\n";
  return ExitCode::ok;
}

ExitCode command_dev_backends(std::ostream& out) {
  out << names_text(kBackends, " ") << "\n";
  return ExitCode::ok;
}

}  // namespace oomh::app
