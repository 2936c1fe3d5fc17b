// JUnit XML: the counts readers take from the attributes, the status mapping, and text XML 1.0 accepts.

#include <gtest/gtest.h>

#include "oomharness/reports/writers.h"
#include "support.h"

namespace oomh {
namespace {

TEST(JUnit, SuiteCountsFollowTheStatusMapping) {
  const std::string xml = render_junit(test::load_fixture("run.json"));
  EXPECT_NE(xml.find("<testsuites name=\"oomharness\" tests=\"8\" failures=\"3\" errors=\"1\" skipped=\"2\""), std::string::npos);
  EXPECT_NE(xml.find("<testsuite name=\"demo\" tests=\"3\" failures=\"2\" errors=\"0\" skipped=\"0\" time=\"23.000\" "
                     "timestamp=\"2024-05-01T12:00:00\""),
            std::string::npos)
      << xml.substr(0, 600);
  EXPECT_NE(xml.find("<testsuite name=\"selftest\" tests=\"3\" failures=\"0\" errors=\"1\" skipped=\"2\""), std::string::npos);
  EXPECT_NE(xml.find("<testcase classname=\"demo\" name=\"resume-broken\" file=\"suites/demo.yaml\" time=\"14.500\">"),
            std::string::npos);
  EXPECT_NE(xml.find("<failure message=\"the job was restarted after the OOM at step 12"), std::string::npos);
  EXPECT_NE(xml.find("<error message=\"cannot start &#39;python3 missing.py&#39;"), std::string::npos);
  EXPECT_NE(xml.find("<skipped message=\"inconclusive: no OOM reached"), std::string::npos);
  EXPECT_NE(xml.find("<property name=\"framework.torch\" value=\"2.11.0+cu130\"/>"), std::string::npos);
}

// Note [Expected failures]: an XFAIL is a passing testcase that says which check failed as expected; an
// XPASS is a failure saying the check was expected to fail.
TEST(JUnit, ExpectedFailuresPassAndUnexpectedPassesFail) {
  const std::string xml = render_junit(test::load_fixture("run.json"));
  EXPECT_NE(xml.find("<testsuite name=\"expectations\" tests=\"2\" failures=\"1\" errors=\"0\" skipped=\"0\""),
            std::string::npos);
  const size_t xfail = xml.find("name=\"leak-caught\"");
  const size_t xpass = xml.find("name=\"leak-missed\"");
  ASSERT_NE(xfail, std::string::npos);
  ASSERT_NE(xpass, std::string::npos);
  const std::string caught = xml.substr(xfail, xml.find("</testcase>", xfail) - xfail);
  EXPECT_EQ(caught.find("<failure"), std::string::npos) << caught;
  EXPECT_EQ(caught.find("<skipped"), std::string::npos) << caught;
  EXPECT_NE(caught.find("<system-out>XFAIL: memory_stable failed as expected (must_fail: true): memory held at step "
                        "start grew from 1.00 GiB to 1.60 GiB"),
            std::string::npos)
      << caught;
  EXPECT_NE(caught.find("  attempt 1 at 1.90s: step 12 started at 1.60 GiB\n"), std::string::npos) << caught;
  const std::string missed = xml.substr(xpass, xml.find("</testcase>", xpass) - xpass);
  EXPECT_NE(missed.find("<failure message=\"memory_stable must fail for this job"), std::string::npos) << missed;
  EXPECT_NE(missed.find("type=\"xpass\">memory_stable was expected to fail (must_fail: true) but passed: memory held"),
            std::string::npos)
      << missed;
}

TEST(JUnit, PropertiesSayWhenNothingWasTested) {
  const std::string tested = render_junit(test::load_fixture("run.json"));
  EXPECT_NE(tested.find("<property name=\"oomharness.nothing_tested\" value=\"false\"/>"), std::string::npos);
  EXPECT_NE(tested.find("<property name=\"oomharness.summary\" value=\"2 failed, 1 xpassed, 1 error, 1 passed, "
                        "1 xfailed, 1 inconclusive, 1 skipped\"/>"),
            std::string::npos);
  RunResult run;
  run.suites.push_back({"s", "s.yaml", 0, 1, {}});
  JobResult job;
  job.name = "absorbed";
  job.status = JobStatus::inconclusive;
  job.message = "no OOM reached the training code";
  run.suites[0].jobs = {job, job};
  const std::string xml = render_junit(run);
  EXPECT_NE(xml.find("<property name=\"oomharness.nothing_tested\" value=\"true\"/>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<property name=\"oomharness.summary\" value=\"nothing was tested: 2 inconclusive\"/>"),
            std::string::npos)
      << xml;
}

TEST(JUnit, AttemptsAreNumberedFromOne) {
  const std::string xml = render_junit(test::load_fixture("run.json"));
  EXPECT_NE(xml.find("--- attempt 1 (oom) ---"), std::string::npos);
  EXPECT_NE(xml.find("--- attempt 2 (ok) ---"), std::string::npos);
  EXPECT_NE(xml.find("  attempt 2 at 6.90s: loaded checkpoint step 0"), std::string::npos);
  EXPECT_EQ(xml.find("attempt 0"), std::string::npos);
}

TEST(JUnit, InterruptedJobsAreErrorsNotSkips) {
  RunResult run;
  run.suites.push_back({"s", "s.yaml", 0, 1, {}});
  JobResult job;
  job.name = "stopped";
  job.status = JobStatus::interrupted;
  job.message = "interrupted before it finished";
  run.suites[0].jobs.push_back(job);
  const std::string xml = render_junit(run);
  EXPECT_NE(xml.find("errors=\"1\" skipped=\"0\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error message=\"interrupted before it finished\" type=\"interrupted\">"), std::string::npos);
}

TEST(JUnit, OnlyCharactersXmlAllows) {
  const std::string xml = render_junit(test::load_fixture("hostile.json"));
  for (unsigned char c : xml) EXPECT_TRUE(c >= 0x20 || c == '\n' || c == '\t') << "control byte " << int(c);
  EXPECT_EQ(xml.find("<script>"), std::string::npos);
  EXPECT_EQ(xml.find("<img"), std::string::npos);
  EXPECT_NE(xml.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(xml.find("red text"), std::string::npos);  // the colour codes are gone, the text stays
  EXPECT_EQ(xml.find("[31m"), std::string::npos);
}

}  // namespace
}  // namespace oomh
