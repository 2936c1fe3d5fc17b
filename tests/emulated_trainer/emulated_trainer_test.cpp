// The emulated trainer, run as a real process over the driver double (LD_LIBRARY_PATH) with a device small
// enough that a batch overflows it. Each recovery mode, working and broken, is checked by what the process
// printed, its exit status and the events its probe wrote.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "oomharness/control_block.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct TrainerRun {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out, err;
  std::vector<nlohmann::json> events;
  std::map<int, double> losses;              // step -> loss, from "step S batch B loss L"
  std::vector<std::pair<int, int>> batches;  // (step, batch) in order
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Scratch {
 public:
  Scratch() {
    dir_ = fs::temp_directory_path() /
           ("oomh-trainer-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  fs::path operator/(const std::string& name) const { return dir_ / name; }

 private:
  fs::path dir_;
  static inline int counter_ = 0;
};

// Runs the trainer with `args`, the double's folder as LD_LIBRARY_PATH, CUDA_DOUBLE_MEMORY=`memory` and
// OOMH_EVENTS pointing into `scratch`. `kill_after` > 0 kills it after that many milliseconds.
TrainerRun run_trainer(const Scratch& scratch, const std::string& memory, std::vector<std::string> args,
                       int kill_after_ms = 0, const std::vector<std::string>& more_env = {}) {
  static int n = 0;
  std::string tag = std::to_string(n++);
  fs::path out = scratch / ("out" + tag), err = scratch / ("err" + tag), events = scratch / ("events" + tag);
  std::vector<std::string> env = {"LD_LIBRARY_PATH=" CUDA_DOUBLE_DIR, "CUDA_DOUBLE_MEMORY=" + memory,
                                  "OOMH_EVENTS=" + events.string(), "PATH=/usr/bin:/bin"};
  env.insert(env.end(), more_env.begin(), more_env.end());
  args.insert(args.begin(), EMULATED_TRAINER);
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& v : env) envp.push_back(v.data());
    envp.push_back(nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  auto start = std::chrono::steady_clock::now();
  int limit_ms = kill_after_ms > 0 ? kill_after_ms : 60000;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(limit_ms)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  TrainerRun r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    int step = 0, batch = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "step %d batch %d loss %lf", &step, &batch, &loss) == 3) {
      r.losses[step] = loss;
      r.batches.emplace_back(step, batch);
    }
  }
  std::istringstream ev(slurp(events));
  for (std::string line; std::getline(ev, line);) r.events.push_back(nlohmann::json::parse(line));
  return r;
}

std::vector<nlohmann::json> of_kind(const TrainerRun& r, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& e : r.events)
    if (e["kind"] == kind) out.push_back(e);
  return out;
}

int64_t samples(const TrainerRun& r) {
  int64_t n = 0;
  for (const auto& e : of_kind(r, "samples")) n += e["fields"]["count"].get<int64_t>();
  return n;
}

// Batch 8 at 1 MiB per sample needs 1 (parameters) + 8 (activations) + 8 (gradients) = 17 MiB: too much
// for a 16 MiB device; batch 4 needs 9 MiB plus 1 MiB for the optimizer.
const std::vector<std::string> kOverflowing = {"--batch-size", "8", "--bytes-per-sample", "1MiB", "--steps", "4"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// --- every entry point and every way of finding the driver ------------------------------------------------

class EveryPath : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(EveryPath, ReachesTheTargetWhenMemorySuffices) {
  Scratch scratch;
  auto [resolve, entry] = GetParam();
  TrainerRun r = run_trainer(scratch, "256MiB",
                      {"--resolve", resolve, "--entry", entry, "--steps", "3", "--batch-size", "4", "--eval-every", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.losses.size(), 3u) << r.out;
  EXPECT_EQ(of_kind(r, "step").size(), 3u);
  ASSERT_EQ(of_kind(r, "probe_start").size(), 1u);
  EXPECT_EQ(of_kind(r, "probe_start")[0]["fields"]["framework"], "emulated_trainer");
}

TEST_P(EveryPath, OutOfMemoryIsTheDriversOutOfMemory) {
  Scratch scratch;
  auto [resolve, entry] = GetParam();
  TrainerRun r = run_trainer(scratch, "16MiB", with(kOverflowing, {"--resolve", resolve, "--entry", entry}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("RuntimeError: CUDA out of memory (emulated): CUDA_ERROR_OUT_OF_MEMORY at step 1"));
}

INSTANTIATE_TEST_SUITE_P(
    Trainer, EveryPath,
    ::testing::Combine(::testing::Values("procaddress", "dlsym", "link"),
                       ::testing::Values("alloc", "async", "vmm", "managed", "pitch")),
    [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

// --- recovery modes ---------------------------------------------------------------------------------------

TEST(TrainerRecovery, NoneExitsOneWithTheMessageAndAnUncaughtOom) {
  Scratch scratch;
  TrainerRun r = run_trainer(scratch, "16MiB", kOverflowing);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("RuntimeError: CUDA out of memory (emulated): CUDA_ERROR_OUT_OF_MEMORY at step 1\n"));
  EXPECT_TRUE(r.losses.empty());
  auto ooms = of_kind(r, "oom");
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0]["fields"]["caught"], false);
  EXPECT_EQ(ooms[0]["fields"]["batch_size"], 8);
}

TEST(TrainerRecovery, HalveRedoesTheFailedBatchInHalvesAndReachesTheTarget) {
  Scratch scratch;
  TrainerRun r = run_trainer(scratch, "16MiB", with(kOverflowing, {"--recovery", "halve"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::pair<int, int>> expected = {{1, 4}, {2, 4}, {3, 4}, {4, 4}};
  EXPECT_EQ(r.batches, expected) << r.out;
  auto ooms = of_kind(r, "oom");
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0]["fields"]["caught"], true);
  EXPECT_EQ(ooms[0]["fields"]["step"], 1);
  EXPECT_EQ(ooms[0]["fields"]["batch_size"], 8);
  EXPECT_EQ(ooms[0]["fields"]["phase"], "none");  // no control block here: the phase lives there
  EXPECT_EQ(samples(r), 8 + 3 * 4);               // the failed batch's 8 samples were all processed
}

TEST(TrainerRecovery, HalveReportsPhaseAndCountersThroughTheControlBlock) {
  Scratch scratch;
  std::string name = "/oomh-trainer-test-" + std::to_string(getpid());
  oomh::ControlBlock* cb = oomh::control_block_create(name.c_str());
  ASSERT_NE(cb, nullptr);
  TrainerRun r = run_trainer(scratch, "16MiB", with(kOverflowing, {"--recovery", "halve"}), 0, {"OOMH_CONTROL=" + name});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto ooms = of_kind(r, "oom");
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0]["fields"]["phase"], "backward");  // activations fitted, gradients did not
  EXPECT_EQ(cb->ooms_seen.load(), 1u);
  EXPECT_EQ(cb->ooms_caught.load(), 1u);
  EXPECT_EQ(cb->step.load(), 4);
  EXPECT_EQ(cb->batch_size.load(), 4);
  oomh::control_block_close(cb);
  shm_unlink(name.c_str());
}

TEST(TrainerRecovery, BrokenHalvingSkipsTheFailedBatch) {
  Scratch scratch;
  TrainerRun r = run_trainer(scratch, "16MiB", with(kOverflowing, {"--recovery", "halve", "--skip-failed-batch"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::pair<int, int>> expected = {{2, 4}, {3, 4}, {4, 4}};
  EXPECT_EQ(r.batches, expected) << r.out;
  EXPECT_EQ(samples(r), 3 * 4);
}

TEST(TrainerRecovery, HalvingStopsAtTheFloor) {
  Scratch scratch;
  TrainerRun r = run_trainer(scratch, "8MiB", with(kOverflowing, {"--recovery", "halve", "--min-batch", "4"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("CUDA_ERROR_OUT_OF_MEMORY at step 1"));
  auto ooms = of_kind(r, "oom");
  ASSERT_EQ(ooms.size(), 2u);  // at 8 (caught, halved to 4), at 4 (the floor: gave up)
  EXPECT_EQ(ooms[0]["fields"]["caught"], true);
  EXPECT_EQ(ooms[1]["fields"]["caught"], false);
  EXPECT_EQ(ooms[1]["fields"]["batch_size"], 4);
}

// Batch 4 fits a 16 MiB device, but an eval pass at batch 8 leaves an 8 MiB block in the cache that no
// training step can reuse: the next allocations fail until the cache is emptied.
const std::vector<std::string> kEvalFragments = {"--batch-size", "4", "--bytes-per-sample", "1MiB", "--steps", "4",
                                                 "--eval-every", "2", "--recovery", "retry"};

TEST(TrainerRecovery, RetryEmptiesTheCacheAndRetriesTheSameStep) {
  Scratch scratch;
  TrainerRun r = run_trainer(scratch, "16MiB", kEvalFragments);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.losses.size(), 4u);
  auto ooms = of_kind(r, "oom");
  auto empties = of_kind(r, "empty_cache");
  ASSERT_GE(ooms.size(), 2u);
  EXPECT_EQ(empties.size(), ooms.size());
  for (const auto& e : empties) {
    const auto& f = e["fields"];
    EXPECT_LT(f["reserved_after"].get<int64_t>(), f["reserved_before"].get<int64_t>());
    // What the cache held free is what the call gave back; what stays is what was allocated.
    ASSERT_TRUE(f.contains("freeable_before") && f.contains("allocated_before")) << f.dump();
    EXPECT_GT(f["freeable_before"].get<int64_t>(), 0);
    EXPECT_EQ(f["reserved_before"].get<int64_t>() - f["freeable_before"].get<int64_t>(), f["reserved_after"].get<int64_t>());
    EXPECT_EQ(f["allocated_before"].get<int64_t>(), f["reserved_after"].get<int64_t>());
  }
  for (const auto& o : ooms) EXPECT_EQ(o["fields"]["caught"], true);
  EXPECT_EQ(samples(r), 4 * 4);
}

// On 13 MiB the eval block (8 MiB) left in the cache makes step 3's backward fail while its activations
// (4 MiB) are held. A retry inside the except block empties the cache with those still referenced: the
// call gives back the eval block only, and reports 4 MiB more allocated than the correct retry does.
TEST(TrainerRecovery, RetryInExceptEmptiesTheCacheWhileTheFailedAttemptIsHeld) {
  Scratch scratch;
  auto first_at_step_3 = [](const TrainerRun& r) {
    // The empty_cache right after the first OOM of step 3.
    bool seen = false;
    for (const auto& e : r.events) {
      if (e["kind"] == "oom" && e["fields"]["step"] == 3) seen = true;
      if (seen && e["kind"] == "empty_cache") return e["fields"];
    }
    return nlohmann::json();
  };
  TrainerRun correct = run_trainer(scratch, "13MiB", kEvalFragments);
  TrainerRun broken = run_trainer(scratch, "13MiB", with(kEvalFragments, {"--retry-in-except"}));
  ASSERT_EQ(correct.exit_code, 0) << correct.err << correct.out;
  ASSERT_EQ(broken.exit_code, 0) << broken.err << broken.out;
  EXPECT_THAT(broken.out, HasSubstr("oom at step 3 batch 4: retry 1 of 3 (inside the except block)"));
  nlohmann::json c = first_at_step_3(correct), b = first_at_step_3(broken);
  ASSERT_FALSE(c.is_null() || b.is_null()) << correct.out << broken.out;
  const int64_t MiB = 1 << 20;
  EXPECT_EQ(b["allocated_before"].get<int64_t>(), c["allocated_before"].get<int64_t>() + 4 * MiB);
  EXPECT_EQ(b["freeable_before"].get<int64_t>(), c["freeable_before"].get<int64_t>() - 4 * MiB);
  EXPECT_EQ(b["reserved_after"].get<int64_t>(), b["allocated_before"].get<int64_t>());  // the held blocks stayed
  EXPECT_EQ(broken.losses, correct.losses);
}

// --like-pytorch: the allocator empties its cache and tries once more before it raises, so the eval block
// that made the plain allocator fail never reaches the training code as an OOM.
TEST(TrainerRecovery, LikePytorchAbsorbsWhatEmptyingTheCacheFixes) {
  Scratch scratch;
  TrainerRun plain = run_trainer(scratch, "16MiB", kEvalFragments);
  TrainerRun like = run_trainer(scratch, "16MiB", with(kEvalFragments, {"--like-pytorch"}));
  ASSERT_EQ(like.exit_code, 0) << like.err << like.out;
  EXPECT_FALSE(of_kind(plain, "oom").empty());
  EXPECT_TRUE(of_kind(like, "oom").empty()) << like.out;
  EXPECT_TRUE(of_kind(like, "empty_cache").empty()) << "the allocator's own emptying is not the code's empty_cache";
  EXPECT_EQ(like.losses, plain.losses);
  // What it cannot fix still reaches the code, after the allocator gave its cache back.
  TrainerRun overflow = run_trainer(scratch, "16MiB", with(kOverflowing, {"--like-pytorch"}));
  EXPECT_EQ(overflow.exit_code, 1);
  EXPECT_THAT(overflow.err, HasSubstr("CUDA_ERROR_OUT_OF_MEMORY at step 1"));
}

TEST(TrainerRecovery, RetryWithoutFreeingRunsOutOfRetries) {
  Scratch scratch;
  TrainerRun r = run_trainer(scratch, "16MiB", with(kEvalFragments, {"--retry-without-freeing", "--max-retries", "2"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("CUDA_ERROR_OUT_OF_MEMORY at step 2"));
  EXPECT_TRUE(of_kind(r, "empty_cache").empty());
  EXPECT_EQ(of_kind(r, "oom").size(), 3u);  // two caught, the third given up
}

// Each step keeps 2 MiB for ever (a leak). Step s then holds 4 + 2*s MiB (parameters 1, cached activations
// and gradients 2 + 2, optimizer 1, leaks 2*s, the first leak reusing a cached block), so a 20 MiB device
// fills up at step 9. A restarted process starts with no leak: with checkpoints every two steps the job
// gets through in two attempts.
std::vector<std::string> leaking(const std::string& checkpoint, const std::vector<std::string>& more = {}) {
  return with({"--batch-size", "2", "--bytes-per-sample", "1MiB", "--steps", "14", "--leak-per-step", "2MiB",
               "--recovery", "checkpoint", "--checkpoint", checkpoint, "--checkpoint-every", "2"},
              more);
}

TEST(TrainerRecovery, CheckpointResumeMatchesAnUninterruptedRun) {
  Scratch scratch;
  std::string ckpt = (scratch / "model.ckpt").string();
  TrainerRun reference = run_trainer(scratch, "1GiB", leaking((scratch / "reference.ckpt").string()));
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  ASSERT_EQ(reference.losses.size(), 14u);

  TrainerRun first = run_trainer(scratch, "20MiB", leaking(ckpt));
  EXPECT_EQ(first.exit_code, 1);
  EXPECT_THAT(first.err, HasSubstr("CUDA_ERROR_OUT_OF_MEMORY at step 9"));
  EXPECT_EQ(first.losses.size(), 8u);
  ASSERT_TRUE(fs::exists(ckpt));
  EXPECT_THAT(slurp(ckpt), HasSubstr("step 8\n"));
  for (const auto& entry : fs::directory_iterator(fs::path(ckpt).parent_path()))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << "left behind: " << entry.path();

  TrainerRun second = run_trainer(scratch, "20MiB", leaking(ckpt));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  ASSERT_FALSE(second.losses.empty());
  EXPECT_EQ(second.losses.begin()->first, 9);
  EXPECT_EQ(second.losses.rbegin()->first, 14);
  auto loads = of_kind(second, "checkpoint_load");
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0]["fields"]["step"], 8);
  for (const TrainerRun* run : {&first, &second})
    for (auto [step, loss] : run->losses) EXPECT_DOUBLE_EQ(loss, reference.losses.at(step)) << "step " << step;
  EXPECT_EQ(of_kind(first, "checkpoint_save").size(), 4u);  // steps 2, 4, 6, 8
}

TEST(TrainerRecovery, BrokenResumeStartsFromZeroAndNeverGetsFurther) {
  Scratch scratch;
  std::string ckpt = (scratch / "model.ckpt").string();
  TrainerRun first = run_trainer(scratch, "20MiB", leaking(ckpt, {"--resume-from-zero"}));
  TrainerRun second = run_trainer(scratch, "20MiB", leaking(ckpt, {"--resume-from-zero"}));
  EXPECT_EQ(first.exit_code, 1);
  EXPECT_EQ(second.exit_code, 1);
  ASSERT_FALSE(second.losses.empty());
  EXPECT_EQ(second.losses.begin()->first, 1);
  EXPECT_EQ(second.losses.rbegin()->first, 8);
  EXPECT_TRUE(of_kind(second, "checkpoint_load").empty());
}

TEST(TrainerRecovery, ABadCheckpointIsAnErrorNamingFileLineAndField) {
  Scratch scratch;
  std::string ckpt = (scratch / "model.ckpt").string();
  std::ofstream(ckpt) << "oomharness emulated_trainer checkpoint 1\nstep 6\nsamples many\nbatch 2\n";
  TrainerRun r = run_trainer(scratch, "1GiB", leaking(ckpt));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(ckpt + ":3: field 'samples': expected a whole number, got 'many'"));
}

// --- other behaviours -------------------------------------------------------------------------------------

TEST(TrainerProcess, UsageErrorsExitTwo) {
  Scratch scratch;
  TrainerRun unknown = run_trainer(scratch, "1GiB", {"--no-such-flag"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown flag '--no-such-flag'"));
  TrainerRun bad = run_trainer(scratch, "1GiB", {"--recovery", "pray"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--recovery: bad value 'pray'"));
  TrainerRun size = run_trainer(scratch, "1GiB", {"--bytes-per-sample=12XB"});
  EXPECT_EQ(size.exit_code, 2);
  EXPECT_THAT(size.err, HasSubstr("unknown unit 'XB'"));
}

TEST(TrainerProcess, CrashAndHangAtAStep) {
  Scratch scratch;
  TrainerRun crash = run_trainer(scratch, "1GiB", {"--steps", "5", "--crash-at-step", "3"});
  EXPECT_EQ(crash.signal, SIGSEGV);
  EXPECT_EQ(crash.losses.size(), 2u);
  TrainerRun hang = run_trainer(scratch, "1GiB", {"--steps", "5", "--hang-at-step", "2"}, /*kill_after_ms=*/1500);
  EXPECT_EQ(hang.signal, SIGKILL);  // still running when the test killed it
  EXPECT_EQ(hang.losses.size(), 1u);
}

TEST(TrainerProcess, MissingDriverIsADriverError) {
  Scratch scratch;
  TrainerRun r = run_trainer(scratch, "1GiB", {"--device", "3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("cuDeviceGet: CUDA_ERROR_INVALID_DEVICE"));
}

}  // namespace
