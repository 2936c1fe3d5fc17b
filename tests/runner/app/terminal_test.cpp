// Terminal output: progress lines, plain-mode progress, the summary table.

#include <gtest/gtest.h>

#include <sstream>

#include "oomharness/runner/terminal.h"

namespace oomh {
namespace {

TEST(Terminal, ProgressLine) {
  JobProgress p;
  p.job = "demo::halving";
  p.attempt = 1;
  p.step = 14;
  p.held = 3ull << 29;
  p.cap = 2ull << 30;
  p.faults = 3;
  p.elapsed = 12.34;
  p.state = JobProgress::State::running;
  EXPECT_EQ(progress_line("demo::halving", p), "running  demo::halving  attempt 2  step 14  1.50 GiB / 2.00 GiB  3 faults  12.3s");
}

TEST(Terminal, ProgressLineOfTheReferenceRun) {
  JobProgress p;
  p.attempt = 2;  // the attempts, all ended
  p.reference = true;
  p.step = 3;
  p.state = JobProgress::State::running;
  EXPECT_EQ(progress_line("demo::resume", p), "running  demo::resume  reference run  step 3  0 B  0 faults  0ms");
}

TEST(Terminal, PlainProgressPrintsJobStartAttemptEndAndJobEnd) {
  std::ostringstream out;
  {
    ProgressView view(out, TerminalStyle{false, false, 80}, {"s::a", "s::b"});
    JobProgress p;
    p.job = "s::a";
    p.state = JobProgress::State::running;
    for (int i = 0; i < 3; ++i) {
      p.step = i;
      view.on_progress(p);  // only the first prints
    }
    // The last sample saw step 2 begin; the trace shows that the attempt completed step 5 before it died.
    // The line says what results.json's last_step says.
    p.attempt = 1;
    p.last_step = 5;
    p.state = JobProgress::State::restarting;  // the runner names the next attempt while restarting
    view.on_progress(p);
    p.state = JobProgress::State::running;
    p.last_step = -1;
    view.on_progress(p);
    p.attempt = 2;  // when done, the runner counts attempts instead of naming one: no third attempt
    p.state = JobProgress::State::done;
    view.on_progress(p);
    view.on_job_done(0);
  }
  std::string text = out.str();
  EXPECT_EQ(text,
            "start  s::a\n"
            "       s::a: attempt 1 ended after step 5, attempt 2 starts\n"
            "done   s::a  (2 attempts, 0ms)\n");
  EXPECT_EQ(text.find('\033'), std::string::npos);  // no escapes outside a terminal
}

// The reference run (checkpoint_resume's `reference`) is not an attempt: the job's count stays what
// results.json lists, and the reference run is named as such.
TEST(Terminal, ReferenceRunIsNotCountedAsAnAttempt) {
  std::ostringstream out;
  {
    ProgressView view(out, TerminalStyle{false, false, 80}, {"s::resume"});
    JobProgress p;
    p.job = "s::resume";
    p.state = JobProgress::State::running;
    p.step = 6;
    view.on_progress(p);
    p.attempt = 1;
    p.last_step = 5;
    p.state = JobProgress::State::restarting;
    view.on_progress(p);
    p.state = JobProgress::State::running;
    view.on_progress(p);
    // The reference run starts after the last attempt: the runner counts the attempts (2) and says so.
    p.attempt = 2;
    p.reference = true;
    p.last_step = 12;
    view.on_progress(p);
    p.step = 4;
    view.on_progress(p);  // prints nothing more
    p.reference = false;
    p.state = JobProgress::State::done;
    view.on_progress(p);
    view.on_job_done(0);
  }
  EXPECT_EQ(out.str(),
            "start  s::resume\n"
            "       s::resume: attempt 1 ended after step 5, attempt 2 starts\n"
            "       s::resume: attempt 2 ended after step 12, the reference run (no faults) starts\n"
            "done   s::resume  (2 attempts + reference run, 0ms)\n");
}

// Issue 44: a right-to-left override (U+202E) in a job's name reached the terminal raw in the start and
// done lines, the live line and the heartbeat (Note [Text for a terminal]).
TEST(Terminal, NamesInProgressLinesAreEscaped) {
  const std::string name = "s::a\u202Eb";
  for (bool live : {false, true}) {
    std::ostringstream out;
    {
      ProgressView view(out, TerminalStyle{live, false, 80}, {name});
      JobProgress p;
      p.job = name;
      p.state = JobProgress::State::running;
      view.on_progress(p);
      view.on_job_done(0);
    }
    const std::string text = out.str();
    EXPECT_EQ(text.find("\u202E"), std::string::npos) << text;
    EXPECT_NE(text.find("s::a\\u{202E}b"), std::string::npos) << text;
  }
  JobProgress p;
  EXPECT_EQ(heartbeat_line("12:00:00", 0, 1, {{name, p}}).find("\u202E"), std::string::npos);
}

TEST(Terminal, LiveProgressRedrawsInPlace) {
  std::ostringstream out;
  ProgressView view(out, TerminalStyle{true, false, 80}, {"s::a"});
  JobProgress p;
  p.job = "s::a";
  p.state = JobProgress::State::running;
  view.on_progress(p);
  view.on_job_done(0);
  view.finish();
  std::string text = out.str();
  EXPECT_NE(text.find("\033[2Krunning  s::a  attempt 1"), std::string::npos);
  EXPECT_NE(text.find("\033[1F\033[J"), std::string::npos);  // the live line is cleared before "done"
  EXPECT_NE(text.find("done   s::a"), std::string::npos);
}

// A command's own progress (a sweep's "site 3 of 7 ... 4 left") is printed under -q too, above the live lines.
TEST(Terminal, SayPrintsUnderQuietAboveTheLiveLines) {
  std::ostringstream out;
  TerminalStyle style{true, false, 80};
  style.verbosity = -1;
  ProgressView view(out, style, {"s::a"});
  JobProgress p;
  p.job = "s::a";
  p.state = JobProgress::State::running;
  view.on_progress(p);
  view.say("sweep: site 1 of 2 (transient): recovered; 1 of 2 runs done, 1 left, 1.0s so far");
  view.finish();
  const std::string text = out.str();
  const size_t cleared = text.find("\033[1F\033[J"), said = text.find("sweep: site 1 of 2");
  ASSERT_NE(said, std::string::npos) << text;
  EXPECT_LT(cleared, said) << "the live line is cleared before the line is said";
  EXPECT_NE(text.find("\033[2Krunning  s::a", said), std::string::npos) << "and drawn again after it";
}

TEST(Terminal, SummaryTable) {
  RunResult run;
  run.duration = 12.3;
  SuiteResult s;
  s.name = "demo";
  JobResult pass;
  pass.name = "halving";
  pass.status = JobStatus::passed;
  pass.attempts.resize(1);
  pass.duration = 2.5;
  pass.peak[0] = 1ull << 30;
  pass.target_step = 12;
  Verdict v;
  v.status = VerdictStatus::pass;
  pass.verdicts = {v, v};
  JobResult fail = pass;
  fail.name = "retry";
  fail.status = JobStatus::failed;
  fail.attempts.resize(3);
  fail.verdicts[1].status = VerdictStatus::fail;
  fail.message = "OOM at step 5 (batch 64) was caught, but step 6 ran at batch 64 again: no halving";
  JobResult inc = pass;
  inc.name = "absorbed";
  inc.status = JobStatus::inconclusive;
  inc.verdicts = {};
  inc.peak.clear();
  inc.message = "faults were absorbed";
  s.jobs = {pass, fail, inc};
  run.suites.push_back(s);
  std::string table = summary_table(run, false);
  EXPECT_EQ(table,
            "job             status        verdicts        attempts  peak      time\n"
            "--------------  ------------  --------------  --------  --------  ----\n"
            "demo::halving   PASSED        2 pass          1         1.00 GiB  2.5s\n"
            "demo::retry     FAILED        1 pass, 1 fail  3         1.00 GiB  2.5s\n"
            "    -> OOM at step 5 (batch 64) was caught, but step 6 ran at batch 64 again: no halving\n"
            // Note [Step numbering]: lines that name a step say once which numbering they use.
            "    (steps counted from 1: the first training step is step 1; step_base: 0 counts from 0)\n"
            "demo::absorbed  INCONCLUSIVE  -               1         -         2.5s\n"
            "    -> faults were absorbed\n"
            "\n"
            "==== 1 failed, 1 passed, 1 inconclusive in 12.3s ====\n");
  std::string colored = summary_table(run, true);
  EXPECT_NE(colored.find("\033[31mFAILED"), std::string::npos);
  // Note [A pass that did not check completion] (reports/src/result.cpp): a pass with no target step says so.
  run.suites[0].jobs[0].target_step.reset();
  EXPECT_NE(summary_table(run, false).find("==== 1 failed, 1 passed (no target step: completion not checked), 1 inconclusive in 12.3s ===="),
            std::string::npos)
      << summary_table(run, false);
}

Verdict verdict(const char* policy, VerdictStatus status, const char* reason, bool must_fail = false) {
  return Verdict{policy, nlohmann::json::object(), status, reason, {}, must_fail};
}

// Note [Expected failures]: a must_fail check that failed as expected reads XFAIL, one that passed XPASS.
TEST(Terminal, SummaryTableShowsExpectedFailuresAndUnexpectedPasses) {
  RunResult run;
  run.duration = 4;
  SuiteResult s;
  s.name = "demo";
  JobResult xfail;
  xfail.name = "broken-leak";
  xfail.status = JobStatus::passed;
  xfail.attempts.resize(1);
  xfail.duration = 1;
  xfail.verdicts = {verdict("exit", VerdictStatus::pass, "exited 0"),
                    verdict("memory_stable", VerdictStatus::fail, "held memory grew by 8.00 MiB per step", true)};
  JobResult xpass = xfail;
  xpass.name = "broken-but-missed";
  xpass.status = JobStatus::failed;
  xpass.verdicts[1] = verdict("memory_stable", VerdictStatus::pass, "held memory stayed at 1.00 GiB", true);
  xpass.message = "memory_stable must fail for this job (must_fail: true) but passed";
  xpass.attempts[0].output_tail = "done\n";
  s.jobs = {xfail, xpass};
  run.suites.push_back(s);
  EXPECT_EQ(summary_table(run, false),
            "job                      status  verdicts         attempts  peak  time\n"
            "-----------------------  ------  ---------------  --------  ----  ----\n"
            "demo::broken-leak        XFAIL   1 pass, 1 xfail  1         -     1.0s\n"
            "    -> expected failure: memory_stable failed as expected (must_fail): held memory grew by 8.00 MiB per step\n"
            "demo::broken-but-missed  XPASS   1 pass, 1 xpass  1         -     1.0s\n"
            "    -> memory_stable must fail for this job (must_fail: true) but passed\n"
            "\n"
            "==== 1 xpassed, 1 xfailed in 4.0s ====\n");
}

TEST(Terminal, ClosingLineSaysNothingWasTestedAndIsNotGreenThen) {
  RunResult run;
  run.duration = 1;
  SuiteResult s;
  s.name = "demo";
  JobResult job;
  job.name = "absorbed";
  job.status = JobStatus::inconclusive;
  job.message = "no OOM reached the training code";
  s.jobs = {job, job};
  run.suites.push_back(s);
  const std::string table = summary_table(run, false);
  EXPECT_NE(table.find("\n==== nothing was tested: 2 inconclusive in 1.0s ====\n"), std::string::npos) << table;
  const std::string colored = summary_table(run, true);
  EXPECT_NE(colored.find("\033[33m==== nothing was tested"), std::string::npos) << colored;
  EXPECT_EQ(colored.find("\033[32m"), std::string::npos) << colored;
  EXPECT_NE(summary_table(RunResult{}, false).find("==== nothing was tested: no job ran in 0ms ===="), std::string::npos);
}

// A failed or erred job shows the end of its last attempt's output under it, so that a CI log says why.
TEST(Terminal, FailedAndErredJobsShowTheirLastOutputLines) {
  RunResult run;
  SuiteResult s;
  s.name = "demo";
  JobResult crashed;
  crashed.name = "crashed";
  crashed.status = JobStatus::error;
  crashed.message = "attempt 1 exited with code 1 before training began";
  crashed.attempts.resize(2);
  crashed.attempts[0].output_tail = "the first attempt's output\n";
  crashed.attempts[1].index = 1;
  crashed.attempts[1].outcome = AttemptOutcome::nonzero;
  for (int i = 1; i <= 12; ++i) crashed.attempts[1].output_tail += "line " + std::to_string(i) + "\n";
  crashed.attempts[1].output_tail += "\033[31mModuleNotFoundError: No module named 'torch'\033[0m\n";
  JobResult failed = crashed;
  failed.name = "failed";
  failed.status = JobStatus::failed;
  failed.message = "no halving";
  JobResult passed = crashed;
  passed.name = "passed";
  passed.status = JobStatus::passed;
  passed.message.clear();
  s.jobs = {crashed, failed, passed};
  run.suites.push_back(s);
  const std::string table = summary_table(run, false);
  const std::string expected_under =
      "    output of attempt 2 (nonzero), last lines:\n"
      "    | line 4\n    | line 5\n    | line 6\n    | line 7\n    | line 8\n    | line 9\n    | line 10\n"
      "    | line 11\n    | line 12\n"
      "    | ModuleNotFoundError: No module named 'torch'\n";
  EXPECT_NE(table.find("    -> attempt 1 exited with code 1 before training began\n" + expected_under), std::string::npos)
      << table;
  EXPECT_NE(table.find("    -> no halving\n" + expected_under), std::string::npos) << table;
  EXPECT_EQ(table.find("line 3\n"), std::string::npos) << table;                   // ten lines, no more
  EXPECT_EQ(table.find("the first attempt's output"), std::string::npos) << table;  // the last attempt's
  EXPECT_EQ(table.find('\033'), std::string::npos) << table;                       // the job's colours dropped
  const size_t passed_row = table.find("demo::passed");
  ASSERT_NE(passed_row, std::string::npos);
  EXPECT_EQ(table.find("    |", passed_row), std::string::npos) << table;  // a passing job shows none
}

TEST(Terminal, GithubErrorAnnotationEscapesAsTheRunnerExpects) {
  EXPECT_EQ(github_error_annotation("suites/a,b.yaml", 12, "demo::halving failed", "50% done\nnext: line"),
            "::error file=suites/a%2Cb.yaml,line=12,title=demo%3A%3Ahalving failed::50%25 done%0Anext: line");
  EXPECT_EQ(github_error_annotation("", 0, "", "no file"), "::error::no file");
}

TEST(Terminal, HeartbeatLineNamesTheRunningJobs) {
  JobProgress a;
  a.elapsed = 41.2;
  a.step = 14;
  JobProgress b;
  b.elapsed = 3;
  EXPECT_EQ(heartbeat_line("12:03:04", 3, 10, {{"demo::halving", a}, {"demo::leak", b}}),
            "[12:03:04] 3/10 done, running: demo::halving (41.2s, step 14), demo::leak (3.0s)");
  EXPECT_EQ(heartbeat_line("12:03:04", 0, 2, {}), "[12:03:04] 0/2 done");
}

}  // namespace
}  // namespace oomh
