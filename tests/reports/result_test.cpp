// The results file: exact round trip, counts, downsampling, and the errors a reader gets.

#include <algorithm>
#include <fstream>
#include <functional>

#include <gmock/gmock.h>
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
  EXPECT_EQ(c.total, 8);
  EXPECT_EQ(c.passed, 2);   // one of them an expected failure
  EXPECT_EQ(c.failed, 3);   // one of them an unexpected pass
  EXPECT_EQ(c.errors, 1);
  EXPECT_EQ(c.inconclusive, 1);
  EXPECT_EQ(c.skipped, 1);
  EXPECT_EQ(c.interrupted, 0);
  EXPECT_EQ(c.xfailed, 1);
  EXPECT_EQ(c.xpassed, 1);
  const JobResult& halving = run.suites[0].jobs[0];
  EXPECT_EQ(halving.faults_visible(), 1);
  EXPECT_EQ(halving.faults_absorbed(), 2);
  const json j = json::parse(render_json(run));
  EXPECT_EQ(j["counts"]["failed"], 3);  // an XPASS is still a failure for `jq .counts.failed`
  EXPECT_EQ(j["counts"]["xfailed"], 1);
  EXPECT_EQ(j["counts"]["xpassed"], 1);
  EXPECT_EQ(counts_sentence(run), "2 failed, 1 xpassed, 1 error, 1 passed, 1 xfailed, 1 inconclusive, 1 skipped");
  // Note [A pass that did not check completion]: without its target step the same pass says so.
  RunResult unchecked = run;
  unchecked.suites[0].jobs[0].target_step.reset();
  EXPECT_EQ(counts_sentence(unchecked), "2 failed, 1 xpassed, 1 error, 1 passed (no target step: completion not checked), "
                                        "1 xfailed, 1 inconclusive, 1 skipped");
  unchecked.suites[0].jobs.push_back(run.suites[0].jobs[0]);  // a second pass, with its target step
  EXPECT_THAT(counts_sentence(unchecked), ::testing::HasSubstr("2 passed (1 with no target step: completion not checked)"));
}

Verdict verdict(const char* policy, VerdictStatus status, bool must_fail) {
  return Verdict{policy, json::object(), status, std::string(policy) + " said so", {}, must_fail};
}

// Note [Expected failures]: XFAIL and XPASS come from the verdicts and the status the runner judged.
TEST(Results, ExpectedFailuresAndUnexpectedPasses) {
  JobResult job;
  job.status = JobStatus::passed;
  job.verdicts = {verdict("exit", VerdictStatus::pass, false), verdict("memory_stable", VerdictStatus::fail, true)};
  EXPECT_TRUE(job.expected_failure());
  EXPECT_FALSE(job.unexpected_pass());
  EXPECT_EQ(expected_failure_sentence(job), "memory_stable failed as expected (must_fail): memory_stable said so");

  job.verdicts = {verdict("exit", VerdictStatus::pass, false)};  // no must_fail check: a plain pass
  EXPECT_FALSE(job.expected_failure());
  EXPECT_EQ(expected_failure_sentence(job), "");

  job.status = JobStatus::failed;
  job.verdicts = {verdict("memory_stable", VerdictStatus::pass, true), verdict("exit", VerdictStatus::pass, false)};
  EXPECT_TRUE(job.unexpected_pass());
  EXPECT_FALSE(job.expected_failure());

  // An ordinary check failed too: the job is FAILED, its failing check what a reader must see first.
  job.verdicts.push_back(verdict("completes", VerdictStatus::fail, false));
  EXPECT_FALSE(job.unexpected_pass());

  // A must_fail check that was inconclusive showed nothing either way.
  job.status = JobStatus::inconclusive;
  job.verdicts = {verdict("memory_stable", VerdictStatus::inconclusive, true)};
  EXPECT_FALSE(job.expected_failure());
  EXPECT_FALSE(job.unexpected_pass());
}

RunResult run_of(std::vector<JobStatus> statuses) {
  RunResult run;
  run.suites.push_back({"s", "s.yaml", 0, 0, {}});
  for (JobStatus s : statuses) {
    JobResult job;
    job.name = "job-" + std::to_string(run.suites[0].jobs.size());
    job.status = s;
    run.suites[0].jobs.push_back(job);
  }
  return run;
}

TEST(Results, NothingTestedWhenNoJobPassedFailedErredOrWasInterrupted) {
  EXPECT_TRUE(RunResult{}.nothing_tested());
  EXPECT_EQ(counts_sentence(RunResult{}), "nothing was tested: no job ran");
  const RunResult idle = run_of({JobStatus::inconclusive, JobStatus::skipped, JobStatus::inconclusive});
  EXPECT_TRUE(idle.nothing_tested());
  EXPECT_EQ(counts_sentence(idle), "nothing was tested: 2 inconclusive, 1 skipped");
  for (JobStatus tested : {JobStatus::passed, JobStatus::failed, JobStatus::error, JobStatus::interrupted}) {
    const RunResult run = run_of({JobStatus::inconclusive, tested});
    EXPECT_FALSE(run.nothing_tested()) << to_string(tested);
    EXPECT_EQ(counts_sentence(run).find("nothing"), std::string::npos) << counts_sentence(run);
  }
  EXPECT_FALSE(test::load_fixture("run.json").nothing_tested());
}

TEST(Results, AttemptsAreNamedFromOne) {
  EXPECT_EQ(attempt_name(0), "attempt 1");
  EXPECT_EQ(attempt_name(2), "attempt 3");
}

TEST(Results, OutputExcerptIsTheCleanedLastLines) {
  AttemptResult a;
  for (int i = 1; i <= 15; ++i) a.output_tail += "line " + std::to_string(i) + "\n";
  a.output_tail += "\033[31mred\033[0m \x01" "end\n";
  EXPECT_EQ(output_excerpt(a, 3), "line 14\nline 15\nred end");
  EXPECT_EQ(output_excerpt(AttemptResult{}, 10), "");
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

// Found by fuzz_results: a number too large for a double is the parser's out_of_range, not a parse_error, and
// once left `oomharness report` with "internal error".
TEST(Results, NumberTooLargeNamesLineAndColumn) {
  auto r = parse_results("{\n  \"schema_version\": 1e99999\n}\n", "big.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), "big.json:2:21: number overflow parsing '1e99999'");
}

// Found by fuzz_results: a first line whose "stream" is not a string ended `report` as an internal error.
TEST(Results, StreamKeyThatIsNotAStringIsNotAJobStream) {
  const std::string path = testing::TempDir() + "oomh-stream-key-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(path);
    f << "{\"stream\": 1}\n{\"end\": true}\n";
  }
  auto r = load_results(path);
  std::remove(path.c_str());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), path + ":2:1: syntax error while parsing value - unexpected '{'; expected end of input");
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

// Note [Whole numbers from JSON]: an integer field written 1e30, 2.5 or past its type's range is an error
// naming it, never a cast (a double out of range cast to an integer is undefined; found reading the codecs
// after fuzz_events found the same in the event log's figures).
TEST(Results, IntegerFieldsOutOfRangeAreNamedNotCast) {
  auto f = parse_results(fixture_with([](json& j) { j["suites"][1]["jobs"][1]["faults"][1]["attempt"] = 1e30; }), "r.json");
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().find("r.json: suites[1].jobs[1].faults[1].attempt: expected a whole number from -2147483648 to "
                           "2147483647, found 1e+30"),
            std::string::npos)
      << f.error();
  auto p = parse_results(fixture_with([](json& j) { j["suites"][0]["jobs"][0]["peak"]["0"] = 1.9e19; }), "r.json");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().find("suites[0].jobs[0].peak.0: expected a whole number from 0 to 18446744073709551615"),
            std::string::npos)
      << p.error();
  auto h = parse_results(fixture_with([](json& j) { j["suites"][0]["jobs"][0]["attempts"][0]["last_step"] = 2.5; }), "r.json");
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().find("attempts[0].last_step: expected a whole number"), std::string::npos) << h.error();
  auto e = parse_results(
      fixture_with([](json& j) { j["suites"][0]["jobs"][0]["verdicts"][0]["evidence"] = {{{"attempt", 4294967296.0}}}; }), "r.json");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("verdicts[0]: attempt: expected a whole number"), std::string::npos) << e.error();
  // The largest byte count is read exactly, and a whole number written as a float is read.
  auto ok = parse_results(fixture_with([](json& j) {
                            j["suites"][0]["jobs"][0]["peak"]["0"] = UINT64_MAX;
                            j["suites"][1]["jobs"][1]["faults"][1]["attempt"] = 1.0;
                          }),
                          "r.json");
  ASSERT_TRUE(ok) << ok.error();
  EXPECT_EQ(ok.value().suites[0].jobs[0].peak.at(0), UINT64_MAX);
  EXPECT_EQ(ok.value().suites[1].jobs[1].faults[1].attempt, 1);
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

namespace oomh {
namespace {

// Issue 15: a distributed job's markers keep their rank through results.json, and Perfetto draws one steps lane
// and one events lane per rank.
TEST(Results, RanksOfMarkersRoundTripAndGetPerfettoLanes) {
  RunResult run;
  SuiteResult suite;
  suite.name = "s";
  JobResult job;
  job.name = "ddp";
  job.duration = 10;
  AttemptResult a;
  a.index = 0;
  a.duration = 10;
  a.outcome = AttemptOutcome::ok;
  a.ranks = {RankResult{0, AttemptOutcome::ok, 0, std::nullopt, 2, "/l0", ""},
             RankResult{1, AttemptOutcome::oom, 1, std::nullopt, 1, "/l1", "stack"}};
  job.attempts.push_back(a);
  job.markers = {{1, 0, "step", "step 1", 0}, {1.1, 0, "step", "step 1", 1}, {2, 0, "step", "step 2", 0},
                 {2.5, 0, "oom", "OOM at step 2", 1}, {3, 0, "restart", "x", std::nullopt}};
  job.timeline[0] = {{1, 100, 0, 1}, {1.1, 300, 0, 1}};  // the ranks' samples, mixed
  job.rank_timeline[0] = {{1, 100, 0, 1}};
  job.rank_timeline[1] = {{1.1, 300, 0, 1}};
  suite.jobs.push_back(job);
  run.suites.push_back(suite);

  json j = run;
  RunResult back = j.get<RunResult>();
  const JobResult& b = back.suites.at(0).jobs.at(0);
  ASSERT_EQ(b.markers.size(), 5u);
  EXPECT_EQ(b.markers[1].rank, 1);
  EXPECT_FALSE(b.markers[4].rank.has_value());
  ASSERT_EQ(b.attempts.at(0).ranks.size(), 2u);
  EXPECT_EQ(b.attempts[0].ranks[1].outcome, AttemptOutcome::oom);
  EXPECT_EQ(b.attempts[0].ranks[1].stacks, "stack");

  json trace = json::parse(render_perfetto(run));
  std::map<int, std::string> lanes;
  std::map<int, int> slices;  // tid -> step slices
  std::map<std::string, int> counters;  // name -> points
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "C") ++counters[e["name"].get<std::string>()];
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes[e["tid"].get<int>()] = e["args"]["name"];
    if (e["ph"] == "X" && e["cat"] == "step") ++slices[e["tid"].get<int>()];
    if (e["ph"] == "i" && e["cat"] == "oom") { EXPECT_EQ(lanes.at(e["tid"].get<int>()), "rank 1 events"); }
  }
  EXPECT_EQ(lanes.at(10), "rank 0 steps");
  EXPECT_EQ(lanes.at(13), "rank 1 events");
  EXPECT_EQ(slices[10], 2);  // rank 0's steps 1 and 2
  EXPECT_EQ(slices[12], 1);  // rank 1's step 1
  EXPECT_EQ(slices[2], 0);   // nothing on the job-wide steps lane
  // One memory counter per rank, not the per-device one that mixes them.
  EXPECT_EQ(counters, (std::map<std::string, int>{{"rank 0 memory", 1}, {"rank 1 memory", 1}}));
}

}  // namespace
}  // namespace oomh

namespace oomh {
namespace {

// Note [Name tables]: results.json's attempt and rank outcomes are kAttemptOutcomes, in the schema too.
TEST(Results, TheSchemasOutcomesAreTheTables) {
  std::ifstream in(std::string(OOMH_REPORTS_TEST_DIR) + "/../../docs/results-schema.json");
  ASSERT_TRUE(in) << "docs/results-schema.json";
  const json schema = json::parse(in);
  for (const char* def : {"attempt", "rank"}) {
    const json& outcome = schema.at("$defs").at(def).at("properties").at("outcome");
    EXPECT_EQ(outcome.at("enum").get<std::vector<std::string>>(), names_of(kAttemptOutcomes))
        << "docs/results-schema.json's " << def << ".outcome spells the outcomes otherwise than kAttemptOutcomes";
  }
}

TEST(Results, AnOutcomeTheTableLacksIsRefused) {
  json attempt = {{"index", 0}, {"outcome", "oom"}};
  EXPECT_EQ(attempt.get<AttemptResult>().outcome, AttemptOutcome::oom);
  EXPECT_EQ(json(attempt.get<AttemptResult>())["outcome"], "oom");
  attempt["outcome"] = "crashed";
  try {
    (void)attempt.get<AttemptResult>();
    ADD_FAILURE() << "an unknown outcome was read";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()),
              "outcome: unknown outcome 'crashed' (ok, oom, nonzero, signal, timeout, interrupted, failed_to_start)");
  }
}

}  // namespace
}  // namespace oomh
