// Markdown: escaping in tables and fences, and the size limit of Note [Markdown size].

#include <algorithm>

#include <gtest/gtest.h>

#include "oomharness/reports/writers.h"
#include "support.h"

namespace oomh {
namespace {

RunResult many_jobs(int passing, int failing) {
  RunResult run;
  run.suites.push_back({"big", "big.yaml", 0, 0, {}});
  for (int i = 0; i < passing + failing; ++i) {
    JobResult job;
    const bool fails = i >= passing;  // failures last: truncation must still keep them
    job.name = (fails ? "failing-" : "passing-") + std::to_string(i);
    job.status = fails ? JobStatus::failed : JobStatus::passed;
    job.message = fails ? "no halving after the OOM at step 3" : "";
    AttemptResult a;
    a.outcome = AttemptOutcome::ok;
    a.output_tail = std::string(300, 'x') + "\n";
    job.attempts.push_back(a);
    run.suites[0].jobs.push_back(job);
  }
  return run;
}

TEST(Markdown, CutToMaxBytesKeepingFailuresFirst) {
  const RunResult run = many_jobs(3000, 5);
  const std::string full = render_markdown(run, size_t{1} << 30);
  EXPECT_EQ(full.find("truncated"), std::string::npos);
  const size_t limit = 64 * 1024;
  ASSERT_GT(full.size(), limit);
  const std::string md = render_markdown(run, limit);
  EXPECT_LE(md.size(), limit);
  for (int i = 3000; i < 3005; ++i) EXPECT_NE(md.find("failing-" + std::to_string(i)), std::string::npos);
  const size_t rows = static_cast<size_t>(std::count(md.begin(), md.end(), '\n'));
  const size_t note = md.find("(truncated: ");
  ASSERT_NE(note, std::string::npos);
  const int more = std::stoi(md.substr(note + 12));
  EXPECT_GT(more, 0);
  // Every job is either in the table or counted in the note.
  size_t shown = 0;
  for (size_t p = 0; (p = md.find("| big |", p)) != std::string::npos; ++p) ++shown;
  EXPECT_EQ(static_cast<int>(shown) + more, 3005) << rows;
}

TEST(Markdown, DefaultLimitIsOneMiB) {
  const std::string md = render_markdown(many_jobs(20000, 1));
  EXPECT_LE(md.size(), size_t{1} << 20);
  EXPECT_NE(md.find("(truncated: "), std::string::npos);
}

TEST(Markdown, TinyLimitStillSaysItWasCut) {
  const std::string md = render_markdown(many_jobs(10, 1), 60);
  EXPECT_LE(md.size(), 60u);
  EXPECT_NE(md.find("truncated"), std::string::npos);
}

TEST(Markdown, EscapesTableCellsAndFencesOutput) {
  RunResult run;
  run.suites.push_back({"s", "s.yaml", 0, 0, {}});
  JobResult job;
  job.name = "a|b`c";
  job.status = JobStatus::failed;
  job.message = "bad";
  AttemptResult a;
  a.outcome = AttemptOutcome::oom;
  a.output_tail = "before\n````\nafter\n";
  job.attempts.push_back(a);
  run.suites[0].jobs.push_back(job);
  const std::string md = render_markdown(run);
  EXPECT_NE(md.find("| a\\|b\\`c |"), std::string::npos) << md;
  EXPECT_NE(md.find("`````text\nbefore\n````\nafter\n`````\n"), std::string::npos) << md;
}

// A broken trainer kept to show a check catches it: its expected failure is not what the details list as
// the problem; the must-fail check that passed is.
TEST(Markdown, MustFailChecksAreListedByWhatWentAgainstTheSuite) {
  RunResult run;
  run.suites.push_back({"self-test", "self-test.yaml", 0, 0, {}});
  JobResult job;
  job.name = "broken-leak";
  job.status = JobStatus::failed;
  job.message = "peak_below must fail for this job (must_fail: true) but passed";
  Verdict caught{"memory_stable", nlohmann::json::object(), VerdictStatus::fail, "held memory grew by 8.00 MiB per step", {}, true};
  Verdict missed{"peak_below", nlohmann::json::object(), VerdictStatus::pass, "peak 700 MiB stayed below 1 GiB", {}, true};
  job.verdicts = {caught, missed};
  run.suites[0].jobs.push_back(job);
  const std::string md = render_markdown(run);
  EXPECT_NE(md.find("- **peak\\_below** xpass (must_fail: expected to fail): peak 700 MiB stayed below 1 GiB"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("**memory\\_stable**"), std::string::npos) << md;
  EXPECT_NE(md.find("| broken-leak | self-test | XPASS | memory\\_stable: xfail, peak\\_below: xpass |"), std::string::npos) << md;
}

// Note [Expected failures]: the table says XFAIL for a must_fail check that failed as expected, XPASS for one
// that passed; the heading counts them apart, as pytest does.
TEST(Markdown, ExpectedFailuresReadXfailAndXpass) {
  const std::string md = render_markdown(test::load_fixture("run.json"));
  EXPECT_NE(md.find("| leak-caught | expectations | XFAIL | memory\\_stable: xfail |"), std::string::npos) << md;
  EXPECT_NE(md.find("| leak-missed | expectations | XPASS | memory\\_stable: xpass |"), std::string::npos) << md;
  EXPECT_NE(md.find("<details><summary><b>leak-missed</b> (expectations): XPASS &mdash; memory_stable must fail"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("| leak-caught | expectations | passed"), std::string::npos) << md;
}

// A run in which no job passed or failed showed nothing: its heading says so and is never green.
TEST(Markdown, HeadingSaysNothingWasTestedAndIsNeverGreenThen) {
  RunResult run;
  run.duration = 3;
  run.suites.push_back({"s", "s.yaml", 0, 3, {}});
  JobResult job;
  job.name = "absorbed";
  job.status = JobStatus::inconclusive;
  job.message = "no OOM reached the training code: 2 injected faults were absorbed";
  JobResult skipped = job;
  skipped.name = "needs-two-gpus";
  skipped.status = JobStatus::skipped;
  run.suites[0].jobs = {job, job, skipped};
  const std::string md = render_markdown(run);
  EXPECT_EQ(md.rfind("## &#x26A0;&#xFE0F; oomharness: nothing was tested: 2 inconclusive, 1 skipped (3 jobs, 3.0s)\n", 0), 0u)
      << md.substr(0, 200);
  EXPECT_EQ(md.find("&#x2705;"), std::string::npos) << md;
  EXPECT_EQ(render_markdown(RunResult{}).rfind("## &#x26A0;&#xFE0F; oomharness: nothing was tested: no job ran (0 jobs", 0), 0u);
  run.suites[0].jobs[0].status = JobStatus::passed;  // one job showed something: green again
  run.suites[0].jobs[0].target_step = 10;
  EXPECT_EQ(render_markdown(run).rfind("## &#x2705; oomharness: 1 passed, 1 inconclusive, 1 skipped", 0), 0u);
}

TEST(Markdown, AttemptsAreNumberedFromOne) {
  const std::string md = render_markdown(test::load_fixture("run.json"));
  EXPECT_NE(md.find("  - attempt 2, 6.90s: loaded checkpoint step 0"), std::string::npos) << md;
  EXPECT_NE(md.find("Output of attempt 2 (ok), last lines:"), std::string::npos) << md;
  EXPECT_EQ(md.find("attempt 0"), std::string::npos) << md;
}

TEST(Markdown, HeadingHasCounts) {
  const std::string md = render_markdown(test::load_fixture("run.json"));
  EXPECT_EQ(md.rfind("## &#x274C; oomharness: 2 failed, 1 xpassed, 1 error, 1 passed, 1 xfailed, 1 inconclusive, "
                     "1 skipped (8 jobs, 28.0s)\n",
                     0),
            0u)
      << md.substr(0, 200);
  EXPECT_NE(md.find("<details><summary><b>resume-broken</b>"), std::string::npos);
  EXPECT_NE(md.find("> **device simulated (CPU driver double): these results show the harness, not a GPU.**"), std::string::npos);
}

TEST(Markdown, HostileStringsAreEscaped) {
  const std::string md = render_markdown(test::load_fixture("hostile.json"));
  // Outside code fences nothing may be raw HTML that a renderer would keep.
  std::string outside;
  bool in_fence = false;
  size_t pos = 0;
  while (pos < md.size()) {
    size_t end = md.find('\n', pos);
    if (end == std::string::npos) end = md.size();
    const std::string line = md.substr(pos, end - pos);
    if (line.rfind("```", 0) == 0) in_fence = !in_fence;
    else if (!in_fence) outside += line + "\n";
    pos = end + 1;
  }
  EXPECT_EQ(outside.find("<script"), std::string::npos) << outside;
  EXPECT_EQ(outside.find("<img"), std::string::npos) << outside;
}

}  // namespace
}  // namespace oomh
