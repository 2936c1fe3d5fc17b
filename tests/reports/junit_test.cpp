// JUnit XML: the counts readers take from the attributes, the status mapping, and text XML 1.0 accepts.

#include <gtest/gtest.h>

#include "oomharness/reports/writers.h"
#include "support.h"

namespace oomh {
namespace {

TEST(JUnit, SuiteCountsFollowTheStatusMapping) {
  const std::string xml = render_junit(test::load_fixture("run.json"));
  EXPECT_NE(xml.find("<testsuites name=\"oomharness\" tests=\"6\" failures=\"2\" errors=\"1\" skipped=\"2\""), std::string::npos);
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
