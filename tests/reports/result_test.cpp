// The results file: exact round trip, counts, downsampling, and the errors a reader gets.

#include <algorithm>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "oomharness/reports/writers.h"
#include "support.h"

namespace oomh {
namespace {

using nlohmann::json;

TEST(Results, FixtureRoundTripsExactly) {
  const json original = json::parse(test::read_text(test::data_path("run.json")));
  const RunResult run = test::load_fixture("run.json");
  json written = json::parse(render_json(run));
  ASSERT_TRUE(written.contains("counts"));
  written.erase("counts");  // derived, not in the fixture
  EXPECT_EQ(written, original);
  // And the written file reads back to the same model.
  auto again = parse_results(render_json(run), "again.json");
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ(render_json(again.value()), render_json(run));
}

TEST(Results, OptionalFieldsStayAbsent) {
  const RunResult run = test::load_fixture("run.json");
  const JobResult& nostart = run.suites[1].jobs[0];
  EXPECT_FALSE(nostart.gpu);
  EXPECT_FALSE(nostart.snapshot);
  EXPECT_FALSE(nostart.recovery_seconds);
  EXPECT_FALSE(nostart.attempts[0].exit_code);
  const json j = nostart;
  EXPECT_FALSE(j.contains("gpu"));
  EXPECT_FALSE(j["attempts"][0].contains("exit_code"));
  EXPECT_EQ(run.suites[0].jobs[1].snapshot.value_or(""), "out/jobs/resume-broken/oom_snapshot.pickle");
}

TEST(Results, CountsAndFaults) {
  const RunResult run = test::load_fixture("run.json");
  const RunResult::Counts c = run.counts();
  EXPECT_EQ(c.total, 6);
  EXPECT_EQ(c.passed, 1);
  EXPECT_EQ(c.failed, 2);
  EXPECT_EQ(c.errors, 1);
  EXPECT_EQ(c.inconclusive, 1);
  EXPECT_EQ(c.skipped, 1);
  EXPECT_EQ(c.interrupted, 0);
  const JobResult& halving = run.suites[0].jobs[0];
  EXPECT_EQ(halving.faults_visible(), 1);
  EXPECT_EQ(halving.faults_absorbed(), 2);
  const json j = json::parse(render_json(run));
  EXPECT_EQ(j["counts"]["failed"], 2);
}

TEST(Results, StatusNames) {
  for (JobStatus s : {JobStatus::passed, JobStatus::failed, JobStatus::error, JobStatus::skipped, JobStatus::inconclusive,
                      JobStatus::interrupted}) {
    EXPECT_EQ(job_status_from_string(to_string(s)), s);
  }
  EXPECT_FALSE(job_status_from_string("PASSED"));
}

std::string fixture_with(const std::function<void(json&)>& edit) {
  json j = json::parse(test::read_text(test::data_path("run.json")));
  edit(j);
  return j.dump();
}

TEST(Results, OtherSchemaVersionIsRejectedNamingTheFile) {
  auto r = parse_results(fixture_with([](json& j) { j["schema_version"] = 2; }), "old/results.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("old/results.json"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("schema_version 2"), std::string::npos) << r.error();
  auto none = parse_results("{\"suites\": []}", "x.json");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().find("x.json: not an oomharness results file"), std::string::npos) << none.error();
}

TEST(Results, SyntaxErrorNamesLineAndColumn) {
  auto r = parse_results("{\n  \"schema_version\": 1,\n  oops\n}\n", "bad.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().rfind("bad.json:3:", 0), 0u) << r.error();
}

TEST(Results, WrongFieldIsNamedByItsPath) {
  auto r = parse_results(fixture_with([](json& j) { j["suites"][0]["jobs"][2]["status"] = "passd"; }), "r.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("r.json: suites[0].jobs[2].status: unknown status 'passd'"), std::string::npos) << r.error();

  auto t = parse_results(fixture_with([](json& j) { j["suites"][1]["jobs"][1]["faults"][1]["size"] = "big"; }), "r.json");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().find("suites[1].jobs[1].faults[1].size"), std::string::npos) << t.error();

  auto v = parse_results(fixture_with([](json& j) { j["suites"][0]["jobs"][0]["verdicts"][1]["status"] = "ok"; }), "r.json");
  ASSERT_FALSE(v);
  EXPECT_NE(v.error().find("suites[0].jobs[0].verdicts[1]"), std::string::npos) << v.error();

  auto d = parse_results(fixture_with([](json& j) { j["suites"][0]["jobs"][0]["peak"]["gpu0"] = 1; }), "r.json");
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().find("suites[0].jobs[0].peak.gpu0"), std::string::npos) << d.error();
}

TEST(Results, MissingFileIsNamed) {
  auto r = load_results("/nonexistent/dir/results.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("/nonexistent/dir/results.json"), std::string::npos);
}

TEST(Results, InvalidUtf8InOutputIsWrittenAsReplacement) {
  RunResult run;
  run.suites.push_back({"s", "s.yaml", 0, 0, {}});
  JobResult job;
  job.name = "j";
  AttemptResult a;
  a.output_tail = std::string("bad \xff\xfe bytes\n");
  job.attempts.push_back(a);
  run.suites[0].jobs.push_back(job);
  const std::string text = render_json(run);
  auto back = parse_results(text, "u.json");
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(back.value().suites[0].jobs[0].attempts[0].output_tail, "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes\n");
}

std::vector<TimelinePoint> ramp(size_t n, size_t spike_at, size_t valley_at) {
  std::vector<TimelinePoint> points;
  for (size_t i = 0; i < n; ++i) {
    uint64_t held = 1000 + (i % 7) * 10;
    if (i == spike_at) held = 999999;
    if (i == valley_at) held = 1;
    points.push_back({static_cast<double>(i) * 0.01, held, 5000, static_cast<int64_t>(i / 10)});
  }
  return points;
}

TEST(Timeline, DownsampleKeepsPeaksValleysAndEnds) {
  const auto points = ramp(10000, 4321, 8765);
  const auto small = downsample_timeline(points, 600);
  EXPECT_LE(small.size(), 600u);
  EXPECT_GE(small.size(), 500u);
  EXPECT_EQ(small.front().t, points.front().t);
  EXPECT_EQ(small.back().t, points.back().t);
  EXPECT_TRUE(std::is_sorted(small.begin(), small.end(), [](auto& a, auto& b) { return a.t < b.t; }));
  EXPECT_TRUE(std::any_of(small.begin(), small.end(), [](auto& p) { return p.held == 999999; }));
  EXPECT_TRUE(std::any_of(small.begin(), small.end(), [](auto& p) { return p.held == 1; }));
}

TEST(Timeline, ShortTimelinesAreUnchangedAndTinyLimitsHold) {
  const auto points = ramp(50, 10, 20);
  EXPECT_EQ(downsample_timeline(points, 600).size(), 50u);
  EXPECT_EQ(downsample_timeline(points, 1).front().held, 999999u);
  EXPECT_LE(downsample_timeline(points, 3).size(), 3u);
  EXPECT_TRUE(downsample_timeline(points, 0).empty());
}

TEST(Timeline, WrittenFilesAreBounded) {
  RunResult run;
  run.suites.push_back({"s", "s.yaml", 0, 0, {}});
  JobResult job;
  job.name = "long";
  job.timeline[0] = ramp(5000, 100, 200);
  run.suites[0].jobs.push_back(job);
  const json j = json::parse(render_json(run));
  EXPECT_LE(j["suites"][0]["jobs"][0]["timeline"]["0"].size(), kTimelinePoints);
}

}  // namespace
}  // namespace oomh
