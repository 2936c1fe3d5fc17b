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

TEST(Terminal, PlainProgressPrintsJobStartAttemptEndAndJobEnd) {
  std::ostringstream out;
  {
    ProgressView view(out, TerminalStyle{false, false, 80}, {"s::a", "s::b"});
    JobProgress p;
    p.job = "s::a";
    p.state = JobProgress::State::running;
    for (int i = 0; i < 5; ++i) {
      p.step = i;
      view.on_progress(p);  // only the first prints
    }
    p.attempt = 1;
    p.state = JobProgress::State::restarting;  // the runner names the next attempt while restarting
    view.on_progress(p);
    p.state = JobProgress::State::running;
    view.on_progress(p);
    p.attempt = 2;  // when done, the runner counts attempts instead of naming one: no third attempt
    p.state = JobProgress::State::done;
    view.on_progress(p);
    view.on_job_done(0);
  }
  std::string text = out.str();
  EXPECT_EQ(text,
            "start  s::a\n"
            "       s::a: attempt 1 ended after step 4, attempt 2 starts\n"
            "done   s::a  (2 attempts, 0ms)\n");
  EXPECT_EQ(text.find('\033'), std::string::npos);  // no escapes outside a terminal
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
            "demo::absorbed  INCONCLUSIVE  -               1         -         2.5s\n"
            "    -> faults were absorbed\n"
            "\n"
            "==== 1 failed, 1 passed, 1 inconclusive in 12.3s ====\n");
  std::string colored = summary_table(run, true);
  EXPECT_NE(colored.find("\033[31mFAILED"), std::string::npos);
}

}  // namespace
}  // namespace oomh
