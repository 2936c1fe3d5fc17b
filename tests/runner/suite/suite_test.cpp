// Loading whole suites: defaults, commands, matrix expansion, templates, expectations, fault plans.

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "oomharness/policies/oom_kinds.h"
#include "oomharness/runner/suite.h"

namespace oomh {
namespace {

using Strings = std::vector<std::string>;

Suite load_ok(const std::string& text, const std::string& dir = "/suites/demo") {
  auto load = load_suite_text(text, "s.yaml", dir);
  std::string errors;
  for (const auto& e : load.error()) errors += e.str() + "\n";
  EXPECT_TRUE(load.ok()) << errors;
  EXPECT_TRUE(load.error().empty()) << errors;
  return load ? load.value() : Suite{};
}

std::vector<std::string> errors_of(const std::string& text) {
  auto load = load_suite_text(text, "s.yaml", "/suites/demo");
  EXPECT_FALSE(load.ok());
  std::vector<std::string> out;
  for (const auto& e : load.error()) out.push_back(e.str());
  return out;
}

const JobSpec* job_named(const Suite& s, const std::string& name) {
  for (const auto& j : s.jobs)
    if (j.name == name) return &j;
  return nullptr;
}

TEST(Suite, TheIssueExampleLoads) {
  const Suite s = load_ok(R"(
version: 1
name: resnet-resilience
defaults:
  timeout: 10m
  env: {PYTHONUNBUFFERED: "1"}
  probe: auto
matrix:
  alloc: ["", "expandable_segments:True", "backend:cudaMallocAsync"]
jobs:
  - name: halves-batch-{alloc}
    run: python examples/python/train.py --steps 12 --batch-size 64
    env: {PYTORCH_CUDA_ALLOC_CONF: "{alloc}"}
    observe: {step: 'step (\d+)', batch_size: 'bs=(\d+)', loss: 'loss=([0-9.e+-]+)'}
    memory: {limit: 8GiB, schedule: [{at: {step: 8}, limit: 6GiB}], reserve: 0}
    faults:
      - {name: oom-at-5, when: {step: 5, phase: forward, min_size: 1MiB}, fail: {times: 4}}
    restart: {max: 0, on: [oom]}
    expect:
      - exit: 0
      - batch_halving: {factor: 0.5, min: 8}
)");
  EXPECT_EQ(s.name, "resnet-resilience");
  EXPECT_EQ(s.dir, "/suites/demo");
  ASSERT_EQ(s.jobs.size(), 3u);
  EXPECT_EQ(s.jobs[0].name, "halves-batch-");
  EXPECT_EQ(s.jobs[1].name, "halves-batch-expandable_segments:True");
  EXPECT_EQ(s.jobs[2].name, "halves-batch-backend:cudaMallocAsync");
  const JobSpec& j = s.jobs[2];
  EXPECT_EQ(j.argv, (Strings{"python", "examples/python/train.py", "--steps", "12", "--batch-size", "64"}));
  EXPECT_EQ(j.env.at("PYTORCH_CUDA_ALLOC_CONF"), "backend:cudaMallocAsync");
  EXPECT_EQ(j.env.at("PYTHONUNBUFFERED"), "1");
  EXPECT_EQ(j.matrix, (std::map<std::string, std::string>{{"alloc", "backend:cudaMallocAsync"}}));
  EXPECT_DOUBLE_EQ(j.timeout, 600);
  EXPECT_DOUBLE_EQ(j.grace, 5);
  ASSERT_EQ(j.observe.size(), 3u);
  EXPECT_EQ(j.observe[1].key, "batch_size");
  EXPECT_EQ(j.observe[1].pattern, "bs=(\\d+)");
  EXPECT_EQ(j.memory.limit, 8ull << 30);
  ASSERT_EQ(j.memory.schedule.size(), 1u);
  EXPECT_EQ(j.memory.schedule[0].at_step, 8);
  EXPECT_EQ(j.memory.schedule[0].limit, 6ull << 30);
  ASSERT_EQ(j.faults.size(), 1u);
  EXPECT_EQ(j.faults[0].name, "oom-at-5");
  EXPECT_EQ(j.faults[0].where.line, 17);
  EXPECT_EQ(j.restart.on, (Strings{"oom"}));
  ASSERT_EQ(j.expect.size(), 2u);
  EXPECT_EQ(j.expect[0].policy, "exit");
  EXPECT_EQ(j.expect[0].args, (nlohmann::json{{"code", 0}}));
  EXPECT_EQ(j.expect[1].args["factor"], 0.5);
  EXPECT_EQ(j.expect[1].args["min"], 8);
  EXPECT_EQ(j.where.str(), "s.yaml:11:5");
}

TEST(Suite, NameDefaultsToTheFileStemAndDirIsAbsolute) {
  const std::string dir = (std::filesystem::temp_directory_path() / "oomh-suite-test").string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/nightly-checks.yaml";
  {
    std::ofstream out(path);
    out << "version: 1\njobs:\n  - name: a\n    run: ['true']\n";
  }
  auto load = load_suite(path);
  ASSERT_TRUE(load.ok()) << (load.error().empty() ? "" : load.error()[0].str());
  EXPECT_EQ(load->name, "nightly-checks");
  EXPECT_EQ(load->file, path);
  EXPECT_EQ(load->dir, dir);
  std::filesystem::remove_all(dir);
}

TEST(Suite, MissingFileSaysSo) {
  auto load = load_suite("/nonexistent/dir/suite.yaml");
  ASSERT_EQ(load.error().size(), 1u);
  EXPECT_EQ(load.error()[0].str(), "/nonexistent/dir/suite.yaml: cannot read suite: No such file or directory");
}

TEST(Suite, DefaultsMergeKeyByKeyAndJobsOverride) {
  const Suite s = load_ok(R"(
version: 1
defaults:
  timeout: 2m
  grace: 1s
  env: {A: "1", B: 2, C: true}
  memory: {limit: 8GiB, reserve: 1GiB}
  restart: {max: 2, on: [oom, signal]}
  observe: {step: 'step (\d+)'}
  expect: [exit: 0]
  probe: none
jobs:
  - name: plain
    run: "true"
  - name: custom
    run: "true"
    timeout: 30s
    env: {B: "3", D: x}
    memory: {limit: 4GiB}
    restart: {max: 5}
    observe: {loss: 'loss=([0-9.]+)'}
    expect: [oom_visible]
    probe: python
)");
  const JobSpec* plain = job_named(s, "plain");
  const JobSpec* custom = job_named(s, "custom");
  ASSERT_TRUE(plain && custom);
  EXPECT_DOUBLE_EQ(plain->timeout, 120);
  EXPECT_DOUBLE_EQ(plain->grace, 1);
  EXPECT_EQ(plain->env, (std::map<std::string, std::string>{{"A", "1"}, {"B", "2"}, {"C", "true"}}));
  EXPECT_EQ(plain->probe, ProbeMode::none);
  EXPECT_EQ(plain->expect.size(), 1u);

  EXPECT_DOUBLE_EQ(custom->timeout, 30);
  EXPECT_DOUBLE_EQ(custom->grace, 1);
  EXPECT_EQ(custom->env, (std::map<std::string, std::string>{{"A", "1"}, {"B", "3"}, {"C", "true"}, {"D", "x"}}));
  EXPECT_EQ(custom->memory.limit, 4ull << 30);
  EXPECT_EQ(custom->memory.reserve, 1ull << 30);
  EXPECT_EQ(custom->restart.max, 5);
  EXPECT_EQ(custom->restart.on, (Strings{"oom", "signal"}));
  ASSERT_EQ(custom->observe.size(), 2u);
  EXPECT_EQ(custom->observe[0].key, "step");
  EXPECT_EQ(custom->observe[1].key, "loss");
  ASSERT_EQ(custom->expect.size(), 1u);
  EXPECT_EQ(custom->expect[0].policy, "oom_visible");
  EXPECT_EQ(custom->probe, ProbeMode::python);
}

TEST(Suite, CommandsSplitLikeAShellOrRunInOne) {
  const Suite s = load_ok(R"yaml(
version: 1
jobs:
  - name: split
    run: python -c 'print("a b")' --name "two words" back\ slash
  - name: list
    run: [python, -c, "print(1) ; print(2)"]
  - name: sh
    shell: true
    run: python train.py | tee log.txt
)yaml");
  EXPECT_EQ(job_named(s, "split")->argv, (Strings{"python", "-c", "print(\"a b\")", "--name", "two words", "back slash"}));
  EXPECT_EQ(job_named(s, "list")->argv, (Strings{"python", "-c", "print(1) ; print(2)"}));
  EXPECT_EQ(job_named(s, "sh")->argv, (Strings{"/bin/sh", "-c", "python train.py | tee log.txt"}));
  EXPECT_TRUE(job_named(s, "sh")->shell);
}

TEST(Suite, MatrixExpandsOnlyJobsThatUseIt) {
  const Suite s = load_ok(R"(
version: 1
matrix:
  alloc: [default, async]
  batch: [32, 64]
  exclude:
    - {alloc: async, batch: 32}
  include:
    - {alloc: async, extra: "--compile"}
    - {alloc: vmm, batch: 16}
jobs:
  - name: once
    run: python train.py
  - name: by-alloc-{alloc}
    run: python train.py {extra}
  - name: both-{alloc}-{batch}
    run: python train.py --batch-size {batch}
    env: {ALLOC: "{alloc}"}
)");
  Strings names;
  for (const auto& j : s.jobs) names.push_back(j.name);
  EXPECT_EQ(names, (Strings{"once", "by-alloc-default", "by-alloc-async", "by-alloc-vmm",
                            "both-default-32", "both-default-64", "both-async-64", "both-vmm-16"}));
  EXPECT_EQ(job_named(s, "by-alloc-async")->argv, (Strings{"python", "train.py", "--compile"}));
  // A variable this combination lacks expands to "" (one empty argument: the word stays a word).
  EXPECT_EQ(job_named(s, "by-alloc-default")->argv, (Strings{"python", "train.py", ""}));
  EXPECT_EQ(job_named(s, "both-vmm-16")->argv.back(), "16");
  EXPECT_EQ(job_named(s, "both-async-64")->env.at("ALLOC"), "async");
  EXPECT_TRUE(job_named(s, "once")->matrix.empty());
  EXPECT_EQ(job_named(s, "both-default-64")->matrix, (std::map<std::string, std::string>{{"alloc", "default"}, {"batch", "64"}}));
}

TEST(Suite, ExpansionIsDeterministic) {
  const std::string text = R"(
version: 1
matrix: {a: [x, y, z], b: [1, 2]}
jobs:
  - {name: "j-{a}-{b}", run: "echo {a} {b}"}
  - {name: "k-{b}", run: "echo {b}"}
)";
  const Suite one = load_ok(text), two = load_ok(text);
  ASSERT_EQ(one.jobs.size(), 8u);
  for (size_t i = 0; i < one.jobs.size(); ++i) {
    EXPECT_EQ(one.jobs[i].name, two.jobs[i].name);
    EXPECT_EQ(one.jobs[i].argv, two.jobs[i].argv);
  }
  EXPECT_EQ(one.jobs[0].name, "j-x-1");
  EXPECT_EQ(one.jobs[1].name, "j-x-2");
  EXPECT_EQ(one.jobs[6].name, "k-1");
}

TEST(Suite, TemplatesEscapesAndRuntimeVariables) {
  const Suite s = load_ok(R"(
version: 1
matrix: {tag: [a]}
jobs:
  - name: "{{literal}}-{tag}"
    run: ["awk", "{{print $1}}", "{suite_dir}/data.txt", "--out", "{workdir}/out-{attempt}.txt"]
    cwd: sub/dir
    env: {CKPT: "{workdir}/ckpt.pt", T: "{tag}"}
  - name: in-workdir
    run: "true"
    cwd: "{workdir}/run"
  - name: abs
    run: "true"
    cwd: /tmp
  - name: observe-keeps-braces
    run: "true"
    observe: {step: 'step (\d{1,6})'}
)");
  const JobSpec* j = job_named(s, "{literal}-a");
  ASSERT_TRUE(j);
  EXPECT_EQ(j->argv, (Strings{"awk", "{{print $1}}", "/suites/demo/data.txt", "--out", "{workdir}/out-{attempt}.txt"}));
  EXPECT_EQ(j->cwd, "/suites/demo/sub/dir");
  EXPECT_EQ(j->env.at("CKPT"), "{workdir}/ckpt.pt");
  EXPECT_EQ(j->env.at("T"), "a");
  EXPECT_EQ(job_named(s, "in-workdir")->cwd, "{workdir}/run");
  EXPECT_EQ(job_named(s, "abs")->cwd, "/tmp");
  EXPECT_EQ(job_named(s, "observe-keeps-braces")->observe[0].pattern, "step (\\d{1,6})");

  const JobSpec r = resolve_runtime(*j, "/runs/7/job", 2);
  EXPECT_EQ(r.argv, (Strings{"awk", "{print $1}", "/suites/demo/data.txt", "--out", "/runs/7/job/out-2.txt"}));
  EXPECT_EQ(r.env.at("CKPT"), "/runs/7/job/ckpt.pt");
  EXPECT_EQ(r.cwd, "/suites/demo/sub/dir");
  EXPECT_EQ(resolve_runtime(*job_named(s, "in-workdir"), "/w", 0).cwd, "/w/run");
}

TEST(Suite, ExpectationsAreNormalisedByTheRegistry) {
  const Suite s = load_ok(R"(
version: 1
jobs:
  - name: a
    run: "true"
    expect:
      - exit: 3
      - peak_below: 8GiB
      - oom_visible
      - completes: 40
      - graceful_exit: {within: 30s}
      - no_hang:
      - batch_halving
      - checkpoint_resume: {reference: {rtol: 1e-3}}
)");
  const auto& e = s.jobs.at(0).expect;
  ASSERT_EQ(e.size(), 8u);
  EXPECT_EQ(e[0].args, (nlohmann::json{{"code", 3}}));
  EXPECT_EQ(e[1].args, (nlohmann::json{{"bytes", 8ull << 30}}));
  EXPECT_EQ(e[2].args, nlohmann::json::object());
  EXPECT_EQ(e[3].args["steps"], 40);
  EXPECT_DOUBLE_EQ(e[4].args["within"].get<double>(), 30.0);
  EXPECT_EQ(e[4].args["message"], oomh::oom::message_pattern());
  EXPECT_DOUBLE_EQ(e[5].args["stall"].get<double>(), 60.0);
  EXPECT_DOUBLE_EQ(e[6].args["factor"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(e[7].args["reference"]["rtol"].get<double>(), 1e-3);
  EXPECT_EQ(e[7].args["reference"]["metric"], "loss");
  EXPECT_EQ(e[3].where.line, 10);
  // `completes: 40` tells the trace what the job must reach.
  EXPECT_EQ(s.jobs[0].target_step, 40);
}

TEST(Suite, TargetStepWinsOverCompletes) {
  const Suite s = load_ok("version: 1\njobs:\n  - {name: a, run: 'true', target_step: 12, expect: [completes: 5]}\n");
  EXPECT_EQ(s.jobs[0].target_step, 12);
}

TEST(Suite, StepBaseComesFromDefaultsAndTheJobAndIsOneWithout) {
  // Note [Step numbering] in job_fields.cpp: a fault's step is passed through in the job's numbering.
  const Suite s = load_ok("version: 1\ndefaults: {step_base: 0}\njobs:\n  - {name: a, run: 'true', faults: [{when: {step: 0}}]}\n"
                          "  - {name: b, run: 'true', step_base: 1}\n");
  EXPECT_EQ(s.jobs[0].step_base, 0);
  EXPECT_EQ(s.jobs[0].plan()["rules"][0]["when"]["step"], 0);
  EXPECT_EQ(s.jobs[1].step_base, 1);
  EXPECT_EQ(load_ok("version: 1\njobs:\n  - {name: a, run: 'true'}\n").jobs[0].step_base, 1);
}

TEST(Suite, FaultRulesAreNormalisedToThePlanFormat) {
  const Suite s = load_ok(R"(
version: 1
jobs:
  - name: a
    run: "true"
    memory:
      limit: 1.5GB
      schedule:
        - {at: {step: 8}, limit: 6GiB}
        - {at: {after: 1m}, limit: 512MiB}
    faults:
      - name: first
        when: {nth: 3, entry: cuMemCreate, min_size: 1KiB, max_size: 2MiB, after: 250ms}
      - when: {steps: {from: 2, to: 4}, phase: backward, probability: 0.25, repeat: 0, rank: 1, device: 0, local_rank: 0}
        fail: {until_freed: 1GiB}
      - name: forever
        when: {every: 10}
        fail: {forever: true}
)");
  const JobSpec& j = s.jobs.at(0);
  ASSERT_EQ(j.faults.size(), 3u);
  EXPECT_EQ(j.faults[1].name, "fault-2");
  const nlohmann::json plan = j.plan();
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "version": 1, "seed": 0,
    "rules": [
      {"name": "first", "when": {"nth": 3, "entry": ["cuMemCreate"], "min_size": 1024, "max_size": 2097152, "after": 0.25},
       "fail": {"times": 1}},
      {"name": "fault-2", "when": {"steps": {"from": 2, "to": 4}, "phase": "backward", "probability": 0.25,
                                   "rank": 1, "device": 0, "local_rank": 0},
       "fail": {"until_freed": 1073741824}},
      {"name": "forever", "when": {"every": 10}, "fail": {"forever": true}}
    ],
    "caps": [{"limit": 1500000000}, {"limit": 6442450944, "at": {"step": 8}}, {"limit": 536870912, "at": {"after": 60.0}}]
  })");
  EXPECT_EQ(plan, expected) << plan.dump(2);
  // Without faults the caps stay: the GPU is still the smaller one the suite describes.
  const nlohmann::json bare = j.plan(false);
  EXPECT_TRUE(bare["rules"].empty());
  EXPECT_EQ(bare["caps"], expected["caps"]);
  // A job without memory settings has no caps at all.
  EXPECT_EQ(load_ok("version: 1\njobs: [{name: a, run: 'true'}]\n").jobs[0].plan(),
            nlohmann::json::parse(R"({"version": 1, "seed": 0, "rules": [], "caps": []})"));
}

// `counts: footprint` goes into the plan (docs/fault-plan.md, `cap_counts`); it merges from defaults like
// every memory key, and `allocations` (the default) leaves the plan as it was.
TEST(Suite, WhatACapCountsGoesIntoThePlan) {
  const Suite s = load_ok(R"(version: 1
defaults: {memory: {counts: footprint}}
jobs:
  - {name: a, run: 'true', memory: {limit: 8GiB}}
  - {name: b, run: 'true', memory: {limit: 8GiB, counts: allocations}}
)");
  EXPECT_TRUE(s.jobs[0].memory.counts_footprint);
  EXPECT_EQ(s.jobs[0].plan()["cap_counts"], "footprint");
  EXPECT_EQ(s.jobs[0].plan(false)["cap_counts"], "footprint");  // a reference run counts the same way
  EXPECT_FALSE(s.jobs[1].memory.counts_footprint);
  EXPECT_FALSE(s.jobs[1].plan().contains("cap_counts"));
}

// Note [A probe that pays for what is checked] (include/oomharness/evidence.h): a job's OOMH_EVIDENCE is what
// its checks read, and phases where a fault waits for one; for every job, what its findings read (Note [Findings
// on every job] in policies/findings.h).
TEST(Suite, AJobsEvidenceIsWhatItsChecksAndFaultsNeed) {
  const Suite s = load_ok(R"(version: 1
jobs:
  - {name: bare, run: 'true', expect: [exit, oom_visible, completes, graceful_exit, no_hang]}
  - {name: halving, run: 'true', expect: [batch_halving, {peak_below: 1GiB}]}
  - {name: resume, run: 'true', expect: [checkpoint_resume, zero_grad, memory_stable]}
  - {name: phase, run: 'true', faults: [{when: {step: 3, phase: backward}}], expect: [eval_no_grad]}
  - {name: golden, run: 'true', env: {OOMH_RECORD_STEP: '3'}}
  - {name: step, run: 'true', faults: [{when: {step: 3}}], expect: [exit]}
)");
  EXPECT_EQ(s.jobs[0].evidence(), "batches,grads,evaluation") << "the findings' evidence alone";
  EXPECT_EQ(s.jobs[1].evidence(), "batches,data,grads,evaluation");
  EXPECT_EQ(s.jobs[2].evidence(), "batches,data,losses,memory,grads,evaluation,checkpoints");
  EXPECT_EQ(s.jobs[3].evidence(), "batches,grads,evaluation,phases");
  EXPECT_EQ(s.jobs[4].evidence(), "batches,grads,evaluation,phases") << "a sweep's golden run names each allocation's phase";
  EXPECT_EQ(s.jobs[5].evidence(), "batches,grads,evaluation,phases") << "a step fault fires in the step's training work";
}

TEST(Suite, EveryErrorIsReportedInFileOrder) {
  const auto errors = errors_of(R"(version: 1
jobs:
  - name: a
    run: python train.py
    tiemout: 5m
    memory: {limit: 8XB}
  - name: b
    run: "true"
    expect: [batch_halfing]
    restart: {max: -1}
)");
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0], "s.yaml:5:5: unknown key 'tiemout' in job 'a' (did you mean 'timeout'?)");
  EXPECT_EQ(errors[1].substr(0, 50), "s.yaml:6:21: memory.limit of job 'a': bad size '8X");
  EXPECT_EQ(errors[2], "s.yaml:9:14: unknown policy 'batch_halfing' in expect[0] of job 'b' (did you mean 'batch_halving'?)");
  EXPECT_EQ(errors[3], "s.yaml:10:20: restart.max of job 'b': must be at least 0, got '-1'");
}

TEST(Suite, ErrorsStopAtALimit) {
  std::string text = "version: 1\njobs:\n";
  for (int i = 0; i < 30; ++i) text += "  - {name: j" + std::to_string(i) + ", run: 'true', timeout: soon}\n";
  const auto errors = errors_of(text);
  ASSERT_EQ(errors.size(), 21u);
  EXPECT_EQ(errors.back(), "s.yaml: 10 more error(s) not shown; fix the ones above first");
}

TEST(Suite, DefaultsErrorsAreReportedOnce) {
  const auto errors = errors_of("version: 1\ndefaults: {timeout: soon}\njobs:\n  - {name: a, run: 'true'}\n  - {name: b, run: 'true'}\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("s.yaml:2:21: timeout of defaults: bad duration 'soon'", 0), 0u) << errors[0];
}

TEST(Suite, SecondDocumentIsRefused) {
  const auto errors = errors_of("version: 1\njobs: [{name: a, run: 'true'}]\n---\nversion: 1\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "s.yaml:4:1: a suite file holds one YAML document; this is a second one ('---')");
}

TEST(Suite, MustFailMarksAnExpectationThatTheCheckFails) {
  Suite s = load_ok(R"(version: 1
jobs:
  - name: broken
    run: trainer --bug skip-batch
    expect:
      - exit: 0
      - batch_halving: {factor: 0.5, no_sample_loss: true}
        must_fail: true
      - oom_visible
      - must_fail: false
        completes: 12
)");
  const JobSpec* j = job_named(s, "broken");
  ASSERT_NE(j, nullptr);
  ASSERT_EQ(j->expect.size(), 4u);
  EXPECT_FALSE(j->expect[0].must_fail);
  EXPECT_EQ(j->expect[1].policy, "batch_halving");
  EXPECT_TRUE(j->expect[1].must_fail);
  EXPECT_EQ(j->expect[1].args["no_sample_loss"], true);
  EXPECT_FALSE(j->expect[2].must_fail);
  EXPECT_EQ(j->expect[3].policy, "completes");
  EXPECT_FALSE(j->expect[3].must_fail);
}

TEST(Suite, MustFailIsCheckedLikeEveryOtherKey) {
  auto errors = errors_of(R"(version: 1
jobs:
  - name: broken
    run: trainer
    expect:
      - batch_halving: {factor: 0.5}
        must_fail: maybe
)");
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0], "s.yaml:7:20: expect[0] of job 'broken': must_fail: expected true or false, got 'maybe'");
  errors = errors_of(R"(version: 1
jobs:
  - name: broken
    run: trainer
    expect:
      - {must_fail: true}
)");
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("each item names one policy (and may add must_fail), got 0 policy keys"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace oomh

namespace oomh {
namespace {

// Issue 15: `ranks` from defaults or the job; the runner's hang limit is no_hang's `stall`, else its default.
TEST(Suite, RanksAndTheHangStallReachTheJob) {
  auto load = load_suite_text(R"(
version: 1
defaults: {ranks: 2}
jobs:
  - name: ddp
    run: python ddp.py
    expect: [no_hang: {stall: 5s}]
  - name: four
    run: python ddp.py
    ranks: 4
    restart: {max: 1, scope: all}
  - name: one
    run: python train.py
    ranks: 1
)", "s.yaml", "/suites");
  ASSERT_TRUE(load.ok());
  const auto& jobs = load->jobs;
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].ranks, 2);
  EXPECT_EQ(jobs[0].hang_stall, 5);
  EXPECT_EQ(jobs[1].ranks, 4);
  EXPECT_EQ(jobs[1].hang_stall, 60);
  EXPECT_EQ(jobs[1].restart.max, 1);  // `scope: all` is accepted: it is what restarts do (malformed/ has `rank`)
  EXPECT_EQ(jobs[2].ranks, 1);
}

// Issue 45 (Note [Ranks on several nodes] in runner/src/exec/node_group.h): `ranks` is nodes x ranks_per_node,
// from defaults or the job; a `ranks` alone spreads evenly; anything that does not say how the ranks spread,
// or says it twice differently, is refused.
TEST(Suite, NodesAndRanksPerNodeMakeTheRanks) {
  auto load = load_suite_text(R"(
version: 1
defaults: {nodes: 2}
jobs:
  - name: two-by-three
    run: python ddp.py
    ranks_per_node: 3
  - name: four-spread
    run: python ddp.py
    ranks: 4
  - name: said-twice-alike
    run: python ddp.py
    ranks: 6
    nodes: 3
    ranks_per_node: 2
)", "s.yaml", "/suites");
  ASSERT_TRUE(load.ok());
  const auto& jobs = load->jobs;
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].ranks, 6);
  EXPECT_EQ(jobs[0].nodes, 2);
  EXPECT_EQ(jobs[0].ranks_per_node, 3);
  EXPECT_EQ(jobs[1].ranks, 4);
  EXPECT_EQ(jobs[1].ranks_per_node, 2);
  EXPECT_EQ(jobs[2].ranks, 6);
  EXPECT_EQ(jobs[2].nodes, 3);

  for (const auto& [fields, words] : std::vector<std::pair<std::string, std::string>>{
           {"nodes: 2", "needs ranks_per_node"},
           {"nodes: 2, ranks: 3", "cannot be spread evenly"},
           {"nodes: 2, ranks_per_node: 2, ranks: 3", "is not nodes x ranks_per_node (2 x 2)"},
           {"nodes: 0, ranks_per_node: 1", "at least 1"},
           {"nodes: 65, ranks_per_node: 1", "at most 64 nodes"},
           {"nodes: 2, ranks_per_node: 65", "at most 64 ranks per node"}}) {
    auto bad = load_suite_text("version: 1\njobs:\n  - {name: j, run: python ddp.py, " + fields + "}\n", "s.yaml", "/suites");
    ASSERT_FALSE(bad.ok()) << fields;
    std::string all;
    for (const auto& e : bad.error()) all += e.str() + "\n";
    EXPECT_NE(all.find(words), std::string::npos) << fields << ": " << all;
  }
}

}  // namespace
}  // namespace oomh
