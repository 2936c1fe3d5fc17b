// JUnit XML, in the dialect the common readers share (GitHub's test-reporter actions, GitLab's
// artifacts:reports:junit, Jenkins' junit step): testsuites > testsuite > testcase, one testcase per job.
//
// Note [Job status in JUnit]
//   passed                 a bare testcase
//   passed, XFAIL          a passing testcase whose system-out first says which must_fail check failed as
//                          expected, and why (Note [Expected failures] in result.cpp)
//   failed                 <failure message="first failing verdict's sentence"> body: every failing verdict
//   failed, XPASS          <failure type="xpass">: the must_fail check that passed
//   error, interrupted     <error message="...">: the job could not be judged (did not start, was stopped)
//   skipped, inconclusive  <skipped message="...">: nothing failed, but nothing was shown either
// Readers count a testsuite's tests/failures/errors/skipped from these attributes, so they are computed
// from the same mapping. JUnit has no place for a run's headline; each testsuite's properties carry it
// (`oomharness.summary`, and `oomharness.nothing_tested`, true when no job passed or failed, so that a
// page of skipped testcases is not read as green).

#include <sstream>

#include "oomharness/reports/explain.h"
#include "oomharness/reports/writers.h"
#include "text.h"

namespace oomh {

namespace {

using text::xml_escape;

enum class Kind { pass, failure, error, skipped };

Kind junit_kind(JobStatus s) {
  switch (s) {
    case JobStatus::passed: return Kind::pass;
    case JobStatus::failed: return Kind::failure;
    case JobStatus::error:
    case JobStatus::interrupted: return Kind::error;
    case JobStatus::skipped:
    case JobStatus::inconclusive: return Kind::skipped;
  }
  return Kind::error;
}

struct Tally { int tests = 0, failures = 0, errors = 0, skipped = 0; };

Tally tally(const std::vector<JobResult>& jobs) {
  Tally t;
  for (const JobResult& job : jobs) {
    ++t.tests;
    switch (junit_kind(job.status)) {
      case Kind::pass: break;
      case Kind::failure: ++t.failures; break;
      case Kind::error: ++t.errors; break;
      case Kind::skipped: ++t.skipped; break;
    }
  }
  return t;
}

void counts_attributes(std::ostream& out, const Tally& t) {
  out << " tests=\"" << t.tests << "\" failures=\"" << t.failures << "\" errors=\"" << t.errors
      << "\" skipped=\"" << t.skipped << "\"";
}

void property(std::ostream& out, const std::string& name, const std::string& value) {
  out << "      <property name=\"" << xml_escape(name) << "\" value=\"" << xml_escape(value) << "\"/>\n";
}

void properties(std::ostream& out, const RunResult& run) {
  const Environment& env = run.environment;
  out << "    <properties>\n";
  property(out, "oomharness.summary", counts_sentence(run));
  property(out, "oomharness.nothing_tested", run.nothing_tested() ? "true" : "false");
  property(out, "hostname", env.hostname);
  property(out, "gpu_name", env.gpu_name);
  property(out, "driver_version", env.driver_version);
  property(out, "cuda_version", env.cuda_version);
  property(out, "simulated_device", env.simulated_device ? "true" : "false");
  if (!env.virtual_device.empty()) property(out, "virtual_device", env.virtual_device);
  // Note [Saying what was simulated]
  const std::vector<std::string> notes = simulation_notes(run);
  for (size_t i = 0; i < notes.size(); ++i) property(out, "oomharness.device_note." + std::to_string(i + 1), notes[i]);
  for (const auto& [name, version] : env.frameworks) property(out, "framework." + name, version);
  property(out, "harness_version", env.harness_version);
  std::string command;
  for (const std::string& arg : env.command_line) command += (command.empty() ? "" : " ") + arg;
  property(out, "command_line", command);
  out << "    </properties>\n";
}

std::string evidence_lines(const Verdict& v) {
  std::string body;
  for (const Evidence& e : v.evidence)
    body += "  " + attempt_name(e.attempt) + " at " + text::seconds(e.t, 2) + "s: " + e.what + "\n";
  return body;
}

std::string failing_verdicts(const JobResult& job) {
  std::string body;
  for (const Verdict& v : job.verdicts) {
    // What made the job fail: a failed check, or a check that must fail and passed.
    if (!against_expectation(v)) continue;
    body += v.policy + (v.must_fail ? " was expected to fail (must_fail: true) but passed: " : ": ") + v.reason + "\n";
    body += evidence_lines(v);
  }
  if (body.empty()) body = job.message + "\n";
  for (const std::string& f : finding_lines(job)) body += f + "\n";  // docs/diagnosis.md
  return body;
}

// For an XFAIL job, what its system-out says first: the checks that failed as expected.
std::string expected_failures(const JobResult& job) {
  if (!job.expected_failure()) return {};
  std::string body;
  for (const Verdict& v : job.verdicts) {
    if (!v.must_fail || v.status != VerdictStatus::fail) continue;
    body += "XFAIL: " + v.policy + " failed as expected (must_fail: true): " + v.reason + "\n" + evidence_lines(v);
  }
  for (const std::string& f : finding_lines(job)) body += f + "\n";  // docs/diagnosis.md
  return body;
}

// The output of every attempt, the last lines of each: what a CI page shows under the test.
std::string output(const JobResult& job) {
  std::string out;
  for (const AttemptResult& a : job.attempts) {
    if (job.attempts.size() > 1 || !a.output_tail.empty())
      out += "--- " + attempt_name(a.index) + " (" + outcome_name(a.outcome) + ") ---\n";
    out += text::tail(a.output_tail, 200, 64 * 1024);
    if (!out.empty() && out.back() != '\n') out += '\n';
  }
  return out;
}

void testcase(std::ostream& out, const SuiteResult& suite, const JobResult& job) {
  out << "    <testcase classname=\"" << xml_escape(suite.name) << "\" name=\"" << xml_escape(job.name)
      << "\" file=\"" << xml_escape(suite.file) << "\" time=\"" << text::seconds(job.duration) << "\"";
  const Kind kind = junit_kind(job.status);
  std::string log = output(job);
  if (const std::string xfail = expected_failures(job); !xfail.empty()) log = xfail + (log.empty() ? "" : "\n" + log);
  if (job.virtual_device) {  // Note [Saying what was simulated], under the test a CI page shows
    std::string head = "No GPU ran this job: it ran on the " + *job.virtual_device +
                       ". Its recovery verdicts are meaningful; absolute memory figures are modelled.\n";
    for (const auto& [what, detail] : job.divergences) head += "Differs from a GPU (" + what + "): " + detail + "\n";
    log = head + (log.empty() ? "" : "\n" + log);
  }
  if (!job.warnings.empty()) {
    std::string head;
    for (const std::string& w : job.warnings) head += "Warning: " + w + "\n";
    log = head + (log.empty() ? "" : "\n" + log);
  }
  if (kind == Kind::pass && log.empty()) { out << "/>\n"; return; }
  out << ">\n";
  switch (kind) {
    case Kind::pass: break;
    case Kind::failure:
      out << "      <failure message=\"" << xml_escape(job.message) << "\" type=\""
          << (job.unexpected_pass() ? "xpass" : "verdict") << "\">"
          << xml_escape(failing_verdicts(job)) << "</failure>\n";
      break;
    case Kind::error:
      out << "      <error message=\"" << xml_escape(job.message) << "\" type=\"" << to_string(job.status) << "\">"
          << xml_escape(job.message) << "</error>\n";
      break;
    case Kind::skipped:
      out << "      <skipped message=\"" << xml_escape(std::string(to_string(job.status)) + ": " + job.message)
          << "\"/>\n";
      break;
  }
  if (!log.empty()) out << "      <system-out>" << xml_escape(log) << "</system-out>\n";
  out << "    </testcase>\n";
}

}  // namespace

std::string render_junit(const RunResult& run) {
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  Tally all;
  for (const SuiteResult& s : run.suites) {
    const Tally t = tally(s.jobs);
    all.tests += t.tests; all.failures += t.failures; all.errors += t.errors; all.skipped += t.skipped;
  }
  out << "<testsuites name=\"oomharness\"";
  counts_attributes(out, all);
  out << " time=\"" << text::seconds(run.duration) << "\">\n";
  for (const SuiteResult& suite : run.suites) {
    out << "  <testsuite name=\"" << xml_escape(suite.name) << "\"";
    counts_attributes(out, tally(suite.jobs));
    out << " time=\"" << text::seconds(suite.duration) << "\" timestamp=\"" << text::iso8601_utc(suite.start)
        << "\" hostname=\"" << xml_escape(run.environment.hostname) << "\" file=\"" << xml_escape(suite.file)
        << "\">\n";
    properties(out, run);
    for (const JobResult& job : suite.jobs) testcase(out, suite, job);
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
  return out.str();
}

}  // namespace oomh
