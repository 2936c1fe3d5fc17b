// The Slurm agent's plan and results (Note [Agent plan and results] in agent_plan.h): what the submitting
// side writes and reads back must be the same job and the same outcome, field for field.

#include <gtest/gtest.h>

#include "exec/slurm_tools.h"
#include "oomharness/runner/agent_plan.h"
#include "oomharness/runner/backend.h"

namespace oomh {
namespace {

JobSpec every_field_job() {
  const char* text = R"(version: 1
name: s
backend: slurm
jobs:
  - name: full
    run: python3 train.py --steps 12 --ckpt {workdir}/ck.pt
    cwd: /tmp
    env: {A: "a,b,c=d", B: "{workdir}/x"}
    timeout: 90s
    grace: 3s
    probe: python
    device: virtual
    observe: {loss: 'loss=([0-9.]+)'}
    memory: {limit: 1GiB, counts: footprint, schedule: [{at: {step: 4}, limit: 512MiB}], reserve: 64MiB, snapshot: true}
    faults: [{name: f1, when: {step: 5, min_size: 1MiB}, fail: {times: 2}}]
    restart: {max: 2, on: [oom, nonzero], clear_faults: true}
    target_step: 12
    nodes: 2
    ranks_per_node: 3
    expect:
      - exit: 0
      - checkpoint_resume: {max_lost_steps: 5, reference: {metric: loss, rtol: 1e-5}}
      - batch_halving: {factor: 0.5}
        must_fail: true
)";
  auto load = load_suite_text(text, "/suites/s.yaml", "/suites");
  for (const auto& e : load.error()) ADD_FAILURE() << e.str();
  EXPECT_TRUE(load.ok());
  EXPECT_EQ(load->backend, std::optional<std::string>("slurm"));
  return load->jobs.at(0);
}

TEST(AgentPlan, JobRoundTripsFieldForField) {
  JobSpec job = every_field_job();
  nlohmann::json once = nlohmann::json(job);
  JobSpec back = model_from_json<JobSpec>(nlohmann::json::parse(once.dump()), "job");
  EXPECT_EQ(nlohmann::json(back), once);
  EXPECT_EQ(back.env.at("A"), "a,b,c=d");
  EXPECT_EQ(back.plan(), job.plan());
  EXPECT_EQ(back.flush_steps(), job.flush_steps());
  ASSERT_EQ(back.expect.size(), 3u);
  EXPECT_TRUE(back.expect[2].must_fail);
  EXPECT_EQ(back.where.str(), job.where.str());
  EXPECT_EQ(back.ranks, 6);  // nodes x ranks_per_node (Note [Ranks on several nodes])
  EXPECT_EQ(back.nodes, 2);
  EXPECT_EQ(back.ranks_per_node, 3);
}

TEST(AgentPlan, PlanRoundTrips) {
  AgentPlan plan;
  plan.job = every_field_job();
  plan.paths.inject_library = "/opt/oomh/lib/liboomharness_inject.so";
  plan.paths.driver_library_dir = "/opt/oomh/double";
  plan.jobs_dir = "/shared/out/jobs";
  plan.results_path = "/shared/out/slurm/job-0/results.json";
  plan.threads = 8;
  plan.ld_preload = "/usr/lib/libtcmalloc.so";
  plan.agent = "/shared/oomh/bin/oomharness";
  AgentPlan back = agent_plan_from_json(to_json_value(plan));
  EXPECT_EQ(to_json_value(back), to_json_value(plan));
}

TEST(AgentPlan, OutcomeRoundTripsFieldForField) {
  JobOutcome o;
  o.trace.job = "s::full";
  o.trace.target_step = 12;
  o.trace.simulated_device = true;
  Attempt a;
  a.index = 0;
  a.start = 1763900000.123456789;
  a.end = 1763900003.5;
  a.end_kind = AttemptEnd::exited;
  a.exit_code = 1;
  a.oom_message = true;
  a.faults_enabled = true;
  Event e;
  e.t = a.start + 0.25;
  e.pid = 42;
  e.src = "probe";
  e.kind = "oom";
  e.fields = {{"step", 5}, {"caught", false}};
  a.events.push_back(e);
  a.samples.push_back({a.start + 0.1, 0, 1u << 20, 2u << 20, 1ull << 30, 3});
  a.output_tail = "CUDA out of memory\n\xff bad utf-8";
  a.log_path = "/shared/out/jobs/s__full/attempt-0.log";
  a.shim = ShimRecord{2, 2, 0, 3, true, 77};
  o.trace.attempts.push_back(a);
  Attempt b = a;
  b.index = 1;
  b.end_kind = AttemptEnd::timed_out;
  b.exit_code.reset();
  b.signal = 9;
  b.shim.reset();
  RankEnd r1;  // a distributed job's rank (Note [Ranks] in trace.h)
  r1.rank = 1;
  r1.start = b.start;
  r1.end = b.end;
  r1.end_kind = AttemptEnd::exited;
  r1.exit_code = 1;
  r1.ended_by_oom = true;
  r1.last_step = 4;
  r1.log_path = "/shared/out/jobs/s__full/attempt-1.rank1.log";
  r1.stacks = "Current thread 0x1 (most recent call first):\n";
  b.ranks = {RankEnd{}, r1};
  o.trace.attempts.push_back(b);
  o.trace.reference.push_back(a);
  o.gpu = 3;
  o.error = "";
  o.interrupted = true;
  o.start = a.start - 1;
  o.end = b.end + 1;
  o.argv = {"python3", "train.py"};
  o.work_dir = "/shared/out/jobs/s__full/work";
  std::string text = to_json_value(o).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  JobOutcome back = job_outcome_from_json(nlohmann::json::parse(text));
  ASSERT_EQ(back.trace.attempts.size(), 2u);
  EXPECT_EQ(back.trace.attempts[0].start, a.start);  // doubles survive exactly
  EXPECT_EQ(back.trace.attempts[0].events.at(0).fields, e.fields);
  EXPECT_EQ(back.trace.attempts[0].shim->allocations, 77u);
  EXPECT_EQ(back.trace.attempts[1].end_kind, AttemptEnd::timed_out);
  EXPECT_EQ(back.trace.attempts[1].signal, 9);
  EXPECT_FALSE(back.trace.attempts[1].shim);
  ASSERT_EQ(back.trace.attempts[1].ranks.size(), 2u);
  EXPECT_EQ(back.trace.attempts[1].ranks[1].exit_code, 1);
  EXPECT_TRUE(back.trace.attempts[1].ranks[1].ended_by_oom);
  EXPECT_EQ(back.trace.attempts[1].ranks[1].last_step, 4);
  EXPECT_EQ(back.trace.attempts[1].ranks[1].stacks, r1.stacks);
  EXPECT_EQ(back.trace.reference.size(), 1u);
  EXPECT_EQ(back.gpu, 3);
  EXPECT_TRUE(back.interrupted);
  // Apart from the invalid UTF-8 replaced on the way, it is the same outcome.
  EXPECT_EQ(to_json_value(back).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), text);
}

// issue 30: the codec dropped Attempt::thinned, MemorySample::rank, the job's sweep and JobOutcome::gpus, so a
// thinned log came back as a complete one through --backend slurm and per-rank timelines came back empty.
TEST(AgentPlan, CarriesThinnedLogRanksOfSamplesSweepAndGpus) {
  JobSpec job = every_field_job();
  job.sweep = SweepSpec{"2..4", {"transient"}, 3};
  JobSpec job_back = model_from_json<JobSpec>(nlohmann::json::parse(nlohmann::json(job).dump()), "job");
  ASSERT_TRUE(job_back.sweep) << "the job's sweep was dropped";
  EXPECT_EQ(job_back.sweep->steps, "2..4");
  EXPECT_EQ(job_back.sweep->modes, std::vector<std::string>{"transient"});
  EXPECT_EQ(job_back.sweep->transient_times, 3);

  JobOutcome o;
  Attempt a;
  MemorySample s;
  s.t = 1.5;
  s.held = 10;
  s.rank = 1;
  a.samples.push_back(s);
  LogFold fold;
  fold.routine = 70000;
  fold.routine_dropped = 5000;
  fold.steps = 9000;
  fold.grads_asked = 9000;
  fold.grads_uncleared = 2;
  a.thinned = fold;
  o.trace.attempts.push_back(a);
  o.gpus = {2, 3};
  JobOutcome back = job_outcome_from_json(nlohmann::json::parse(to_json_value(o).dump()));
  ASSERT_EQ(back.trace.attempts.size(), 1u);
  const Attempt& b = back.trace.attempts[0];
  ASSERT_EQ(b.samples.size(), 1u);
  EXPECT_EQ(b.samples[0].rank, 1) << "MemorySample::rank was dropped";
  ASSERT_TRUE(b.thinned) << "Attempt::thinned was dropped: a thinned log would be judged as complete";
  EXPECT_EQ(b.thinned->routine_dropped, 5000u);
  EXPECT_EQ(b.thinned->grads_uncleared, 2u);
  EXPECT_EQ(back.gpus, (std::vector<int>{2, 3})) << "JobOutcome::gpus was dropped";
}

TEST(AgentPlan, AnotherVersionIsRefusedByName) {
  nlohmann::json j = to_json_value(JobOutcome{});
  j["version"] = 99;
  try {
    job_outcome_from_json(j);
    FAIL() << "accepted version 99";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("format version 99"), std::string::npos) << e.what();
  }
}

TEST(SlurmTools, ParsesSqueueAndScontrol) {
  auto q = exec::parse_squeue("12|RUNNING|None\n13|PENDING|Resources\n14|CANCELLED|None\n");
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q["13"].reason, "Resources");
  EXPECT_FALSE(exec::slurm_state_ended(q["12"].state));
  EXPECT_TRUE(exec::slurm_state_ended(q["14"].state));
  auto f = exec::parse_scontrol_job("JobId=5 JobName=wrap JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 NodeList=vm");
  EXPECT_EQ(f["JobState"], "FAILED");
  EXPECT_EQ(f["ExitCode"], "3:0");
  EXPECT_EQ(exec::shell_quote("it's"), "'it'\\''s'");
}

TEST(Backend, Names) {
  EXPECT_EQ(backend_from_name("slurm"), BackendKind::slurm);
  EXPECT_EQ(backend_from_name("local"), BackendKind::local);
  EXPECT_FALSE(backend_from_name("k8s"));
}

}  // namespace
}  // namespace oomh
