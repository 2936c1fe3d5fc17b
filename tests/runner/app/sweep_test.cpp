// The sweep's parts: sites from a golden run's alloc events (Note [Sweep sites]), the faults that fail
// them (accepted by the one rule schema), and the coverage and budget views.

#include <gtest/gtest.h>

#include "app/sweep_sites.h"
#include "oomharness/reports/budget.h"
#include "oomharness/reports/sweep.h"
#include "oomharness/runner/cli_specs.h"

namespace oomh::app {
namespace {

Event alloc(int pid, int64_t step, const char* phase, uint64_t size, uint64_t nth, const char* entry = "cuMemAlloc_v2") {
  Event e;
  e.t = static_cast<double>(nth);
  e.pid = pid;
  e.src = "shim";
  e.kind = "alloc";
  e.fields = {{"entry", entry}, {"size", size}, {"device", 0}, {"step", step}, {"phase", phase}, {"call", nth + 10}, {"nth", nth}};
  return e;
}

TEST(SweepSites, CallsAlikeInPhaseEntryAndSizeClassAreOneSite) {
  Trace trace;
  trace.attempts.emplace_back();
  auto& ev = trace.attempts[0].events;
  ev.push_back(alloc(7, 2, "forward", 600 << 10, 1));
  ev.push_back(alloc(7, 2, "forward", 700 << 10, 2));   // same class (512 KiB..1 MiB): same site
  ev.push_back(alloc(7, 2, "backward", 600 << 10, 3));  // another phase
  ev.push_back(alloc(7, 2, "forward", 2 << 20, 4));     // another class
  ev.push_back(alloc(7, 2, "forward", 600 << 10, 5, "cuMemCreate"));  // another entry point
  ev.push_back(alloc(7, 3, "forward", 600 << 10, 6));   // another step: not recorded for step 2
  ev.push_back(alloc(8, 2, "forward", 64, 1));          // another process: its nth counts its own calls
  std::vector<RecordedCall> calls = recorded_calls(trace, 2);
  ASSERT_EQ(calls.size(), 5u);
  std::vector<SweepSite> sites = sweep_sites(calls);
  ASSERT_EQ(sites.size(), 4u);
  EXPECT_EQ(sites[0].index, 1);
  EXPECT_EQ(sites[0].nth, 1u);
  EXPECT_EQ(sites[0].calls, 2);
  EXPECT_EQ(sites[0].phase, "forward");
  EXPECT_EQ(sites[1].phase, "backward");
  EXPECT_EQ(sites[1].nth, 3u);
  EXPECT_EQ(sites[2].nth, 4u);
  EXPECT_EQ(sites[3].entry, "cuMemCreate");
  EXPECT_EQ(sites[3].nth, 5u);
}

// Note [The site of a recorded call]: the user's line, where the recording has it, splits a site and is
// shown with it; calls without one stay one site as before.
TEST(SweepSites, TheUsersLineJoinsTheKeyAndIsShown) {
  Trace trace;
  trace.attempts.emplace_back();
  auto& ev = trace.attempts[0].events;
  ev.push_back(alloc(7, 2, "forward", 600 << 10, 1));
  ev.back().fields["where"] = "train.py:77";
  ev.push_back(alloc(7, 2, "forward", 700 << 10, 2));
  ev.back().fields["where"] = "train.py:80";  // same phase and class, another line: another site
  ev.push_back(alloc(7, 2, "forward", 650 << 10, 3));
  ev.back().fields["where"] = "train.py:77";  // the first site again
  ev.push_back(alloc(7, 2, "forward", 600 << 10, 4));  // no line
  ev.push_back(alloc(7, 2, "forward", 600 << 10, 5));
  ev.back().fields["where"] = "";  // empty: as no line
  std::vector<SweepSite> sites = sweep_sites(recorded_calls(trace, 2));
  ASSERT_EQ(sites.size(), 3u);
  EXPECT_EQ(sites[0].where, std::optional<std::string>("train.py:77"));
  EXPECT_EQ(sites[0].calls, 2);
  EXPECT_EQ(sites[1].where, std::optional<std::string>("train.py:80"));
  EXPECT_EQ(sites[2].where, std::nullopt);
  EXPECT_EQ(sites[2].calls, 2);

  SweepResult r;
  r.steps = {2};
  sites[0].size_class = "512.00 KiB..1.00 MiB";
  r.sites.push_back({sites[0], {{"persistent", "step=2,nth=1,until_freed=1", "j", JobStatus::failed, "crash", "m"}}});
  r.sites.push_back({sites[2], {{"persistent", "step=2,nth=4,until_freed=1", "j", JobStatus::passed, "recovered", ""}}});
  EXPECT_NE(sweep_sentence(r).find("site 1 (forward, 512.00 KiB..1.00 MiB, train.py:77): persistent crash"), std::string::npos)
      << sweep_sentence(r);
  std::string text = render_sweep_text(r);
  EXPECT_NE(text.find("line\n"), std::string::npos) << text;
  EXPECT_NE(text.find("train.py:77\n"), std::string::npos) << text;
  std::string html = render_sweep_html(r);
  EXPECT_NE(html.find("<th>line</th>"), std::string::npos);
  EXPECT_NE(html.find("<td><code>train.py:77</code></td>"), std::string::npos) << html;
  nlohmann::json j = nlohmann::json::parse(render_sweep_json(r));
  EXPECT_EQ(j["sites"][0]["where"], "train.py:77");
  EXPECT_TRUE(j["sites"][1]["where"].is_null());
}

TEST(SweepSites, FaultedRunsOnAGpuGetACapSoThatTheyCanBePacked) {
  JobSpec job;
  const uint64_t mib = uint64_t{1} << 20;
  EXPECT_EQ(sweep_packing_cap(job, 300 * mib, 8, false), std::optional<uint64_t>(856 * mib));
  EXPECT_EQ(sweep_packing_cap(job, 300 * mib + 1, 8, false), std::optional<uint64_t>(857 * mib));  // whole MiB, up
  EXPECT_EQ(sweep_packing_cap(job, 300 * mib, 1, false), std::nullopt);   // one at a time: nothing to pack
  EXPECT_EQ(sweep_packing_cap(job, 300 * mib, 8, true), std::nullopt);    // driver double or virtual device
  EXPECT_EQ(sweep_packing_cap(job, 0, 8, false), std::nullopt);           // no peak known
  JobSpec capped = job;
  capped.memory.limit = 64 * mib;                                          // the user's own cap stays
  EXPECT_EQ(sweep_packing_cap(capped, 300 * mib, 8, false), std::nullopt);
  JobSpec reserved = job;
  reserved.memory.leave = 4096 * mib;
  EXPECT_EQ(sweep_packing_cap(reserved, 300 * mib, 8, false), std::nullopt);
  JobSpec virt = job;
  virt.device = DeviceChoice::virtual_device;
  EXPECT_EQ(sweep_packing_cap(virt, 300 * mib, 8, false), std::nullopt);
}

TEST(SweepSites, SizeClassesArePowersOfTwo) {
  EXPECT_EQ(size_class(0), "0 B");
  EXPECT_EQ(size_class(1), "1 B..2 B");
  EXPECT_EQ(size_class(4096), "4.00 KiB..8.00 KiB");
  EXPECT_EQ(size_class(8191), "4.00 KiB..8.00 KiB");
}

TEST(SweepSites, EachModesFaultIsARuleTheSchemaAccepts) {
  SweepSite site;
  site.step = 3;
  site.nth = 7;
  EXPECT_EQ(site_fault_text(site, SweepMode::transient, 2), "step=3,nth=7,times=2");
  EXPECT_EQ(site_fault_text(site, SweepMode::persistent, 2), "step=3,nth=7,until_freed=1");
  for (SweepMode m : {SweepMode::transient, SweepMode::persistent}) {
    auto f = parse_fault_spec(site_fault_text(site, m, 3), "");
    ASSERT_TRUE(f) << f.error();
    EXPECT_EQ(f->rule["when"]["nth"], 7);
    EXPECT_EQ(f->rule["when"]["step"], 3);
  }
  EXPECT_EQ(sweep_mode_from_name("persistent"), SweepMode::persistent);
  EXPECT_FALSE(sweep_mode_from_name("forever"));
}

JobResult job_with(JobStatus status, const char* last_outcome, int visible_faults = 1) {
  JobResult j;
  j.status = status;
  AttemptResult a;
  a.outcome = *value_named(kAttemptOutcomes, last_outcome);
  j.attempts.push_back(a);
  for (int i = 0; i < visible_faults; ++i) {
    FaultRecord f;
    f.visible = true;
    j.faults.push_back(f);
  }
  return j;
}

TEST(SweepCoverage, OutcomesAreNamedFromTheJobsResult) {
  EXPECT_EQ(sweep_outcome(job_with(JobStatus::passed, "ok")), "recovered");
  EXPECT_EQ(sweep_outcome(job_with(JobStatus::passed, "ok", 0)), "absorbed");
  EXPECT_EQ(sweep_outcome(job_with(JobStatus::failed, "oom")), "crash");
  EXPECT_EQ(sweep_outcome(job_with(JobStatus::failed, "timeout")), "hang");
  JobResult leak = job_with(JobStatus::failed, "ok");
  Verdict v;
  v.policy = "memory_stable";
  v.status = VerdictStatus::fail;
  leak.verdicts.push_back(v);
  EXPECT_EQ(sweep_outcome(leak), "leak");
  EXPECT_EQ(sweep_outcome(job_with(JobStatus::error, "failed_to_start")), "error");
}

TEST(SweepCoverage, TheHeadlineNamesTheSitesNotSurvived) {
  SweepResult s;
  s.steps = {2};
  for (int i = 1; i <= 3; ++i) {
    SweepSite site;
    site.index = i;
    site.phase = i == 3 ? "optimizer" : "forward";
    site.size_class = "1 B..2 B";
    s.sites.push_back({site, {{"transient", "f", "j", JobStatus::passed, "recovered", ""},
                              {"persistent", "step=2,nth=" + std::to_string(i) + ",until_freed=1", "j",
                               i == 3 ? JobStatus::failed : JobStatus::passed, i == 3 ? "crash" : "recovered", "m"}}});
  }
  EXPECT_EQ(s.survived(), 2);
  EXPECT_EQ(sweep_sentence(s), "3 sites in step 2; survived 2; 1 not survived: site 3 (optimizer, 1 B..2 B): persistent crash");
  std::string text = render_sweep_text(s);
  EXPECT_NE(text.find("--fault 'step=2,nth=3,until_freed=1'"), std::string::npos) << text;
  EXPECT_EQ(text.find("nth=1,until_freed"), std::string::npos) << text;  // survived sites print no repro
  std::string html = render_sweep_html(s);
  EXPECT_NE(html.find("<td class=\"bad\" title=\"m\"><a href=\"report.html\">crash</a><br><code>--fault step=2,nth=3,until_freed=1</code>"),
            std::string::npos) << html;
  EXPECT_EQ(html.find("--fault step=2,nth=1,until_freed=1"), std::string::npos) << html;
  EXPECT_NE(html.find("class=\"headline h-fail\""), std::string::npos);
  s.job = "<b>&";
  EXPECT_NE(render_sweep_html(s).find("Sweep of &lt;b&gt;&amp;"), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(render_sweep_json(s));
  EXPECT_EQ(j["sites"][2]["cases"][1]["outcome"], "crash");
  EXPECT_EQ(j["survived"], 2);
  s.steps = {2, 3};
  EXPECT_EQ(sweep_sentence(s).rfind("3 sites in steps 2, 3; survived 2", 0), 0u) << sweep_sentence(s);
}

TEST(BudgetView, FitsOnTableAndWhatWasCounted) {
  BudgetResult b;
  b.job = "j";
  b.counting = "allocations";
  b.virtual_device = true;
  b.need = uint64_t{20} << 30;
  b.low = (uint64_t{20} << 30) - (1 << 20);
  b.tolerance = 1 << 20;
  b.run_bound = 7;
  std::string text = render_budget_text(b);
  EXPECT_NE(text.find(" 16 GiB  no   short by 4.00 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find(" 24 GiB  yes  headroom 4.00 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("modelled"), std::string::npos) << text;
  nlohmann::json j = nlohmann::json::parse(render_budget_json(b));
  EXPECT_EQ(j["fits_on"][0]["fits"], false);
  EXPECT_EQ(j["fits_on"][5]["gib"], 141);
  EXPECT_EQ(j["modelled"], true);
}

}  // namespace
}  // namespace oomh::app
