// Comparing runs: improvement, regression, new and removed jobs, and each --fail-on threshold.

#include <gtest/gtest.h>

#include "oomharness/reports/writers.h"

namespace oomh {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

JobResult job(const std::string& name, JobStatus status, uint64_t peak, int visible = 1,
              std::optional<double> recovery = std::nullopt) {
  JobResult j;
  j.name = name;
  j.status = status;
  j.peak[0] = peak;
  j.recovery_seconds = recovery;
  Verdict v;
  v.policy = "batch_halving";
  v.status = status == JobStatus::passed ? VerdictStatus::pass : VerdictStatus::fail;
  j.verdicts.push_back(v);
  for (int i = 0; i < 3; ++i) {
    FaultRecord f;
    f.visible = i < visible;
    j.faults.push_back(f);
  }
  return j;
}

RunResult run_of(std::vector<JobResult> jobs) {
  RunResult r;
  r.suites.push_back({"s", "s.yaml", 0, 0, std::move(jobs)});
  return r;
}

std::vector<CompareRule> rules(std::initializer_list<const char*> texts) {
  std::vector<CompareRule> out;
  for (const char* t : texts) {
    auto r = parse_fail_on(t);
    EXPECT_TRUE(r) << r.error();
    if (r) out.push_back(r.value());
  }
  return out;
}

TEST(Compare, ImprovementIsNotARegression) {
  const auto c = compare(run_of({job("a", JobStatus::failed, 2 * kGiB)}), run_of({job("a", JobStatus::passed, kGiB)}),
                         rules({"verdict", "peak:+0%", "removed"}));
  ASSERT_EQ(c.jobs.size(), 1u);
  EXPECT_FALSE(c.regressed());
  ASSERT_EQ(c.jobs[0].verdict_changes.size(), 1u);
  EXPECT_EQ(c.jobs[0].verdict_changes[0].base, VerdictStatus::fail);
  EXPECT_EQ(c.jobs[0].verdict_changes[0].now, VerdictStatus::pass);
}

TEST(Compare, PassedToFailedIsAVerdictRegression) {
  const auto c = compare(run_of({job("a", JobStatus::passed, kGiB)}), run_of({job("a", JobStatus::failed, kGiB)}),
                         rules({"verdict"}));
  EXPECT_TRUE(c.regressed());
  ASSERT_EQ(c.jobs[0].regressions.size(), 1u);
  EXPECT_EQ(c.jobs[0].regressions[0], "passed before, failed now");
  EXPECT_FALSE(compare(run_of({job("a", JobStatus::passed, kGiB)}), run_of({job("a", JobStatus::failed, kGiB)}), {})
                   .regressed());
}

TEST(Compare, VerdictPassToFailInAJobThatStillFailsIsARegression) {
  JobResult base = job("a", JobStatus::failed, kGiB);
  Verdict peak;
  peak.policy = "peak_below";
  peak.status = VerdictStatus::pass;
  base.verdicts.push_back(peak);
  JobResult now = base;
  now.verdicts[1].status = VerdictStatus::fail;
  const auto c = compare(run_of({base}), run_of({now}), rules({"verdict"}));
  EXPECT_TRUE(c.regressed());
  EXPECT_EQ(c.jobs[0].regressions[0], "verdict peak_below went pass -> fail");
}

TEST(Compare, NewAndRemovedJobs) {
  const auto c = compare(run_of({job("old", JobStatus::passed, kGiB)}), run_of({job("fresh", JobStatus::passed, kGiB)}),
                         rules({"verdict", "peak:+0%"}));
  ASSERT_EQ(c.jobs.size(), 2u);
  EXPECT_TRUE(c.jobs[0].removed());
  EXPECT_TRUE(c.jobs[1].added());
  EXPECT_FALSE(c.regressed()) << "only the `removed` rule flags a missing job";
  const auto strict = compare(run_of({job("old", JobStatus::passed, kGiB)}), run_of({}), rules({"removed"}));
  EXPECT_TRUE(strict.regressed());
  const std::string text = render_comparison_text(c);
  EXPECT_NE(text.find("removed"), std::string::npos);
  EXPECT_NE(text.find("new: passed"), std::string::npos);
}

TEST(Compare, PeakThresholds) {
  const RunResult base = run_of({job("a", JobStatus::passed, 1000 * kGiB / 1000)});
  const RunResult now = run_of({job("a", JobStatus::passed, kGiB + kGiB / 10)});  // +10%
  EXPECT_TRUE(compare(base, now, rules({"peak:+5%"})).regressed());
  EXPECT_FALSE(compare(base, now, rules({"peak:+20%"})).regressed());
  EXPECT_TRUE(compare(base, now, rules({"peak:+64MiB"})).regressed());
  EXPECT_FALSE(compare(base, now, rules({"peak:+512MiB"})).regressed());
  EXPECT_TRUE(compare(base, now, rules({"peak"})).regressed());
  EXPECT_FALSE(compare(now, base, rules({"peak"})).regressed()) << "a smaller peak is an improvement";
  const auto c = compare(base, now, rules({"peak:+5%"}));
  EXPECT_NE(c.jobs[0].regressions[0].find("peak grew +10.0%"), std::string::npos) << c.jobs[0].regressions[0];
}

TEST(Compare, RecoveryAndVisibleFaults) {
  const RunResult base = run_of({job("a", JobStatus::passed, kGiB, 2, 1.0)});
  const RunResult now = run_of({job("a", JobStatus::passed, kGiB, 1, 1.5)});
  EXPECT_TRUE(compare(base, now, rules({"recovery:+20%"})).regressed());
  EXPECT_FALSE(compare(base, now, rules({"recovery:+60%"})).regressed());
  EXPECT_TRUE(compare(base, now, rules({"recovery:+250ms"})).regressed());
  EXPECT_FALSE(compare(base, now, rules({"recovery:+1s"})).regressed());
  EXPECT_TRUE(compare(base, now, rules({"faults_visible"})).regressed());
  EXPECT_TRUE(compare(base, now, rules({"faults_visible:-0"})).regressed());
  EXPECT_FALSE(compare(base, now, rules({"faults_visible:-1"})).regressed());
  EXPECT_FALSE(compare(now, base, rules({"faults_visible"})).regressed());
  // No recovery on one side: not compared.
  EXPECT_FALSE(compare(run_of({job("a", JobStatus::passed, kGiB)}), now, rules({"recovery"})).regressed());
}

RunResult suites_of(std::vector<std::pair<std::string, std::vector<JobResult>>> suites) {
  RunResult r;
  for (auto& [name, jobs] : suites) r.suites.push_back({name, name + ".yaml", 0, 0, std::move(jobs)});
  return r;
}

// Issue 44: a suite renamed between the runs made a job that passed before and fails now "1 removed + 1 new",
// exit 0. Its jobs are paired across the rename.
TEST(Compare, ARegressionDoesNotHideBehindARenamedSuite) {
  const RunResult base = suites_of({{"old", {job("train", JobStatus::passed, kGiB)}}});
  const RunResult now = suites_of({{"new", {job("train", JobStatus::failed, kGiB)}}});
  const auto c = compare(base, now, rules({"verdict"}));
  ASSERT_EQ(c.jobs.size(), 1u);
  EXPECT_TRUE(c.regressed());
  EXPECT_EQ(c.jobs[0].full_name(), "new::train");
  EXPECT_EQ(c.jobs[0].renamed_from, "old");
  const std::string text = render_comparison_text(c);
  EXPECT_NE(text.find("new::train (was old::train)"), std::string::npos) << text;
  EXPECT_NE(text.find("the suite 'old' is 'new' in the new run"), std::string::npos) << text;
  EXPECT_FALSE(pair_suites(base, now).ambiguous);
  // A job the renamed suite lost is still a removed one, and one it gained a new one.
  const auto more = compare(suites_of({{"old", {job("train", JobStatus::passed, kGiB), job("gone", JobStatus::passed, kGiB)}}}),
                            suites_of({{"new", {job("train", JobStatus::passed, kGiB), job("fresh", JobStatus::passed, kGiB)}}}),
                            rules({"verdict"}));
  ASSERT_EQ(more.jobs.size(), 3u);
  EXPECT_FALSE(more.jobs[0].removed());
  EXPECT_TRUE(more.jobs[1].removed());
  EXPECT_TRUE(more.jobs[2].added());
  // Unrelated suites (no job name in common) are not paired.
  EXPECT_TRUE(pair_suites(suites_of({{"a", {job("x", JobStatus::passed, kGiB)}}}), suites_of({{"b", {job("y", JobStatus::passed, kGiB)}}}))
                  .renamed.empty());
}

TEST(Compare, AnAmbiguousRenameIsRefused) {
  const RunResult base = suites_of({{"a", {job("train", JobStatus::passed, kGiB)}}, {"b", {job("train", JobStatus::passed, kGiB)}}});
  const RunResult now = suites_of({{"c", {job("train", JobStatus::failed, kGiB)}}, {"d", {job("train", JobStatus::passed, kGiB)}}});
  const SuitePairing p = pair_suites(base, now);
  ASSERT_TRUE(p.ambiguous);
  EXPECT_NE(p.ambiguous->find("'a'"), std::string::npos) << *p.ambiguous;
  EXPECT_NE(p.ambiguous->find("'c', 'd'"), std::string::npos) << *p.ambiguous;
}

// Issue 44: a peak from 0 B to 10 GiB was "+0.0%".
TEST(Compare, GrowthFromZeroIsNotZeroPercent) {
  const auto c = compare(run_of({job("a", JobStatus::passed, 0)}), run_of({job("a", JobStatus::passed, 10 * kGiB)}), rules({"peak:+5%"}));
  ASSERT_EQ(c.jobs[0].regressions.size(), 1u);
  EXPECT_EQ(c.jobs[0].regressions[0], "peak grew from 0 B to 10.00 GiB, more than peak:+5% allows");
  const std::string text = render_comparison_text(c);
  EXPECT_EQ(text.find("+0.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("(from 0)"), std::string::npos) << text;
}

TEST(Compare, BadRulesAreExplained) {
  for (const char* bad : {"peak:5", "peak:+5%%", "verdict:+1", "latency:+5%", "faults_visible:-x", "recovery:+2parsecs"}) {
    auto r = parse_fail_on(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().find(std::string("'") + bad + "'"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("valid rules"), std::string::npos);
  }
}

TEST(Compare, MarkdownEscapesNames) {
  const auto c = compare(run_of({job("a|b", JobStatus::passed, kGiB)}), run_of({job("a|b", JobStatus::failed, kGiB)}),
                         rules({"verdict"}));
  const std::string md = render_comparison_markdown(c);
  EXPECT_NE(md.find("s::a\\|b"), std::string::npos) << md;
  EXPECT_NE(md.find("### Regressions"), std::string::npos);
}

}  // namespace
}  // namespace oomh
