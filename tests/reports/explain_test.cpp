// Findings and breakdowns in every report (docs/diagnosis.md): the JUnit failure message and an XFAIL's
// system-out, the Markdown details, the HTML bar chart (escaped), the results file round trip, and
// `oomharness explain`'s text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oomharness/reports/explain.h"
#include "oomharness/reports/writers.h"
#include "support.h"

namespace oomh {
namespace {

constexpr int64_t MiB = 1024 * 1024;

nlohmann::json a_breakdown() {
  return {{"at", "oom"}, {"step", 1}, {"phase", "forward"}, {"batch_size", 64}, {"allocated", 100 * MiB},
          {"reserved", 120 * MiB}, {"total", 128 * MiB}, {"parameters", 10 * MiB}, {"gradients", 10 * MiB},
          {"optimizer_state", 20 * MiB}, {"workspace", 0}, {"other", 60 * MiB}, {"cached_free", 20 * MiB},
          {"exact", true}, {"attempt", 0}, {"t", 1.5},
          {"top", {{{"bytes", 32 * MiB}, {"shape", "64x128x1024"}, {"dtype", "float32"}, {"site", "train.py:79 <b>"}}}}};
}

// run.json with a finding and a breakdown on its first failed job.
RunResult with_findings() {
  RunResult run = test::load_fixture("run.json");
  for (SuiteResult& suite : run.suites)
    for (JobResult& job : suite.jobs)
      if (job.status == JobStatus::failed && !job.unexpected_pass()) {
        job.findings.push_back({"kept_with_graph", "tensors made at train.py:79 stay alive <script>", "train.py:79", 0, 2.0, {}});
        job.breakdowns = nlohmann::json::array({a_breakdown()});
        return run;
      }
  return run;
}

const JobResult* job_with_findings(const RunResult& run) {
  for (const SuiteResult& suite : run.suites)
    for (const JobResult& job : suite.jobs)
      if (!job.findings.empty()) return &job;
  return nullptr;
}

TEST(Explain, FixtureHasAFailedJob) { ASSERT_NE(job_with_findings(with_findings()), nullptr); }

TEST(Explain, BreakdownSentenceAddsThePartsUp) {
  EXPECT_EQ(breakdown_sentence(a_breakdown()),
            "at the OOM in step 1 (forward, batch 64), attempt 1: 100.00 MiB allocated = parameters 10.00 MiB + "
            "gradients 10.00 MiB + optimizer state 20.00 MiB + workspaces 0 B + other live tensors 60.00 MiB; "
            "cached but free 20.00 MiB (of 128.00 MiB)");
  nlohmann::json gpu = a_breakdown();
  gpu["exact"] = false;
  EXPECT_NE(breakdown_sentence(gpu).find("allocated ~ parameters"), std::string::npos);
  EXPECT_EQ(largest_tensor_lines(a_breakdown()), std::vector<std::string>{"64x128x1024 float32, 32.00 MiB, made at train.py:79 <b>"});
}

// Issue 14: the breakdown after the loop, a GPU's (memory_stats() beside it, blocks from the memory
// history without shape), and memory_summary() folded under the OOM's bar in the HTML, escaped.
TEST(Explain, AfterTheLoopAndOnAGpu) {
  nlohmann::json after = a_breakdown();
  after["at"] = "after_loop";
  after["inputs"] = 4 * MiB;
  EXPECT_EQ(breakdown_sentence(after).rfind("after the loop, as an evaluation began in step 1 (forward, batch 64), attempt 1: ", 0), 0u)
      << breakdown_sentence(after);
  EXPECT_NE(breakdown_sentence(after).find("; its inputs 4.00 MiB of the other live tensors"), std::string::npos);
  nlohmann::json gpu = a_breakdown();
  gpu["exact"] = false;
  gpu["stats_allocated"] = 100 * MiB;
  gpu["top"] = {{{"bytes", 32 * MiB}, {"shape", ""}, {"dtype", ""}, {"site", "train.py:79"}}};
  EXPECT_NE(breakdown_sentence(gpu).find("; torch.cuda.memory_stats() said 100.00 MiB allocated"), std::string::npos);
  EXPECT_EQ(largest_tensor_lines(gpu), std::vector<std::string>{"a block, 32.00 MiB, made at train.py:79"});
  RunResult run = with_findings();
  for (SuiteResult& suite : run.suites)
    for (JobResult& job : suite.jobs)
      if (!job.findings.empty()) job.breakdowns[0]["summary"] = "|  Allocated memory <i>  |";
  std::string html = render_html(run);
  EXPECT_NE(html.find("<details><summary>torch.cuda.memory_summary()</summary><pre>|  Allocated memory &lt;i&gt;  |</pre></details>"),
            std::string::npos);
}

TEST(Explain, EveryReportSaysTheFinding) {
  RunResult run = with_findings();
  const std::string line = "finding (kept_with_graph): tensors made at train.py:79 stay alive";
  std::string junit = render_junit(run);
  EXPECT_NE(junit.find(line + " &lt;script&gt;"), std::string::npos) << junit;
  std::string md = render_markdown(run);  // Markdown escapes _ and <
  EXPECT_NE(md.find("finding (kept\\_with\\_graph): tensors made at train.py:79 stay alive &lt;script&gt;"), std::string::npos) << md;
  std::string html = render_html(run);
  EXPECT_NE(html.find("What held the memory"), std::string::npos);
  EXPECT_NE(html.find("class=\"breakdown\""), std::string::npos);
  EXPECT_NE(html.find("train.py:79 &lt;b&gt;"), std::string::npos);
  EXPECT_NE(html.find("stay alive &lt;script&gt;"), std::string::npos);
  EXPECT_EQ(html.find("stay alive <script>"), std::string::npos);  // the report's own script tag aside
  std::string text = explain_job("s", *job_with_findings(run));
  EXPECT_NE(text.find("  " + line), std::string::npos) << text;
  EXPECT_NE(text.find("  at the OOM in step 1"), std::string::npos) << text;
  EXPECT_NE(text.find("    64x128x1024 float32"), std::string::npos) << text;
}

TEST(Explain, RoundTripsThroughTheResultsFile) {
  RunResult run = with_findings();
  auto back = parse_results(render_json(run), "run.json");
  ASSERT_TRUE(back) << back.error();
  const JobResult* job = job_with_findings(back.value());
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->findings[0].site, "train.py:79");
  EXPECT_EQ(job->breakdowns.size(), 1u);
  EXPECT_EQ(job->breakdowns[0]["other"], 60 * MiB);
}

TEST(Explain, AJobWithoutFindingsSaysSo) {
  RunResult run = test::load_fixture("run.json");
  std::string text = explain_job("s", run.suites[0].jobs[0]);
  EXPECT_NE(text.find("no finding"), std::string::npos) << text;
  // And the reports are unchanged: the goldens (golden_test) hold without findings.
}

}  // namespace
}  // namespace oomh
