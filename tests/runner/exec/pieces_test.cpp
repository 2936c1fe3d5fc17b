// The runner's pieces that need no process: line splitting, the OOM detector, observe regexes, the
// output tail, event-log ingestion, GPU packing, the plan, templating and the job environment.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "exec/cpu_share.h"
#include "exec/gpu_packing.h"
#include "exec/launch.h"
#include "exec/node_group.h"
#include "exec/output.h"
#include "oomharness/events.h"

namespace oomh::exec {
namespace {

constexpr uint64_t GiB = 1ull << 30;

TEST(LineSplitter, JoinsPiecesAndKeepsALastLineWithoutNewline) {
  LineSplitter s;
  std::vector<std::string> lines;
  auto on = [&](std::string_view l) { lines.emplace_back(l); };
  s.feed("ab", 2, on);
  s.feed("c\r\nde\nf", 7, on);
  EXPECT_EQ(lines, (std::vector<std::string>{"abc", "de"}));
  s.finish(on);
  EXPECT_EQ(lines.back(), "f");
}

TEST(LineSplitter, CutsOverlongLines) {
  LineSplitter s;
  std::string big(kMaxLine + 10, 'x');
  size_t count = 0;
  s.feed(big.data(), big.size(), [&](std::string_view l) { ++count; EXPECT_EQ(l.size(), kMaxLine); });
  EXPECT_EQ(count, 1u);
}

TEST(OomDetector, MatchesTheKnownMessagesCaseInsensitively) {
  EXPECT_TRUE(is_oom_message("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"));
  EXPECT_TRUE(is_oom_message("CUDA_ERROR_OUT_OF_MEMORY"));
  EXPECT_TRUE(is_oom_message("error: cudaErrorMemoryAllocation"));
  EXPECT_TRUE(is_oom_message("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"));
  EXPECT_TRUE(is_oom_message("OUT OF MEMORY"));
  EXPECT_FALSE(is_oom_message("step 5 batch 32 loss 0.25"));
  EXPECT_FALSE(is_oom_message("memory is fine"));
}

TEST(LineObserver, GivesOneObservedEventPerMatchingRegex) {
  std::vector<ObserveSpec> specs = {{"step", R"(step (\d+))", {}}, {"loss", R"(loss ([0-9.]+))", {}}};
  LineObserver obs(specs);
  std::vector<Event> out;
  obs.match("step 7 batch 32 loss 0.5", "stdout", 1.0, 42, out);
  obs.match("nothing here", "stderr", 2.0, 42, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].kind, "observed");
  EXPECT_EQ(out[0].src, "runner");
  EXPECT_EQ(out[0].text("key"), "step");
  EXPECT_EQ(out[0].text("value"), "7");
  EXPECT_EQ(out[0].text("stream"), "stdout");
  EXPECT_EQ(out[1].text("value"), "0.5");
  EXPECT_EQ(out[1].text("line"), "step 7 batch 32 loss 0.5");
}

TEST(OutputTail, KeepsTheLastLines) {
  OutputTail t(3);
  for (int i = 0; i < 10; ++i) t.add("line " + std::to_string(i));
  EXPECT_EQ(t.text(), "line 7\nline 8\nline 9\n");
}

TEST(EventLog, ReadsValidLinesAndCountsBadOnes) {
  std::string path = testing::TempDir() + "exec_events.jsonl";
  {
    std::ofstream f(path);
    f << R"({"t":2.5,"pid":1,"src":"probe","kind":"step","fields":{"step":3}})" << "\n";
    f << "garbage\n\n";
    f << R"({"t":1.5,"pid":1,"src":"shim","kind":"inject","fields":{"size":10}})";  // no final newline
  }
  size_t bad = 0;
  std::vector<Event> ev = read_event_log(path, &bad);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, "step");
  EXPECT_EQ(ev[0].integer("step"), 3);
  EXPECT_EQ(ev[1].integer("size"), 10);
  EXPECT_EQ(bad, 1u);
  EXPECT_TRUE(read_event_log(path + ".missing", &bad).empty());
  std::remove(path.c_str());
}

TEST(GpuPacker, PacksCappedJobsWhileTheyFitAndGivesUncappedOnesAGpu) {
  GpuPacker p({{0, 10 * GiB, 1 * GiB}, {1, 10 * GiB, 0}}, 1 * GiB);  // capacity: 8 GiB and 9 GiB
  auto a = p.place({false, 5 * GiB});
  auto b = p.place({false, 4 * GiB});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->gpu, 0);
  EXPECT_EQ(b->gpu, 1);  // 5 + 4 > 8 on GPU 0
  auto c = p.place({false, 3 * GiB});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->gpu, 0);
  EXPECT_FALSE(p.place({true, 0}));            // no empty GPU for an uncapped job
  EXPECT_FALSE(p.place({false, 6 * GiB}));     // fits nowhere now: waits
  p.release(*b);
  auto d = p.place({true, 0});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->gpu, 1);
  EXPECT_FALSE(p.place({false, 1 * GiB}));     // GPU 0 has 0 left, GPU 1 is taken whole
}

// Note [GPU packing]: capped jobs spread over the GPUs before they share one.
TEST(GpuPacker, SpreadsCappedJobsOverTheGpusFirst) {
  GpuPacker p({{0, 80 * GiB, 0}, {1, 80 * GiB, 0}, {2, 80 * GiB, 0}, {3, 80 * GiB, 0}}, 1 * GiB);
  std::vector<int> per_gpu(4, 0);
  std::vector<Placement> placed;
  for (int i = 0; i < 8; ++i) {
    auto q = p.place({false, 3 * GiB});
    ASSERT_TRUE(q && q->gpu);
    ++per_gpu[static_cast<size_t>(*q->gpu)];
    placed.push_back(*q);
  }
  EXPECT_EQ(per_gpu, (std::vector<int>{2, 2, 2, 2}));
  p.release(placed[5]);  // GPU 1 now runs one job: the next goes there
  auto next = p.place({false, 3 * GiB});
  ASSERT_TRUE(next);
  EXPECT_EQ(next->gpu, 1);
}

TEST(GpuPacker, AJobTooBigForEveryGpuGetsOneToItself) {
  GpuPacker p({{3, 4 * GiB, 0}}, 1 * GiB);
  auto a = p.place({false, 100 * GiB});
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->exclusive);
  EXPECT_EQ(a->gpu, 3);
}

// Note [One GPU per rank]: a job's ranks get distinct GPUs, all at once or none.
TEST(GpuPacker, PlacesEachRankOnItsOwnGpuAllOrNone) {
  GpuPacker p({{0, 10 * GiB, 0}, {1, 10 * GiB, 0}, {2, 10 * GiB, 0}}, 1 * GiB);  // 9 GiB each
  auto two = p.place_each({true, 0}, 2);
  ASSERT_TRUE(two);
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].gpu, 0);
  EXPECT_EQ((*two)[1].gpu, 1);
  EXPECT_FALSE(p.place_each({true, 0}, 2));  // one GPU left: the job waits, and takes none meanwhile
  auto one = p.place({true, 0});
  ASSERT_TRUE(one);
  EXPECT_EQ(one->gpu, 2);  // still free after the failed place_each
  p.release(*one);
  for (const Placement& q : *two) p.release(q);
  // Capped ranks share GPUs with other capped jobs, one rank per GPU: 3 ranks of 4 GiB (+1 GiB context).
  auto other = p.place({false, 6 * GiB});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->gpu, 0);
  auto three = p.place_each({false, 4 * GiB}, 3);
  EXPECT_FALSE(three) << "GPU 0 has 3 GiB left, so only two GPUs can take a 5 GiB rank";
  auto two_capped = p.place_each({false, 4 * GiB}, 2);
  ASSERT_TRUE(two_capped);
  EXPECT_EQ((*two_capped)[0].gpu, 1);
  EXPECT_EQ((*two_capped)[1].gpu, 2);
  EXPECT_FALSE(p.place_each({true, 0}, 4));  // more ranks than GPUs: never
  GpuPacker none({}, GiB);
  auto cpu = none.place_each({true, 0}, 4);  // no GPUs: one place without a GPU
  ASSERT_TRUE(cpu);
  ASSERT_EQ(cpu->size(), 1u);
  EXPECT_FALSE(cpu->front().gpu);
}

TEST(GpuPacker, WithoutGpusEveryJobRunsWithoutOne) {
  GpuPacker p({}, GiB);
  auto a = p.place({true, 0});
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->gpu);
}

TEST(GpuInventory, ParsesNvidiaSmiAndSelects) {
  GpuSurvey survey = parse_gpu_query("0, 81559, 1, NVIDIA H100 80GB HBM3, 580.159.04\n1, 81559, 40000, NVIDIA H100 80GB HBM3, 580.159.04\nbad line\n");
  EXPECT_EQ(survey.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(survey.driver_version, "580.159.04");
  const auto& g = survey.gpus;
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[1].index, 1);
  EXPECT_EQ(g[1].total, 81559ull << 20);
  EXPECT_EQ(g[1].used, 40000ull << 20);
  auto s = select_gpus(g, {1});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].index, 1);
  EXPECT_EQ(parse_gpu_query("0, 1024, 0\n").gpus.size(), 1u);  // name and driver are optional
  EXPECT_TRUE(parse_gpu_query("0, [N/A], 0\n").gpus.empty());
  EXPECT_EQ(parse_smi_cuda_version("| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0     |"), "13.0");
  EXPECT_FALSE(parse_smi_cuda_version("NVIDIA-SMI has failed"));
}

TEST(GpuNeed, ACappedJobNeedsItsLargestCapPlusItsReservationPlusItsContext) {
  JobSpec job;
  EXPECT_TRUE(gpu_need(job).exclusive);
  job.memory.limit = 2 * GiB;
  job.memory.schedule.push_back({int64_t{8}, std::nullopt, 3 * GiB});
  job.memory.reserve = GiB;
  EXPECT_FALSE(gpu_need(job).exclusive);
  EXPECT_EQ(gpu_need(job).bytes, 4 * GiB + kContextAllowance);  // an allocations cap leaves the context out
  job.memory.counts_footprint = true;
  EXPECT_EQ(gpu_need(job).bytes, 4 * GiB);  // a footprint cap holds it
  job.memory.reserve = 0;
  job.memory.leave = GiB;
  EXPECT_TRUE(gpu_need(job).exclusive);  // its sidecar takes all of the GPU but 1 GiB
}

std::string env_value(const std::vector<std::string>& env, const std::string& name) {
  for (const std::string& kv : env)
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
  return "<unset>";
}

TEST(Launch, EnvironmentCarriesTheHarness) {
  setenv("LD_PRELOAD", "/user/lib.so", 1);
  setenv("PYTHONPATH", "/user/py", 1);
  JobSpec job;
  job.name = "j";
  job.env = {{"MY_VAR", "{workdir}/x"}};
  HarnessPaths paths{"/h/inject.so", "/h/python", "/h/reserve", "/h/double", ""};
  AttemptContext ctx{"j", 2, "/oomh-1-0-2", "/o/ev.jsonl", "{\"version\":1}", {}, "/w", {1}, std::nullopt};
  auto env = job_environment(job, paths, ctx);
  EXPECT_EQ(env_value(env, "LD_PRELOAD"), "/user/lib.so:/h/inject.so");
  EXPECT_EQ(env_value(env, "PYTHONPATH"), "/h/python:/user/py");
  EXPECT_EQ(env_value(env, "OOMH_PROBE"), "1");
  EXPECT_EQ(env_value(env, "OOMH_CONTROL"), "/oomh-1-0-2");
  EXPECT_EQ(env_value(env, "OOMH_EVENTS"), "/o/ev.jsonl");
  EXPECT_EQ(env_value(env, "OOMH_PLAN"), "{\"version\":1}");
  EXPECT_EQ(env_value(env, "OOMH_JOB"), "j");
  EXPECT_EQ(env_value(env, "OOMH_ATTEMPT"), "2");
  EXPECT_EQ(env_value(env, "MY_VAR"), "/w/x");
  EXPECT_EQ(env_value(env, "CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(env_value(env, "LD_LIBRARY_PATH").rfind("/h/double", 0), 0u);
  EXPECT_EQ(env_value(env, "OOMH_SNAPSHOT"), "<unset>");
  // memory: {snapshot: true} reaches the probe (it was parsed and dropped before issue 19's GPU run showed
  // no history); the job's own OOMH_SNAPSHOT wins.
  job.memory.snapshot = true;
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OOMH_SNAPSHOT"), "/o/snapshots");
  job.env["OOMH_SNAPSHOT"] = "/mine";
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OOMH_SNAPSHOT"), "/mine");
  job.env.erase("OOMH_SNAPSHOT");
  job.memory.snapshot = false;
  job.probe = ProbeMode::none;
  env = job_environment(job, paths, ctx);
  EXPECT_EQ(env_value(env, "PYTHONPATH"), "/user/py");
  EXPECT_EQ(env_value(env, "OOMH_PROBE"), "<unset>");
  unsetenv("LD_PRELOAD");
  unsetenv("PYTHONPATH");
}

Event save_event(std::string digest, nlohmann::json completed, const char* src = events::kSrcProbe) {
  Event e;
  e.src = src;
  e.kind = events::kSave;
  e.fields = {{"path", "/w/ckpt.pt"}, {"digest", std::move(digest)}, {"completed", std::move(completed)}};
  return e;
}

// Note [A resume numbered by what it loaded]: what the earlier attempts saved, in their probe's count.
TEST(Launch, TellsAResumeWhatTheEarlierAttemptsSavedAtWhichStep) {
  std::vector<Attempt> earlier(2);
  earlier[0].events = {save_event("00000000000000a2", 2), save_event("00000000000000a4", 4),
                       save_event("00000000000000a4", 4),                    // saved twice at one count: once
                       save_event("00000000000000b0", 2), save_event("00000000000000b0", 6),  // two counts: nothing
                       save_event("not-a-digest", 8), save_event("00000000000000A8", 8),      // not 16 lower-case hex
                       save_event("00000000000000c0", -3), save_event("00000000000000c1", "7"),  // not a count
                       save_event("00000000000000d0", 5, events::kSrcShim)};  // not the probe's
  earlier[1].events = {save_event("00000000000000a6", 6)};
  EXPECT_EQ(saved_steps(earlier), "00000000000000a2:2,00000000000000a4:4,00000000000000a6:6");
  EXPECT_EQ(saved_steps({}), "");
  // Only the last 64 saves: a job that saves every step cannot make the environment grow without bound.
  std::vector<Attempt> many(1);
  for (int k = 0; k < 100; ++k) {
    char digest[17];
    std::snprintf(digest, sizeof digest, "%016x", k);
    many[0].events.push_back(save_event(digest, k));
  }
  std::string text = saved_steps(many);
  EXPECT_EQ(std::count(text.begin(), text.end(), ','), 63);
  EXPECT_EQ(text.rfind("0000000000000024:36,", 0), 0u);  // the 37th save is the first of the last 64

  JobSpec job;
  job.name = "j";
  HarnessPaths paths{"/h/inject.so", "/h/python", "/h/reserve", "", ""};
  AttemptContext ctx{"j", 1, "/oomh-1-0-1", "/o/ev.jsonl", "{}", {}, "/w", {}, std::nullopt};
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OOMH_SAVED_STEPS"), "<unset>");
  ctx.saved_steps = saved_steps(earlier);
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OOMH_SAVED_STEPS"), ctx.saved_steps);
}

// Note [Triton kernels on the virtual device]: Triton's interpreter, unless the job's env says otherwise.
TEST(Launch, RunsTritonKernelsInTheInterpreterOnTheVirtualDevice) {
  JobSpec job;
  job.name = "j";
  HarnessPaths paths{"/h/inject.so", "/h/python", "/h/reserve", "/h/double", "/h/vdouble"};
  AttemptContext ctx{"j", 0, "/oomh-1-0-0", "/o/ev.jsonl", "{}", {}, "/w", {}, std::nullopt};
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "TRITON_INTERPRET"), "<unset>");  // on a GPU
  job.device = DeviceChoice::virtual_device;
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "TRITON_INTERPRET"), "1");
  job.env["TRITON_INTERPRET"] = "0";
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "TRITON_INTERPRET"), "0");
}

// Step faults and step-scheduled caps need the step's allocations to reach the driver: the probe is told
// which steps to begin with an empty cache.
TEST(Launch, TellsTheProbeWhichStepsAFaultTargets) {
  JobSpec job;
  job.name = "j";
  job.faults = {{"a", {{"when", {{"step", 5}, {"phase", "forward"}}}}, {}},
                {"b", {{"when", {{"steps", {{"from", 9}, {"to", 12}}}}}}, {}},
                {"c", {{"when", {{"nth", 3}}}}, {}}};
  job.memory.limit = 100;
  job.memory.schedule = {{int64_t{7}, std::nullopt, 50}, {std::nullopt, 30.0, 40}};
  EXPECT_EQ(job.flush_steps(), (std::vector<int64_t>{5, 7, 9}));
  EXPECT_EQ(job.flush_steps(false), (std::vector<int64_t>{7}));  // without faults only the cap change stays
  HarnessPaths paths{"/h/inject.so", "/h/python", "/h/reserve", "", ""};
  AttemptContext ctx{"j", 0, "/oomh-1-0-0", "/o/ev.jsonl", job.plan().dump(), job.flush_steps(), "/w", {}, std::nullopt};
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OOMH_FLUSH_AT_STEPS"), "5,7,9");
  job.probe = ProbeMode::none;  // C++ code reads it through the C++ probe
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OOMH_FLUSH_AT_STEPS"), "5,7,9");
  ctx.flush_steps.clear();
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OOMH_FLUSH_AT_STEPS"), "<unset>");
}

// Issue 15: a rank of a distributed job gets what torchrun would give it, and the job's env cannot change it.
TEST(Launch, RankEnvironment) {
  JobSpec job;
  job.name = "ddp";
  job.ranks = 2;
  job.env = {{"RANK", "7"}, {"MASTER_PORT", "1"}};
  HarnessPaths paths{"/h/inject.so", "/h/python", "/h/reserve", "", ""};
  AttemptContext ctx{"ddp", 0, "/oomh-1-0-0", "/o/ev.jsonl", "{}", {}, "/w", {}, std::nullopt};
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "RANK"), "7");  // no rank: the job's own env stands
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OOMH_STACKS"), "<unset>");
  ctx.rank = 1;
  ctx.world_size = 2;
  ctx.master_port = 29555;
  ctx.stacks_path = "/o/attempt-0.rank1.stacks.txt";
  auto env = job_environment(job, paths, ctx);
  EXPECT_EQ(env_value(env, "RANK"), "1");
  EXPECT_EQ(env_value(env, "LOCAL_RANK"), "1");
  EXPECT_EQ(env_value(env, "WORLD_SIZE"), "2");
  EXPECT_EQ(env_value(env, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env_value(env, "MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(env_value(env, "MASTER_PORT"), "29555");
  EXPECT_EQ(env_value(env, "OOMH_STACKS"), "/o/attempt-0.rank1.stacks.txt");
  EXPECT_EQ(env_value(env, "CUDA_VISIBLE_DEVICES"), "<unset>");
  EXPECT_EQ(env_value(env, "GROUP_RANK"), "0");
  {
    // Note [Ranks on several nodes] (exec/node_group.h): rank 3 of 4, the second of its node's 2, on node 1,
    // rank 0 on another node's address.
    AttemptContext other = ctx;
    other.rank = 3;
    other.world_size = 4;
    other.local_rank = 1;
    other.local_world_size = 2;
    other.node = 1;
    other.master_addr = "10.213.87.11";
    auto on_node = job_environment(job, paths, other);
    EXPECT_EQ(env_value(on_node, "RANK"), "3");
    EXPECT_EQ(env_value(on_node, "LOCAL_RANK"), "1");
    EXPECT_EQ(env_value(on_node, "WORLD_SIZE"), "4");
    EXPECT_EQ(env_value(on_node, "LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(env_value(on_node, "GROUP_RANK"), "1");
    EXPECT_EQ(env_value(on_node, "MASTER_ADDR"), "10.213.87.11");
    EXPECT_EQ(env_value(on_node, "SLURM_PROCID"), "<unset>") << "not under Slurm: no Slurm variable appears";
    // Note [Slurm's task variables for each rank]: under Slurm, the node agent's own task variables (node 1
    // of 2: SLURM_PROCID 1, SLURM_NTASKS 2) become those of the task the rank stands for.
    setenv("SLURM_JOB_ID", "42", 1);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_LOCALID", "0", 1);
    auto under_slurm = job_environment(job, paths, other);
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_LOCALID");
    EXPECT_EQ(env_value(under_slurm, "SLURM_PROCID"), "3");
    EXPECT_EQ(env_value(under_slurm, "SLURM_LOCALID"), "1");
    EXPECT_EQ(env_value(under_slurm, "SLURM_NODEID"), "1");
    EXPECT_EQ(env_value(under_slurm, "SLURM_NTASKS"), "4");
    EXPECT_EQ(env_value(under_slurm, "SLURM_NPROCS"), "4");
    EXPECT_EQ(env_value(under_slurm, "SLURM_NTASKS_PER_NODE"), "2");
    EXPECT_EQ(env_value(under_slurm, "SLURM_TASKS_PER_NODE"), "2(x2)");
    EXPECT_EQ(env_value(under_slurm, "SLURM_JOB_ID"), "42");
  }
  {
    // Note [One torchrun per node] (exec/node_group.h): node 1's torchrun, of 2 nodes of 2 ranks: one task
    // per node and the rendezvous, no rank of its own (torchrun gives those).
    JobSpec tr = job;
    tr.env.clear();
    AttemptContext node{"ddp", 0, "/oomh-1-0-0", "/o/ev.jsonl", "{}", {}, "/w", {}, std::nullopt};
    node.torchrun_node = 1;
    node.nodes = 2;
    node.world_size = 4;
    node.local_world_size = 2;
    node.master_addr = "10.213.87.11";
    node.master_port = 29600;
    auto env1 = job_environment(tr, paths, node);
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "OOMH_STACKS"})
      EXPECT_EQ(env_value(env1, name), "<unset>") << name;
    EXPECT_EQ(env_value(env1, "MASTER_ADDR"), "10.213.87.11");
    EXPECT_EQ(env_value(env1, "MASTER_PORT"), "29600");
    EXPECT_EQ(env_value(env1, "SLURM_NODEID"), "1");
    EXPECT_EQ(env_value(env1, "SLURM_NNODES"), "2");
    EXPECT_EQ(env_value(env1, "SLURM_PROCID"), "1");
    EXPECT_EQ(env_value(env1, "SLURM_LOCALID"), "0");
    EXPECT_EQ(env_value(env1, "SLURM_NTASKS"), "2");
    EXPECT_EQ(env_value(env1, "SLURM_TASKS_PER_NODE"), "1(x2)");
    // Which jobs run so: several nodes, and a command that starts torchrun (Note [A command that starts torchrun]).
    tr.nodes = 2;
    tr.argv = {"/bin/sh", "-c", "exec torchrun --nnodes=$SLURM_NNODES --nproc_per_node=2 t.py"};
    EXPECT_TRUE(one_torchrun_per_node(tr));
    tr.argv = {"python3", "t.py"};
    EXPECT_FALSE(one_torchrun_per_node(tr));
    tr.argv = {"torchrun", "--nnodes", "1", "--nproc_per_node", "2", "t.py"};
    tr.nodes = 1;
    EXPECT_FALSE(one_torchrun_per_node(tr)) << "one node: one process, as on the local backend";
  }
  // Note [One GPU per rank]: every rank sees every rank's GPU, in rank order; LOCAL_RANK picks its own.
  ctx.gpus = {3, 1};
  env = job_environment(job, paths, ctx);
  EXPECT_EQ(env_value(env, "CUDA_VISIBLE_DEVICES"), "3,1");
  EXPECT_EQ(env_value(env, "LOCAL_RANK"), "1");
  // Note [NVLink multicast off]: off unless the job (or the runner's environment) says otherwise.
  EXPECT_EQ(env_value(env, "NCCL_NVLS_ENABLE"), "0");
  job.env["NCCL_NVLS_ENABLE"] = "1";
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "NCCL_NVLS_ENABLE"), "1");
  job.device = DeviceChoice::virtual_device;  // the virtual device never reaches a GPU
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "CUDA_VISIBLE_DEVICES"), "");
  int port = free_local_port();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

// Note [CPU share of packed jobs]: eight jobs on 16 CPUs get two threads each; one job at a time keeps them all.
TEST(CpuShare, GivesEachConcurrentJobItsShareOfTheCpus) {
  ThreadsPerJob automatic;
  EXPECT_EQ(threads_for_each_job(automatic, 8, 16), 2);
  EXPECT_EQ(threads_for_each_job(automatic, 3, 16), 5);
  EXPECT_EQ(threads_for_each_job(automatic, 32, 16), 1);  // never 0
  EXPECT_EQ(threads_for_each_job(automatic, 1, 16), std::nullopt);
  EXPECT_EQ(threads_for_each_job(*parse_threads_per_job("off"), 8, 16), std::nullopt);
  EXPECT_EQ(threads_for_each_job(*parse_threads_per_job("3"), 1, 16), 3);
  EXPECT_EQ(parse_threads_per_job("auto")->mode, ThreadsPerJob::Mode::automatic);
  for (const char* bad : {"", "0", "-2", "2x", "many"}) EXPECT_FALSE(parse_threads_per_job(bad)) << bad;
  EXPECT_GE(usable_cpus(), 1);
}

TEST(Launch, SetsTheThreadShareUnlessTheJobOrTheRunnerAlreadyDid) {
  unsetenv("OMP_NUM_THREADS");
  JobSpec job;
  job.name = "j";
  HarnessPaths paths{"/h/inject.so", "/h/python", "/h/reserve", "", ""};
  AttemptContext ctx{"j", 0, "/oomh-1-0-0", "/o/ev.jsonl", "{}", {}, "/w", {}, 2};
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OMP_NUM_THREADS"), "2");
  ctx.threads.reset();
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OMP_NUM_THREADS"), "<unset>");
  ctx.threads = 2;
  job.env = {{"OMP_NUM_THREADS", "7"}};
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OMP_NUM_THREADS"), "7");
  job.env.clear();
  setenv("OMP_NUM_THREADS", "5", 1);
  EXPECT_EQ(env_value(job_environment(job, paths, ctx), "OMP_NUM_THREADS"), "5");
  unsetenv("OMP_NUM_THREADS");
}

TEST(Launch, ResolvesProgramsOnThePath) {
  EXPECT_EQ(resolve_program("sh", {"PATH=/nonexistent:/bin"}), "/bin/sh");
  EXPECT_EQ(resolve_program("./x", {}), "./x");
  EXPECT_EQ(resolve_program("no-such-program-oomh", {"PATH=/bin"}), "");
}

}  // namespace
}  // namespace oomh::exec
