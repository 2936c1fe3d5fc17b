// The job runner end to end: real processes, real pipes, real process groups and shared memory.

#include "oomharness/runner/job_runner.h"

#include "exec/dead_processes.h"
#include "oomharness/control_block.h"
#include "oomharness/events.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace oomh {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t GiB = 1ull << 30;

JobSpec sh_job(const std::string& name, const std::string& script, double timeout = 30) {
  JobSpec j;
  j.name = name;
  j.argv = {"/bin/sh", "-c", script};
  j.shell = true;
  j.timeout = timeout;
  j.grace = 0.5;
  j.probe = ProbeMode::none;
  return j;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A job's shell prints its pid as the runner (and this test) names it: the first field of /proc/self/stat,
// read by the shell itself. `$$` is its pid in the run's PID namespace (Note [A runner its jobs cannot
// signal] in runner/src/exec/job_namespace.h), which kill() from here would not find.
const std::string kEchoPid = "read -r s < /proc/self/stat; echo pid ${s%% *}";
// `outer N`: the pid /proc gives the process the job calls N (a process of the job's namespace).
const std::string kOuterPid =
    "outer() { me=$(readlink /proc/self/ns/pid); for d in /proc/[0-9]*; do "
    "[ \"$(readlink $d/ns/pid 2>/dev/null)\" = \"$me\" ] || continue; "
    "n=$(sed -n 's/^NSpid:.*[[:space:]]\\([0-9]*\\)$/\\1/p' $d/status 2>/dev/null); "
    "[ \"$n\" = \"$1\" ] && echo ${d#/proc/} && return; done; echo $1; }; ";

// The pid of the job's shell as it printed it ("pid N"): its process group.
std::vector<pid_t> printed_pids(const std::string& text) {
  std::vector<pid_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("pid ", 0) == 0) out.push_back(static_cast<pid_t>(std::stol(line.substr(4))));
  return out;
}

bool group_gone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

std::vector<std::string> leftover_segments() {
  std::vector<std::string> out;
  std::string prefix = "oomh-" + std::to_string(getpid()) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

std::vector<std::string> observed(const Attempt& a, const std::string& key) {
  std::vector<std::string> out;
  for (const Event& e : a.events)
    if (e.kind == "observed" && e.text("key") == key) out.push_back(e.text("value"));
  return out;
}

class JobRunnerTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    out_dir = testing::TempDir() + "oomh-exec-" + std::to_string(getpid()) + "-" + info->name();
    fs::remove_all(out_dir);
    options.out_dir = out_dir;
    options.gpu_inventory = std::vector<GpuInfo>{};  // no GPU: never ask nvidia-smi in CPU tests
    options.sample_interval = 0.02;
  }
  void TearDown() override {
    EXPECT_THAT(leftover_segments(), testing::IsEmpty());
    fs::remove_all(out_dir);
  }
  std::vector<JobOutcome> run(const std::vector<JobSpec>& jobs) {
    JobRunner runner(options);
    return runner.run(jobs);
  }
  // Jobs run under the real shim over the driver double; false (the test skips) when a piece is missing.
  bool shim_and_double() {
    trainer = std::getenv("EXEC_TEST_TRAINER");
    const char* inject = std::getenv("EXEC_TEST_INJECT");
    const char* double_dir = std::getenv("EXEC_TEST_DOUBLE_DIR");
    if (!trainer || !inject || !double_dir) return false;
    options.paths.inject_library = inject;
    options.paths.driver_library_dir = double_dir;
    return true;
  }
  const char* trainer = nullptr;  // the emulated trainer, once shim_and_double() found it
  std::string out_dir;
  RunOptions options;
};

TEST_F(JobRunnerTest, RunsAPassingAndAFailingJob) {
  auto out = run({sh_job("pass", "echo hello; echo oops >&2"), sh_job("fail", "echo bye; exit 3")});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].trace.attempts.size(), 1u);
  const Attempt& a = out[0].trace.attempts[0];
  EXPECT_EQ(a.end_kind, AttemptEnd::exited);
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_FALSE(a.signal);
  EXPECT_EQ(read_file(a.log_path).find("hello\n") != std::string::npos, true);
  EXPECT_NE(read_file(a.log_path).find("oops\n"), std::string::npos);
  EXPECT_NE(a.output_tail.find("hello"), std::string::npos);
  EXPECT_EQ(a.log_path, out_dir + "/pass/attempt-0.log");
  ASSERT_GE(a.events.size(), 2u);
  EXPECT_EQ(a.events.front().kind, "attempt_start");
  EXPECT_EQ(a.events.back().kind, "attempt_exit");
  EXPECT_EQ(a.events.back().integer("code"), 0);
  EXPECT_TRUE(out[0].error.empty());
  EXPECT_FALSE(out[0].interrupted);
  EXPECT_EQ(out[0].argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hello; echo oops >&2"}));

  const Attempt& b = out[1].trace.attempts.at(0);
  EXPECT_EQ(b.end_kind, AttemptEnd::exited);
  EXPECT_EQ(b.exit_code, 3);
  EXPECT_EQ(b.events.back().integer("code"), 3);
  EXPECT_GE(out[1].end, out[1].start);
}

TEST_F(JobRunnerTest, ObservesLinesAndDetectsOutOfMemoryMessages) {
  JobSpec j = sh_job("oom", "echo 'step 1 batch 64'; echo 'step 2 batch 64'; "
                            "echo 'torch.OutOfMemoryError: CUDA out of memory' >&2; exit 1");
  j.observe = {{"step", R"(step (\d+))", {}}, {"batch_size", R"(batch (\d+))", {}}};
  auto out = run({j});
  const Attempt& a = out[0].trace.attempts.at(0);
  EXPECT_TRUE(a.oom_message);
  // Issue 26 (Note [An OOM is an event]): the runner detects the message, but a message with no refusal of
  // the shim (this job ran without one) and no probe `oom` is no OOM the attempt died of.
  EXPECT_FALSE(a.ended_by_oom());
  EXPECT_EQ(observed(a, "step"), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(observed(a, "batch_size"), (std::vector<std::string>{"64", "64"}));
  for (const Event& e : a.events)
    if (e.kind == "observed") {
      EXPECT_EQ(e.text("stream"), "stdout");
    }
  EXPECT_TRUE(a.events.back().flag("oom_message"));

  auto clean = run({sh_job("clean", "echo all good")});
  EXPECT_FALSE(clean[0].trace.attempts.at(0).oom_message);
}

TEST_F(JobRunnerTest, TimeoutSendsTermThenKillToTheWholeGroup) {
  // The shell and its sleep both ignore SIGTERM: only SIGKILL after the grace period stops them.
  JobSpec stubborn = sh_job("stubborn", "trap '' TERM; " + kEchoPid + "; sleep 100; echo never", 0.5);
  stubborn.grace = 0.5;
  JobSpec polite = sh_job("polite", kEchoPid + "; sleep 100", 0.3);
  auto t0 = std::chrono::steady_clock::now();
  auto out = run({stubborn, polite});
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 10);

  const Attempt& a = out[0].trace.attempts.at(0);
  EXPECT_EQ(a.end_kind, AttemptEnd::timed_out);
  EXPECT_EQ(a.signal, SIGKILL);
  EXPECT_GE(a.duration(), 0.9);  // timeout + grace
  EXPECT_TRUE(a.events.back().flag("timed_out"));
  EXPECT_EQ(read_file(a.log_path).find("never"), std::string::npos);

  const Attempt& b = out[1].trace.attempts.at(0);
  EXPECT_EQ(b.end_kind, AttemptEnd::timed_out);
  EXPECT_EQ(b.signal, SIGTERM);
  EXPECT_LT(b.duration(), 0.3 + 0.5 + 0.4);

  for (const auto& o : out) {
    auto pids = printed_pids(read_file(o.trace.attempts.at(0).log_path));
    ASSERT_EQ(pids.size(), 1u);
    EXPECT_TRUE(group_gone(pids[0])) << o.trace.job;
  }
}

TEST_F(JobRunnerTest, RecordsACrashBySignal) {
  auto out = run({sh_job("segv", "kill -SEGV $$")});
  const Attempt& a = out[0].trace.attempts.at(0);
  EXPECT_EQ(a.end_kind, AttemptEnd::signalled);
  EXPECT_EQ(a.signal, SIGSEGV);
  EXPECT_FALSE(a.exit_code);
  EXPECT_EQ(a.events.back().integer("signal"), SIGSEGV);
}

TEST_F(JobRunnerTest, KillsWhatTheJobLeftInItsGroup) {
  auto out = run({sh_job("daemon", kOuterPid + "sleep 100 & echo pid $(outer $!); exit 0")});
  const Attempt& a = out[0].trace.attempts.at(0);
  EXPECT_EQ(a.exit_code, 0);
  auto pids = printed_pids(read_file(a.log_path));
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_TRUE(kill(pids[0], 0) != 0 || fs::exists("/proc/" + std::to_string(pids[0])) == false ||
              read_file("/proc/" + std::to_string(pids[0]) + "/stat").find(") Z") != std::string::npos);
  EXPECT_LT(a.duration(), 5);
}

TEST_F(JobRunnerTest, RestartsOnOomUpToMax) {
  // Fails with an OOM message on attempts 0 and 1, succeeds on attempt 2.
  JobSpec j = sh_job("restart", "echo attempt {attempt}; if [ {attempt} -lt 2 ]; then echo 'CUDA out of memory' >&2; exit 1; fi");
  j.restart = {3, {"oom"}, false};
  auto out = run({j});
  ASSERT_EQ(out[0].trace.attempts.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Attempt& a = out[0].trace.attempts[static_cast<size_t>(i)];
    EXPECT_EQ(a.index, i);
    EXPECT_TRUE(a.faults_enabled);
    EXPECT_NE(read_file(a.log_path).find("attempt " + std::to_string(i)), std::string::npos);
    EXPECT_EQ(a.log_path, out_dir + "/restart/attempt-" + std::to_string(i) + ".log");
  }
  EXPECT_EQ(out[0].trace.attempts[2].exit_code, 0);

  // Bounded by max, and only for what `on` names.
  JobSpec always = sh_job("always", "exit 2");
  always.restart = {2, {"nonzero"}, false};
  JobSpec wrong_kind = sh_job("wrong_kind", "exit 2");
  wrong_kind.restart = {2, {"signal", "oom"}, false};
  JobSpec by_signal = sh_job("by_signal", "kill -KILL $$");
  by_signal.restart = {1, {"signal"}, false};
  auto more = run({always, wrong_kind, by_signal});
  EXPECT_EQ(more[0].trace.attempts.size(), 3u);
  EXPECT_EQ(more[1].trace.attempts.size(), 1u);
  EXPECT_EQ(more[2].trace.attempts.size(), 2u);
}

TEST_F(JobRunnerTest, ClearFaultsDropsTheRulesAndKeepsTheCaps) {
  JobSpec j = sh_job("clear", "echo \"plan $OOMH_PLAN\"; exit 1");
  j.faults.push_back({"oom-at-5", {{"name", "oom-at-5"}, {"when", {{"step", 5}}}, {"fail", {{"times", 2}}}}, {}});
  j.memory.limit = 3 * GiB;
  j.restart = {1, {"nonzero"}, true};
  JobSpec keep = j;
  keep.name = "keep";
  keep.restart.clear_faults = false;
  auto out = run({j, keep});
  ASSERT_EQ(out[0].trace.attempts.size(), 2u);
  EXPECT_TRUE(out[0].trace.attempts[0].faults_enabled);
  EXPECT_FALSE(out[0].trace.attempts[1].faults_enabled);
  std::string first = read_file(out[0].trace.attempts[0].log_path);
  std::string second = read_file(out[0].trace.attempts[1].log_path);
  EXPECT_NE(first.find("oom-at-5"), std::string::npos);
  EXPECT_EQ(second.find("oom-at-5"), std::string::npos);
  EXPECT_NE(second.find(std::to_string(3 * GiB)), std::string::npos);  // the cap stays
  ASSERT_EQ(out[1].trace.attempts.size(), 2u);
  EXPECT_TRUE(out[1].trace.attempts[1].faults_enabled);
  EXPECT_NE(read_file(out[1].trace.attempts[1].log_path).find("oom-at-5"), std::string::npos);
}

TEST_F(JobRunnerTest, TemplatesWorkdirAndAttemptAndSetsTheHarnessEnvironment) {
  JobSpec j = sh_job("tmpl", "echo {attempt} > {workdir}/a{attempt}; echo \"job=$OOMH_JOB attempt=$OOMH_ATTEMPT\"; "
                             "test -r \"$OOMH_CONTROL\" && echo control-ok; test -e \"$OOMH_EVENTS\" && echo events-ok; "
                             "echo \"mine=$MINE\"; pwd; exit 1");
  j.env = {{"MINE", "{workdir}/m{attempt}"}};
  j.cwd = "{workdir}";
  j.restart = {1, {"nonzero"}, false};
  auto out = run({j});
  ASSERT_EQ(out[0].trace.attempts.size(), 2u);
  std::string work = out[0].work_dir;
  EXPECT_EQ(work, out_dir + "/tmpl/work");
  EXPECT_EQ(read_file(work + "/a0"), "0\n");
  EXPECT_EQ(read_file(work + "/a1"), "1\n");
  std::string log1 = read_file(out[0].trace.attempts[1].log_path);
  EXPECT_NE(log1.find("job=tmpl attempt=1"), std::string::npos);
  EXPECT_NE(log1.find("control-ok"), std::string::npos);
  EXPECT_NE(log1.find("events-ok"), std::string::npos);
  EXPECT_NE(log1.find("mine=" + work + "/m1"), std::string::npos);
  EXPECT_NE(log1.find(fs::canonical(work).string() + "\n"), std::string::npos);
  EXPECT_EQ(out[0].argv.at(2).find("{workdir}"), std::string::npos);  // the first attempt's command, templated
}

TEST_F(JobRunnerTest, ReportsACommandThatCannotStart) {
  JobSpec j;
  j.name = "missing";
  j.argv = {"no-such-program-oomh-test", "x"};
  JobSpec bad_cwd = sh_job("bad_cwd", "true");
  bad_cwd.cwd = "/nonexistent/oomh";
  auto out = run({j, bad_cwd});
  ASSERT_EQ(out[0].trace.attempts.size(), 1u);
  EXPECT_EQ(out[0].trace.attempts[0].end_kind, AttemptEnd::failed_to_start);
  EXPECT_THAT(out[0].error, testing::HasSubstr("no-such-program-oomh-test"));
  EXPECT_EQ(out[1].trace.attempts.at(0).end_kind, AttemptEnd::failed_to_start);
  EXPECT_THAT(out[1].error, testing::HasSubstr("/nonexistent/oomh"));
}

TEST_F(JobRunnerTest, SamplesTheControlBlockAndReportsProgress) {
  const char* child = std::getenv("EXEC_TEST_CHILD");
  ASSERT_NE(child, nullptr);
  JobSpec j;
  j.name = "sampled";
  j.argv = {child, "control", "1000", "10", "40"};
  j.target_step = 9;
  std::vector<JobProgress> seen;
  options.on_progress = [&](const JobProgress& p) { seen.push_back(p); };
  size_t done_calls = 0;
  options.on_job_done = [&](size_t i, JobOutcome&) { EXPECT_EQ(i, 0u); ++done_calls; };
  auto out = run({j});
  const Attempt& a = out[0].trace.attempts.at(0);
  EXPECT_EQ(a.exit_code, 0);
  ASSERT_GE(a.samples.size(), 5u);
  int64_t last_step = -1;
  for (const MemorySample& s : a.samples) {
    EXPECT_EQ(s.device, 0);
    EXPECT_GE(s.step, last_step);
    EXPECT_GE(s.peak, s.held);
    last_step = s.step;
  }
  EXPECT_EQ(a.samples.back().peak, 10000u);
  EXPECT_EQ(out[0].trace.target_step, 9);
  EXPECT_FALSE(out[0].trace.simulated_device);
  EXPECT_EQ(done_calls, 1u);
  bool running_with_step = false, done = false;
  for (const JobProgress& p : seen) {
    running_with_step |= p.state == JobProgress::State::running && p.step >= 0 && p.held > 0;
    done |= p.state == JobProgress::State::done;
  }
  EXPECT_TRUE(running_with_step);
  EXPECT_TRUE(done);
}

TEST_F(JobRunnerTest, ReadsTheEventLogIntoTheTraceInTimeOrder) {
  const char* child = std::getenv("EXEC_TEST_CHILD");
  ASSERT_NE(child, nullptr);
  JobSpec j;
  j.name = "events";
  j.argv = {child, "events"};
  auto out = run({j});
  const Attempt& a = out[0].trace.attempts.at(0);
  std::vector<std::string> kinds;
  for (const Event& e : a.events) kinds.push_back(e.src + ":" + e.kind);
  EXPECT_THAT(kinds, testing::ElementsAre("runner:attempt_start", "probe:step", "probe:step", "runner:warning", "runner:attempt_exit"));
  for (size_t i = 1; i < a.events.size(); ++i) EXPECT_LE(a.events[i - 1].t, a.events[i].t);
  EXPECT_EQ(a.events[2].integer("batch_size"), 16);
}

// Note [Sealed event lines] in include/oomharness/event_seal.h: a line the job wrote without the attempt's seal
// (none, or another key's) is no evidence, and the attempt says how many there were.
TEST_F(JobRunnerTest, EventLinesWithoutTheAttemptsSealAreLeftOutAndCounted) {
  const char* child = std::getenv("EXEC_TEST_CHILD");
  ASSERT_NE(child, nullptr);
  JobSpec j;
  j.name = "forge";
  j.argv = {child, "forge"};
  auto out = run({j});
  const Attempt& a = out[0].trace.attempts.at(0);
  std::vector<std::string> kinds;
  std::string message;
  for (const Event& e : a.events) {
    kinds.push_back(e.src + ":" + e.kind);
    if (e.kind == events::kTamper) message = e.text("message");
  }
  EXPECT_THAT(kinds, testing::ElementsAre("runner:attempt_start", "probe:step", "probe:step", "runner:tamper", "runner:warning",
                                          "runner:attempt_exit"));
  EXPECT_THAT(message, testing::StartsWith("2 event line(s) of "));
  EXPECT_THAT(message, testing::HasSubstr("did not come from the harness"));
  EXPECT_THAT(message, testing::HasSubstr("the first: a `step` line (src probe, pid "));
  for (const Event& e : a.events) EXPECT_FALSE(e.kind == events::kStep && e.integer("step") > 2) << "a forged step is in the trace";
  // The log on disk keeps every line, the seals included: the runner left it as the job wrote it.
  const std::string log = read_file(fs::path(a.log_path).replace_filename("attempt-0.events.jsonl").string());
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 5) << log;
  EXPECT_NE(log.find(",\"seal\":\""), std::string::npos) << log;
}

TEST_F(JobRunnerTest, PacksCappedJobsOntoAGpuOnlyWhileTheyFit) {
  // One fake GPU of 10 GiB with 1 GiB kept free: two jobs capped at 6 GiB cannot share it, two capped at
  // 3 GiB can (each also needs kContextAllowance, 1 GiB, for its context).
  options.gpu_inventory = std::vector<GpuInfo>{{0, 10 * GiB, 0}};
  options.gpu_margin = GiB;
  options.jobs = 2;
  int waiting = 0;
  options.on_progress = [&](const JobProgress& p) { waiting += p.state == JobProgress::State::waiting; };
  auto job = [](const std::string& name, uint64_t cap) {
    JobSpec j = sh_job(name, "echo gpu=$CUDA_VISIBLE_DEVICES; sleep 0.4");
    j.memory.limit = cap;
    return j;
  };
  auto big = run({job("big1", 6 * GiB), job("big2", 6 * GiB)});
  EXPECT_EQ(big[0].gpu, 0);
  EXPECT_EQ(big[1].gpu, 0);
  EXPECT_NE(read_file(big[1].trace.attempts.at(0).log_path).find("gpu=0"), std::string::npos);
  EXPECT_LE(big[0].end, big[1].start) << "the second 6 GiB job started before the first gave its memory back";
  EXPECT_GE(waiting, 1);

  auto small = run({job("small1", 3 * GiB), job("small2", 3 * GiB)});
  EXPECT_LT(small[1].start, small[0].end) << "two 3 GiB jobs fit together and should have run at once";

  // An uncapped job needs the GPU to itself.
  JobSpec whole = sh_job("whole", "sleep 0.3");
  auto mixed = run({whole, job("after", 1 * GiB)});
  EXPECT_LE(mixed[0].end, mixed[1].start);
}

// Note [One GPU per rank]: each rank of a job sees the job's GPUs in rank order and uses its LOCAL_RANK's;
// a second 2-rank job waits for two free GPUs; a job with more ranks than the run has GPUs is an error.
TEST_F(JobRunnerTest, GivesEachRankItsOwnGpu) {
  options.gpu_inventory = std::vector<GpuInfo>{{0, 10 * GiB, 0}, {1, 10 * GiB, 0}, {2, 10 * GiB, 0}};
  options.jobs = 3;
  auto ddp = [](const std::string& name, int ranks) {
    JobSpec j = sh_job(name, "echo cvd=$CUDA_VISIBLE_DEVICES local=$LOCAL_RANK nvls=$NCCL_NVLS_ENABLE; sleep 0.4");
    j.ranks = ranks;
    return j;
  };
  auto out = run({ddp("a", 2), ddp("b", 2), ddp("c", 4)});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].gpu, 0);
  EXPECT_EQ(out[0].gpus, (std::vector<int>{0, 1}));
  const Attempt& a = out[0].trace.attempts.at(0);
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_NE(read_file(a.ranks[0].log_path).find("cvd=0,1 local=0 nvls=0"), std::string::npos) << read_file(a.ranks[0].log_path);
  EXPECT_NE(read_file(a.ranks[1].log_path).find("cvd=0,1 local=1 nvls=0"), std::string::npos) << read_file(a.ranks[1].log_path);
  // Uncapped ranks take their GPUs whole: b cannot start on GPU 2 alone, so it waits for a.
  EXPECT_LE(out[0].end, out[1].start) << "the second 2-rank job shared a GPU with the first";
  EXPECT_EQ(out[1].gpus.size(), 2u);
  EXPECT_TRUE(out[2].trace.attempts.empty());
  EXPECT_EQ(out[2].error, "ranks: 4 needs one GPU per rank, and this run has 3 GPUs (choose them with --gpus, or give the job fewer ranks)");
  EXPECT_TRUE(out[2].gpus.empty());

  // The reservation sidecar holds memory on one GPU: with a GPU per rank it is refused, not half-done.
  JobSpec reserved = ddp("reserved", 2);
  reserved.memory.reserve = GiB;
  auto r = run({reserved});
  EXPECT_NE(r[0].error.find("memory.reserve and memory.leave hold memory on one GPU"), std::string::npos) << r[0].error;
  EXPECT_TRUE(r[0].trace.attempts.empty());
}

TEST_F(JobRunnerTest, InterruptFromAnotherThreadStopsEverythingAndLeavesNothing) {
  options.jobs = 2;
  JobSpec stubborn = sh_job("stubborn", "trap '' TERM; " + kEchoPid + "; sleep 100");
  stubborn.grace = 0.5;
  JobSpec polite = sh_job("polite", kEchoPid + "; sleep 100");
  JobSpec never = sh_job("never", kEchoPid + "; sleep 100");
  JobRunner runner(options);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    runner.interrupt();
  });
  auto t0 = std::chrono::steady_clock::now();
  auto out = runner.run({stubborn, polite, never});
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stopper.join();
  EXPECT_TRUE(runner.interrupted());
  EXPECT_LT(took, 5);
  for (const JobOutcome& o : out) EXPECT_TRUE(o.interrupted) << o.trace.job;
  EXPECT_TRUE(out[2].trace.attempts.empty()) << "no job starts after interrupt()";
  for (int i = 0; i < 2; ++i) {
    const Attempt& a = out[static_cast<size_t>(i)].trace.attempts.at(0);
    EXPECT_EQ(a.end_kind, AttemptEnd::interrupted);
    auto pids = printed_pids(read_file(a.log_path));
    ASSERT_EQ(pids.size(), 1u);
    EXPECT_TRUE(group_gone(pids[0]));
  }
  EXPECT_EQ(out[0].trace.attempts[0].signal, SIGKILL);
  EXPECT_EQ(out[1].trace.attempts[0].signal, SIGTERM);
  EXPECT_THAT(leftover_segments(), testing::IsEmpty());

  // Once interrupted, a runner starts nothing.
  auto again = runner.run({sh_job("later", "true")});
  EXPECT_TRUE(again[0].interrupted);
  EXPECT_TRUE(again[0].trace.attempts.empty());
}

JobRunner* g_runner = nullptr;
void on_sigint(int) {
  if (g_runner) g_runner->interrupt();
}

TEST_F(JobRunnerTest, SigintHandlerInterruptsTheRun) {
  JobRunner runner(options);
  g_runner = &runner;
  struct sigaction sa {}, old {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(getpid(), SIGINT);
  });
  auto out = runner.run({sh_job("a", kEchoPid + "; sleep 100"), sh_job("b", kEchoPid + "; sleep 100")});
  sender.join();
  sigaction(SIGINT, &old, nullptr);
  g_runner = nullptr;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].interrupted);
  EXPECT_TRUE(out[1].interrupted);
  auto pids = printed_pids(read_file(out[0].trace.attempts.at(0).log_path));
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_TRUE(group_gone(pids[0]));
}

// What a verdict can depend on, without times and pids.
std::string summary(const JobOutcome& o) {
  std::ostringstream s;
  s << o.trace.job << " error=" << o.error << "\n";
  for (const Attempt& a : o.trace.attempts) {
    s << " attempt " << a.index << " end=" << static_cast<int>(a.end_kind) << " code=" << a.exit_code.value_or(-1)
      << " signal=" << a.signal.value_or(0) << " oom=" << a.oom_message << " faults=" << a.faults_enabled << " steps=";
    for (const std::string& v : observed(a, "step")) s << v << ",";
    for (const Event& e : a.events)
      if (e.src != "runner") s << " " << e.kind << ":" << e.integer("step");
    s << "\n";
  }
  return s.str();
}

TEST_F(JobRunnerTest, ResultsDoNotDependOnHowManyJobsRunAtOnce) {
  const char* child = std::getenv("EXEC_TEST_CHILD");
  ASSERT_NE(child, nullptr);
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 6; ++i) {
    std::string n = std::to_string(i);
    JobSpec j = sh_job("job" + n, "for s in 1 2 3; do echo step $s; sleep 0.0" + n + "; done; "
                                   "if [ {attempt} -lt " + std::to_string(i % 3) + " ]; then echo 'out of memory'; exit 1; fi; exit " + n);
    j.observe = {{"step", R"(step (\d+))", {}}};
    j.restart = {2, {"oom"}, i % 2 == 0};
    jobs.push_back(j);
  }
  JobSpec ev;
  ev.name = "events";
  ev.argv = {child, "events"};
  jobs.push_back(ev);
  JobSpec crash = sh_job("crash", "kill -ABRT $$");
  jobs.push_back(crash);

  options.jobs = 1;
  auto serial = run(jobs);
  options.jobs = 4;
  auto parallel = run(jobs);
  ASSERT_EQ(serial.size(), parallel.size());
  for (size_t i = 0; i < serial.size(); ++i) EXPECT_EQ(summary(serial[i]), summary(parallel[i]));
  EXPECT_EQ(serial[2].trace.attempts.size(), 3u);
  EXPECT_EQ(serial[5].trace.attempts.back().exit_code, 5);
}

// Note [CPU share of packed jobs], through real processes: what each job finds in OMP_NUM_THREADS.
TEST_F(JobRunnerTest, JobsRunningAtOnceShareTheCpus) {
  unsetenv("OMP_NUM_THREADS");
  auto threads_seen = [&](const JobOutcome& o) { return o.trace.attempts.at(0).output_tail; };
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(sh_job("j" + std::to_string(i), "echo \"threads=${OMP_NUM_THREADS:-unset}\""));
  options.cpus = 16;
  options.jobs = 4;
  for (const JobOutcome& o : run(jobs)) EXPECT_EQ(threads_seen(o), "threads=4\n");
  options.jobs = 8;  // only four jobs: four run at once
  for (const JobOutcome& o : run(jobs)) EXPECT_EQ(threads_seen(o), "threads=4\n");
  options.jobs = 1;  // one at a time: each may have every core
  for (const JobOutcome& o : run(jobs)) EXPECT_EQ(threads_seen(o), "threads=unset\n");
  options.jobs = 4;
  options.threads_per_job = ThreadsPerJob{ThreadsPerJob::Mode::off, 0};
  for (const JobOutcome& o : run(jobs)) EXPECT_EQ(threads_seen(o), "threads=unset\n");
  options.threads_per_job = ThreadsPerJob{};
  jobs[0].env = {{"OMP_NUM_THREADS", "3"}};  // the job's own setting wins
  auto out = run(jobs);
  EXPECT_EQ(threads_seen(out[0]), "threads=3\n");
  EXPECT_EQ(threads_seen(out[1]), "threads=4\n");
}

TEST_F(JobRunnerTest, RunsAReferenceWithoutFaultsWhenAPolicyWantsOne) {
  JobSpec j = sh_job("ref", "echo \"plan $OOMH_PLAN\"; echo work={workdir}");
  j.faults.push_back({"f", {{"name", "f"}, {"when", {{"step", 1}}}}, {}});
  j.expect.push_back({"checkpoint_resume", {{"reference", {{"metric", "loss"}}}}, {}});
  JobSpec no_ref = j;
  no_ref.name = "no_ref";
  no_ref.expect[0].args = nlohmann::json::object();
  auto out = run({j, no_ref});
  ASSERT_EQ(out[0].trace.attempts.size(), 1u);
  ASSERT_EQ(out[0].trace.reference.size(), 1u);
  const Attempt& r = out[0].trace.reference[0];
  EXPECT_FALSE(r.faults_enabled);
  std::string log = read_file(r.log_path);
  EXPECT_EQ(log.find("\"f\""), std::string::npos);
  EXPECT_NE(log.find("reference-work"), std::string::npos);
  EXPECT_NE(read_file(out[0].trace.attempts[0].log_path).find("\"f\""), std::string::npos);
  EXPECT_TRUE(out[1].trace.reference.empty());
}

TEST_F(JobRunnerTest, ReservationSidecarHoldsMemoryForTheJobAndStopsAfterIt) {
  const char* reserve = std::getenv("EXEC_TEST_RESERVE");
  const char* double_dir = std::getenv("EXEC_TEST_DOUBLE_DIR");
  if (!reserve || !double_dir) GTEST_SKIP() << "needs oomh-reserve and the CUDA driver double";
  options.paths.reserve_program = reserve;
  options.paths.driver_library_dir = double_dir;
  JobSpec j = sh_job("reserved", kOuterPid + "kill -0 $OOMH_RESERVE_PID && echo reserve-alive $(outer $OOMH_RESERVE_PID)");
  j.env = {{"CUDA_DOUBLE_MEMORY", "64MiB"}};
  j.memory.reserve = 16 << 20;
  JobSpec too_big = j;
  too_big.name = "too_big";
  too_big.memory.reserve = 128 << 20;
  JobSpec chunked = j;
  chunked.name = "chunked";
  chunked.memory.reserve_chunk = 1 << 20;
  auto out = run({j, too_big, chunked});

  for (size_t i : {size_t{0}, size_t{2}}) {
    ASSERT_EQ(out[i].trace.attempts.size(), 1u) << out[i].error;
    EXPECT_TRUE(out[i].error.empty()) << out[i].error;
    EXPECT_TRUE(out[i].trace.simulated_device);
    std::string log = read_file(out[i].trace.attempts[0].log_path);
    ASSERT_NE(log.find("reserve-alive "), std::string::npos) << log;
    pid_t pid = static_cast<pid_t>(std::stol(log.substr(log.find("reserve-alive ") + 14)));
    EXPECT_TRUE(kill(pid, 0) != 0 && errno == ESRCH) << "the sidecar outlived its job";
  }
  EXPECT_TRUE(out[1].trace.attempts.empty());
  EXPECT_THAT(out[1].error, testing::HasSubstr("reservation sidecar failed"));
  EXPECT_THAT(out[1].error, testing::HasSubstr("cuMemAlloc"));
}

// memory.leave: the sidecar holds whatever leaves that much free (its own context counted), and each
// attempt's start says how much it held.
TEST_F(JobRunnerTest, LeaveHoldsAllButThatMuchOfTheGpu) {
  const char* reserve = std::getenv("EXEC_TEST_RESERVE");
  const char* double_dir = std::getenv("EXEC_TEST_DOUBLE_DIR");
  if (!reserve || !double_dir) GTEST_SKIP() << "needs oomh-reserve and the CUDA driver double";
  options.paths.reserve_program = reserve;
  options.paths.driver_library_dir = double_dir;
  JobSpec j = sh_job("left", "kill -0 $OOMH_RESERVE_PID && echo reserve-alive");
  j.env = {{"CUDA_DOUBLE_MEMORY", "1GiB"}, {"CUDA_DOUBLE_CONTEXT_MEMORY", "24MiB"}};
  j.memory.leave = uint64_t{100} << 20;
  JobSpec too_much = j;
  too_much.name = "too_much";
  too_much.memory.leave = uint64_t{2} << 30;
  auto out = run({j, too_much});
  ASSERT_TRUE(out[0].error.empty()) << out[0].error;
  ASSERT_EQ(out[0].trace.attempts.size(), 1u);
  EXPECT_THAT(out[0].trace.attempts[0].output_tail, testing::HasSubstr("reserve-alive"));
  const Event& start = out[0].trace.attempts[0].events.front();
  ASSERT_EQ(start.kind, "attempt_start");
  EXPECT_EQ(start.integer("reserved"), (1024 - 24 - 100) << 20);
  EXPECT_TRUE(out[1].trace.attempts.empty());
  EXPECT_THAT(out[1].error, testing::HasSubstr("--leave 2.00 GiB: only 1000.00 MiB is free"));
}

// oomh-reserve --leave: what stays free is measured after the sidecar's own context took its memory (the
// double's context takes 50 MiB of 1 GiB here).
TEST(ReservationSidecar, LeaveHoldsWhatLeavesThatMuchFreeAfterItsOwnContext) {
  const char* reserve = std::getenv("EXEC_TEST_RESERVE");
  const char* double_dir = std::getenv("EXEC_TEST_DOUBLE_DIR");
  if (!reserve || !double_dir) GTEST_SKIP() << "needs oomh-reserve and the CUDA driver double";
  auto sidecar = [&](const std::string& args) {
    std::string cmd = std::string("LD_LIBRARY_PATH=") + double_dir + " CUDA_DOUBLE_MEMORY=1GiB CUDA_DOUBLE_CONTEXT_MEMORY=50MiB " +
                      reserve + " --device 0 " + args + " </dev/null 2>&1";
    std::string out;
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char buf[512];
      while (fgets(buf, sizeof buf, f)) out += buf;
      pclose(f);
    }
    return out;
  };
  EXPECT_EQ(sidecar("--leave 100MiB"), "READY " + std::to_string(874ull << 20) + "\n");
  EXPECT_EQ(sidecar("--leave 100MiB --chunk 64MiB"), "READY " + std::to_string(832ull << 20) + "\n");  // whole pieces
  EXPECT_THAT(sidecar("--leave 2GiB"), testing::HasSubstr("ERROR --leave 2.00 GiB: only 974.00 MiB is free"));
  EXPECT_THAT(sidecar("--leave 1GiB --bytes 1MiB"), testing::HasSubstr("ERROR give --bytes or --leave, not both"));
}

// A crash leaves the shim no time to give its bytes back: the runner does (Note [Bytes of dead processes]),
// and says so in the trace, so that the job's last figures do not count memory the driver took back.
TEST_F(JobRunnerTest, ACrashedProcessesBytesAreGivenBackToTheJob) {
  if (!shim_and_double()) GTEST_SKIP() << "needs emulated_trainer, the shim and the driver double";
  JobSpec j;
  j.name = "crash";
  j.argv = {trainer, "--steps", "5", "--batch-size", "4", "--bytes-per-sample", "1048576", "--crash-at-step", "3"};
  j.env = {{"CUDA_DOUBLE_MEMORY", "1GiB"}};
  j.memory.limit = uint64_t{512} << 20;
  auto out = run({j});
  const Attempt& a = out[0].trace.attempts.at(0);
  EXPECT_EQ(a.end_kind, AttemptEnd::signalled) << a.output_tail;
  std::vector<const Event*> reclaimed;
  for (const Event& e : a.events)
    if (e.kind == "reclaimed") reclaimed.push_back(&e);
  ASSERT_EQ(reclaimed.size(), 1u);
  EXPECT_GT(reclaimed[0]->integer("bytes"), 0);
  ASSERT_FALSE(a.samples.empty());
  EXPECT_EQ(a.samples.back().held, 0u);  // the last sample no longer counts the dead process's bytes
}

// The real path: the emulated trainer loads the driver double through the preloaded shim, the shim fails
// allocations at step 3, the trainer dies of the OOM, the runner restarts it without faults, and it
// resumes from its checkpoint.
TEST_F(JobRunnerTest, EmulatedTrainerUnderTheShimDiesOfAnInjectedOomAndResumesAfterARestart) {
  if (!shim_and_double()) GTEST_SKIP() << "needs emulated_trainer, the shim and the driver double";
  JobSpec j;
  j.name = "trainer";
  j.argv = {trainer, "--steps", "5", "--batch-size", "4", "--bytes-per-sample", "1048576", "--recovery", "checkpoint",
            "--checkpoint", "{workdir}/ckpt", "--checkpoint-every", "1", "--step-ms", "30",
            // Its caching allocator would serve every step from what step 1 reserved: a small leak per step
            // makes step 3 allocate, so that the step-3 fault has a call to fail.
            "--leak-per-step", "2097152"};
  j.env = {{"CUDA_DOUBLE_MEMORY", "1GiB"}};
  j.faults.push_back({"oom-at-3", {{"name", "oom-at-3"}, {"when", {{"step", 3}}}, {"fail", {{"times", 100}}}}, {}});
  j.restart = {1, {"oom"}, true};
  j.observe = {{"step", R"(^step (\d+))", {}}};
  j.target_step = 5;
  auto out = run({j});
  const Trace& t = out[0].trace;
  EXPECT_TRUE(t.simulated_device);
  ASSERT_EQ(t.attempts.size(), 2u) << t.attempts.at(0).output_tail;
  const Attempt& first = t.attempts[0];
  const Attempt& second = t.attempts[1];
  EXPECT_TRUE(first.ended_by_oom()) << first.output_tail;
  EXPECT_TRUE(first.faults_enabled);
  EXPECT_FALSE(second.faults_enabled);
  EXPECT_EQ(second.exit_code, 0) << second.output_tail;
  auto kinds = [](const Attempt& a) {
    std::map<std::string, int> k;
    for (const Event& e : a.events) ++k[e.src + ":" + e.kind];
    return k;
  };
  auto k0 = kinds(first), k1 = kinds(second);
  EXPECT_GE(k0["shim:inject"], 1);
  EXPECT_GE(k0["probe:oom"], 1);
  EXPECT_EQ(k1["shim:inject"], 0);
  EXPECT_GE(k1["probe:checkpoint_load"], 1);
  EXPECT_EQ(observed(first, "step"), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(observed(second, "step"), (std::vector<std::string>{"3", "4", "5"}));
  bool held = false;
  for (const MemorySample& s : first.samples) held |= s.held > 0 || s.peak > 0;
  EXPECT_TRUE(held) << "the control block never showed memory held";
}

}  // namespace
}  // namespace oomh

namespace oomh {
namespace {

// Note [Bytes of dead processes], with real processes: one that is gone and reaped, one that is a zombie,
// and this one, alive.
TEST(DeadProcesses, TheirBytesGoBackToTheJobAndTheLivingKeepTheirs) {
  std::string name = "/oomh-dead-test-" + std::to_string(getpid());
  ControlBlock* cb = control_block_create(name.c_str());
  ASSERT_NE(cb, nullptr);
  pid_t reaped = fork();
  if (reaped == 0) _exit(0);
  waitpid(reaped, nullptr, 0);
  pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  while (!exec::process_gone(zombie)) usleep(1000);  // exited, not reaped yet
  auto book = [&](int slot, int pid, int device, uint64_t bytes) {
    cb->processes[slot].pid.store(pid);
    cb->processes[slot].held[device].store(bytes);
    cb->devices[device].held.fetch_add(bytes);
  };
  book(0, reaped, 0, 3 * GiB);
  book(1, zombie, 1, 2 * GiB);
  book(2, getpid(), 0, GiB);
  auto back = exec::reclaim_dead_processes(*cb);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].pid, reaped);
  EXPECT_EQ(back[0].bytes, 3 * GiB);
  EXPECT_EQ(back[1].pid, zombie);
  EXPECT_EQ(back[1].device, 1);
  EXPECT_EQ(cb->devices[0].held.load(), GiB);  // this process keeps its share
  EXPECT_EQ(cb->devices[1].held.load(), 0u);
  EXPECT_TRUE(exec::reclaim_dead_processes(*cb).empty());  // given back once
  EXPECT_FALSE(exec::process_gone(getpid()));
  waitpid(zombie, nullptr, 0);
  control_block_close(cb);
  shm_unlink(name.c_str());
}

// issue 12, Note [Constant cost per job]: a finished attempt keeps no descriptor, so 600 jobs run under a
// limit of 256 open files, and the runner holds no more descriptors afterwards than before.
int open_descriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

TEST_F(JobRunnerTest, SixHundredJobsUnderAnOpenFileLimitOf256) {
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(256, old.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 600; ++i) {
    JobSpec j;
    j.name = "t" + std::to_string(i);
    j.argv = {"/bin/true"};
    j.timeout = 30;
    j.probe = ProbeMode::none;
    jobs.push_back(j);
  }
  int before = open_descriptors();
  std::vector<JobOutcome> out;
  {
    JobRunner runner(options);
    out = runner.run(jobs);
  }
  int after = open_descriptors();
  setrlimit(RLIMIT_NOFILE, &old);
  ASSERT_EQ(out.size(), 600u);
  for (const JobOutcome& o : out) {
    ASSERT_TRUE(o.error.empty()) << o.trace.job << ": " << o.error;
    ASSERT_EQ(o.trace.attempts.size(), 1u) << o.trace.job;
    ASSERT_EQ(o.trace.attempts[0].exit_code, 0) << o.trace.job;
  }
  EXPECT_LE(after, before);
}

// Note [Nothing left behind]: a grandchild in its own session that ignores SIGTERM (and keeps the job's
// stdout open) is killed with its job, at once, not after the drain timeout.
TEST_F(JobRunnerTest, KillsAReparentedSetsidGrandchildWithItsJob) {
  auto started = std::chrono::steady_clock::now();
  auto out = run({sh_job("setsid", "setsid sh -c 'trap \"\" TERM; " + kEchoPid + "; exec sleep 300' & sleep 0.3; exit 0")});
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(out[0].trace.attempts.size(), 1u);
  std::vector<pid_t> pids = printed_pids(read_file(out[0].trace.attempts[0].log_path));
  ASSERT_EQ(pids.size(), 1u) << read_file(out[0].trace.attempts[0].log_path);
  EXPECT_TRUE(kill(pids[0], 0) != 0 && errno == ESRCH) << "the grandchild " << pids[0] << " is still there";
  EXPECT_LT(took, 4.0);
}

// Note [Bounded job logs]: the log keeps its first and last lines within the cap and states the cut, in
// the log and as a warning event.
TEST_F(JobRunnerTest, CapsTheOutputLogKeepingHeadAndTail) {
  options.log_cap = 64 * 1024;
  auto out = run({sh_job("loud", "echo first; i=0; while [ $i -lt 4000 ]; do echo \"line $i of some output\"; i=$((i+1)); done; echo last")});
  const Attempt& a = out[0].trace.attempts.at(0);
  std::string log = read_file(a.log_path);
  EXPECT_LE(log.size(), 64u * 1024 + 200);
  EXPECT_EQ(log.rfind("first\n", 0), 0u);
  EXPECT_NE(log.find("line 3999 of some output\nlast\n"), std::string::npos);
  EXPECT_NE(log.find("of output cut here"), std::string::npos);
  bool warned = false;
  for (const Event& e : a.events) warned = warned || (e.kind == "warning" && e.text("message").find("was cut") != std::string::npos);
  EXPECT_TRUE(warned);
}

// A write that fails is reported as a warning event, not lost in silence. The file size limit stands for a
// full disk: past 1 MiB every write fails (EFBIG; SIGXFSZ ignored meanwhile). A link to /dev/full planted
// where the log goes no longer does: the runner replaces a link in its run folder (Note [A run folder the
// runner owns] in runner/src/exec/run_folder.h).
TEST_F(JobRunnerTest, ReportsAFailedLogWrite) {
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 1 << 20;
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  auto out2 = run({sh_job("full2", "head -c 2000000 /dev/zero | tr '\\0' x | fold -w 100")});
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  const Attempt& a = out2[0].trace.attempts.at(0);
  bool warned = false;
  for (const Event& e : a.events)
    warned = warned || (e.kind == "warning" && e.text("message").find("could not be written") != std::string::npos);
  EXPECT_TRUE(warned);
}

// Issue 44 (5): `kill -STOP $PPID` from a job stopped the runner, whose timeouts then never fired. As root
// (CI, and here) the jobs run in a PID namespace of the run's own, where the runner has no pid: the job
// finds the runner's number in /proc and cannot signal it by that number, and its $PPID is 0.
// Note [A runner its jobs cannot signal] in runner/src/exec/job_namespace.h. (When the protection fails, the
// job continues the runner itself, so that the test fails instead of hanging.)
TEST_F(JobRunnerTest, AJobCannotStopItsRunner) {
  if (geteuid() != 0) GTEST_SKIP() << "a PID namespace needs root; the watchdog is tested below";
  const std::string script =
      "read -r s < /proc/self/stat; set -- $s; r=$4; echo \"ppid $PPID runner $r\"; "
      "if kill -STOP $r 2>/dev/null; then echo stopped-the-runner; sleep 0.3; kill -CONT $r; fi; "
      "if [ \"$PPID\" != 0 ] && kill -STOP $PPID 2>/dev/null; then echo stopped-ppid; sleep 0.3; kill -CONT $PPID; fi; "
      "echo done";
  auto out = run({sh_job("stopper", script, 20)});
  const Attempt& a = out[0].trace.attempts.at(0);
  const std::string log = read_file(a.log_path);
  EXPECT_NE(log.find("ppid 0 runner " + std::to_string(getpid())), std::string::npos) << log;
  EXPECT_EQ(log.find("stopped-the-runner"), std::string::npos) << log;
  EXPECT_EQ(log.find("stopped-ppid"), std::string::npos) << log;
  EXPECT_NE(log.find("done"), std::string::npos) << log;
  EXPECT_EQ(a.exit_code, 0);
}

// Where there is no namespace (not root, or OOMH_PID_NAMESPACE=0), the watchdog continues a stopped runner
// and each running attempt is told.
TEST_F(JobRunnerTest, TheWatchdogContinuesAStoppedRunner) {
  setenv("OOMH_PID_NAMESPACE", "0", 1);
  auto out = run({sh_job("stopper", "kill -STOP $PPID && echo stopped; sleep 0.5; echo done", 20)});
  unsetenv("OOMH_PID_NAMESPACE");
  const Attempt& a = out[0].trace.attempts.at(0);
  const std::string log = read_file(a.log_path);
  EXPECT_NE(log.find("stopped\ndone"), std::string::npos) << log;
  bool warned = false;
  for (const Event& e : a.events)
    warned = warned || (e.kind == "warning" && e.text("message").find("its watchdog continued it") != std::string::npos);
  EXPECT_TRUE(warned);
}

// Issue 44: a 300-level tree left in the work folder made the next run with the same folder fail ("Too many
// levels of symbolic links", though there is no link). Note [Emptying a folder at any depth] in run_folder.cpp.
TEST_F(JobRunnerTest, EmptiesAWorkFolderOfAnyDepth) {
  const std::string deep = "d=\"$PWD\"; i=0; while [ $i -lt 300 ]; do mkdir -p \"$d/x\" && d=\"$d/x\"; i=$((i+1)); done; "
                           "echo leaf > \"$d/leaf\"; ln -s / \"$d/root\"; echo made";
  JobSpec j = sh_job("deep", "cd {workdir} && " + deep);
  auto first = run({j});
  ASSERT_EQ(first[0].trace.attempts.at(0).exit_code, 0) << first[0].error;
  ASSERT_TRUE(fs::exists(out_dir + "/deep/work/x/x/x"));
  JobSpec again = sh_job("deep", "ls -A {workdir}; echo listed");
  auto second = run({again});
  ASSERT_TRUE(second[0].error.empty()) << second[0].error;
  ASSERT_EQ(second[0].trace.attempts.size(), 1u);
  EXPECT_EQ(read_file(second[0].trace.attempts[0].log_path), "listed\n") << "the work folder was not emptied";
  EXPECT_TRUE(fs::exists("/proc/self")) << "the link to / in the tree was followed";
}

// A job that shrinks its control block and writes garbage over it: the block is a sealed memfd, so the
// shrink fails and the runner, which samples it meanwhile, neither dies of SIGBUS nor trusts the garbage.
TEST_F(JobRunnerTest, SurvivesAJobThatShrinksAndScramblesItsControlBlock) {
  auto out = run({sh_job("hostile", "truncate -s 0 \"$OOMH_CONTROL\" && echo shrunk || echo sealed; "
                                    "dd if=/dev/urandom of=\"$OOMH_CONTROL\" bs=4096 count=80 conv=notrunc 2>/dev/null; sleep 0.3")});
  const Attempt& a = out[0].trace.attempts.at(0);
  std::string log = read_file(a.log_path);
  EXPECT_NE(log.find("sealed"), std::string::npos) << log;
  EXPECT_EQ(a.end_kind, AttemptEnd::exited);
  for (const MemorySample& s : a.samples) EXPECT_LT(s.device, kMaxDevices);
}

}  // namespace
}  // namespace oomh
