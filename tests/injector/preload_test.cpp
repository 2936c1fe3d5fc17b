// The real preload path: child processes run under LD_PRELOAD=liboomharness_inject.so against the CUDA
// driver double (LD_LIBRARY_PATH), reaching the driver by each of the three paths. The test plays the
// runner: it creates the control block, hands its name to the child, and reads the block and the event
// log afterwards.
#include "../../injector/preload/hook_table.h"

#include <oomharness/control_block.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using oomh::inject::HookLibrary;
using oomh::inject::HookRole;
using oomh::inject::kHookTable;

namespace {

constexpr uint64_t MiB = 1ull << 20;

struct Child {
  int code = -1;
  bool timed_out = false;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `argv` with exactly `env` (plus PATH), killing it after `timeout_s`.
Child run(const std::vector<std::string>& argv, std::vector<std::string> env, int timeout_s = 60) {
  static int n = 0;
  std::string base = "/tmp/oomh-preload-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
  std::string out_path = base + ".out", err_path = base + ".err";
  env.push_back("PATH=/usr/bin:/bin");
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> a, e;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    e.push_back(nullptr);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  Child c;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      c.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  c.out = slurp(out_path);
  c.err = slurp(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  return c;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string line;
  while (std::getline(s, line)) out.push_back(line);
  return out;
}

// The runner's side of a job: a control block and an event log.
class Job {
 public:
  Job() {
    static int n = 0;
    name_ = "/oomh-preload-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    cb_ = oomh::control_block_create(name_.c_str());
    events_ = "/tmp" + name_ + ".events";
    unlink(events_.c_str());
  }
  ~Job() {
    oomh::control_block_close(cb_);
    shm_unlink(name_.c_str());
    unlink(events_.c_str());
  }
  oomh::ControlBlock* block() const { return cb_; }
  // The environment of a job under the shim: preload, the driver double, this job's block and log.
  std::vector<std::string> env(std::vector<std::string> extra = {}) const {
    std::vector<std::string> e = shim_env();
    e.push_back("OOMH_CONTROL=" + name_);
    e.push_back("OOMH_EVENTS=" + events_);
    e.insert(e.end(), extra.begin(), extra.end());
    return e;
  }
  static std::vector<std::string> shim_env() {
    return {std::string("LD_PRELOAD=") + OOMH_INJECT_LIBRARY,
            std::string("LD_LIBRARY_PATH=") + OOMH_CUDA_DOUBLE_DIR + ":" + OOMH_NVML_DOUBLE_DIR,
            "CUDA_DOUBLE_MEMORY=256MiB", "CUDA_DOUBLE_DEVICES=2"};
  }
  std::vector<nlohmann::json> events(const std::string& kind = "") const {
    std::vector<nlohmann::json> out;
    for (const auto& line : lines(slurp(events_))) {
      auto j = nlohmann::json::parse(line);
      if (kind.empty() || j["kind"] == kind) out.push_back(j);
    }
    return out;
  }
  const oomh::ProcessSlot* slot_of(int pid) const {
    for (const auto& s : cb_->processes)
      if (s.pid.load() == pid) return &s;
    return nullptr;
  }

 private:
  std::string name_, events_;
  oomh::ControlBlock* cb_;
};

const std::string kClient = OOMH_CUDA_CLIENT;

class Preload : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef OOMH_SANITIZED
    // A sanitized shim needs the sanitizer runtime loaded first in every child; these tests run unsanitized.
    std::exit(125);
#endif
  }
};

class PreloadPaths : public Preload, public ::testing::WithParamInterface<std::string> {};

}  // namespace

// Project-HAMi's check: every entry of the hook table is reached through each path, and each reach ends in
// the shim. Without the shim the same lookups end in the driver, so the check can fail.
TEST_P(PreloadPaths, EveryHookTableEntryIsReachable) {
  Job job;
  Child c = run({kClient, "table", GetParam()}, job.env());
  ASSERT_EQ(c.code, 0) << c.err;
  std::map<std::string, std::string> where;
  for (const auto& line : lines(c.out)) {
    auto space = line.find(' ');
    where[line.substr(0, space)] = line.substr(space + 1);
  }
  for (const auto& h : kHookTable) {
    bool reachable = h.library == HookLibrary::cuda || GetParam() == "dlsym";
    EXPECT_EQ(where[h.name], reachable ? "shim" : "missing") << h.name << " through " << GetParam();
  }
  Child plain = run({kClient, "table", GetParam()},
                    {std::string("LD_LIBRARY_PATH=") + OOMH_CUDA_DOUBLE_DIR + ":" + OOMH_NVML_DOUBLE_DIR});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.find(" shim"), std::string::npos) << plain.out;
}

// Every allocation entry fails on its second call (`every: 2`), every free entry gives its bytes back, and
// the control block and the event log say so.
TEST_P(PreloadPaths, EveryEntryFaultsAndTheLedgerCounts) {
  Job job;
  Child c = run({kClient, "reach", GetParam()},
                job.env({R"(OOMH_PLAN={"rules":[{"name":"second","when":{"every":2}},)"
                         R"({"name":"second-pin","when":{"memory":"host","every":2}}]})"}));
  ASSERT_EQ(c.code, 0) << c.err << c.out;
  // Note [Host memory]: the pinned host entries, and cuMemCreate once more with a host location.
  const std::set<std::string> host_only = {"cuMemHostAlloc", "cuMemAllocHost_v2", "cuMemHostRegister_v2"};
  std::set<std::string> allocs, frees, device_allocs;
  for (const auto& h : kHookTable) {
    if (h.role == HookRole::alloc) allocs.insert(h.name);
    if (h.role == HookRole::alloc && !host_only.count(h.name)) device_allocs.insert(h.name);
    if (h.role == HookRole::free) frees.insert(h.name);
  }
  allocs.insert("cuMemCreate(host)");
  std::set<std::string> called, failed, freed;
  uint64_t kept_bytes = 0;
  for (const auto& line : lines(c.out)) {
    char name[64];
    int attempt = 0, rc = 0;
    size_t size = 0;
    if (std::sscanf(line.c_str(), "call %63s %d rc=%d size=%zu", name, &attempt, &rc, &size) == 4) {
      called.insert(name);
      EXPECT_EQ(rc, attempt == 1 ? 0 : 2) << line;  // exactly CUDA_ERROR_OUT_OF_MEMORY
      if (attempt == 2 && rc == 2) failed.insert(name);
      if (attempt == 1) kept_bytes += size;
    } else if (std::sscanf(line.c_str(), "free %63s rc=%d", name, &rc) == 2) {
      EXPECT_EQ(rc, 0) << line;
      freed.insert(name);
    } else if (std::sscanf(line.c_str(), "bad %63s rc=%d", name, &rc) == 2) {
      EXPECT_EQ(rc, 1) << line;
    } else {
      continue;
    }
    if (host_only.count(name) || std::string(name) == "cuMemCreate(host)") {
      if (std::sscanf(line.c_str(), "call %63s %d rc=%d size=%zu", name, &attempt, &rc, &size) == 4 && attempt == 1)
        kept_bytes -= size;  // host bytes are no device's
    }
  }
  EXPECT_EQ(called, allocs);
  EXPECT_EQ(failed, allocs);
  EXPECT_EQ(freed, frees);

  std::set<std::string> injected, injected_host;
  for (const auto& e : job.events("inject")) {
    const auto& f = e["fields"];
    bool host = f["memory"] == "host";
    (host ? injected_host : injected).insert(f["entry"].get<std::string>());
    EXPECT_EQ(f["rule"], host ? "second-pin" : "second");
    EXPECT_EQ(f["reason"], "rule");
    EXPECT_EQ(f["device"], host ? -1 : 0);
  }
  EXPECT_EQ(injected, device_allocs);
  EXPECT_EQ(injected_host, (std::set<std::string>{"cuMemCreate", "cuMemHostAlloc", "cuMemAllocHost_v2", "cuMemHostRegister_v2"}));
  const oomh::DeviceCounters& d = job.block()->devices[0];
  EXPECT_EQ(d.alloc_calls.load(), 2 * device_allocs.size());  // cuMemAddressReserve and host memory not counted
  EXPECT_EQ(d.failures_injected.load(), device_allocs.size());
  EXPECT_EQ(d.free_calls.load(), device_allocs.size());
  EXPECT_EQ(d.peak.load(), kept_bytes);
  EXPECT_EQ(d.held.load(), 0u);
  EXPECT_EQ(d.physical_total.load(), 256 * MiB);
  auto exits = job.events("shim_exit");
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0]["fields"]["peak"], kept_bytes);
  EXPECT_EQ(exits[0]["fields"]["held"], 0);
}

INSTANTIATE_TEST_SUITE_P(ThreeWaysIn, PreloadPaths, ::testing::Values("export", "dlsym", "procaddr"));

TEST_F(Preload, MemoryQueriesAnswerTheCap) {
  Job job;
  Child c = run({kClient, "info", "dlsym"}, job.env({"OOMH_CAP=16MiB", "CUDA_VISIBLE_DEVICES=1"}));
  ASSERT_EQ(c.code, 0) << c.err;
  auto out = c.out;
  EXPECT_NE(out.find("before free=16777216 total=16777216"), std::string::npos) << out;
  EXPECT_NE(out.find("alloc rc=0"), std::string::npos) << out;
  EXPECT_NE(out.find("after free=12582912 total=16777216"), std::string::npos) << out;
  EXPECT_NE(out.find("big rc=2"), std::string::npos) << out;  // 48 MiB fits the double, not the cap
  EXPECT_NE(out.find("total_mem 16777216"), std::string::npos) << out;
  // NVML index 1 is CUDA device 0 under CUDA_VISIBLE_DEVICES=1; NVML index 0 is not visible: real figures.
  EXPECT_NE(out.find("nvml 1 total=16777216 free=12582912 used=4194304 v2total=16777216 v2free=12582912 v2used=0 v2reserved=4194304"),
            std::string::npos) << out;
  EXPECT_NE(out.find("nvml 0 total=85899345920 free=75161927680"), std::string::npos) << out;
  EXPECT_EQ(job.block()->devices[0].cap_failures.load(), 1u);
  auto inject = job.events("inject");
  ASSERT_EQ(inject.size(), 1u);
  EXPECT_EQ(inject[0]["fields"]["reason"], "cap");
  EXPECT_EQ(inject[0]["fields"]["size"], 48 * MiB);
}

// Note [Counting the footprint], through the real preload: the double's context takes 40 MiB of the device;
// NVML (the double) reports it for this pid; under a footprint cap it counts, under an allocations cap not.
TEST_F(Preload, AFootprintCapCountsTheContext) {
  Job job;
  Child c = run({kClient, "info", "export"},
                job.env({"OOMH_CAP=64MiB", "OOMH_CAP_COUNTS=footprint", "CUDA_DOUBLE_CONTEXT_MEMORY=40MiB"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("before free=25165824 total=67108864"), std::string::npos) << c.out;  // 64 - 40 MiB
  EXPECT_NE(c.out.find("alloc rc=0"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("after free=20971520 total=67108864"), std::string::npos) << c.out;  // 64 - 40 - 4
  EXPECT_NE(c.out.find("big rc=2"), std::string::npos) << c.out;  // 48 MiB: over the cap only with the context
  auto footprint = job.events("footprint");
  ASSERT_EQ(footprint.size(), 1u);
  EXPECT_EQ(footprint[0]["fields"]["footprint"], 40 * MiB);
  EXPECT_EQ(footprint[0]["fields"]["overhead"], 40 * MiB);
  EXPECT_EQ(job.events("shim_exit").at(0)["fields"]["overhead"], 40 * MiB);
  EXPECT_EQ(job.block()->devices[0].peak.load(), 44 * MiB);
  EXPECT_EQ(job.block()->devices[0].held.load(), 0u);  // given back at exit, context included

  Job plain;
  c = run({kClient, "info", "export"}, plain.env({"OOMH_CAP=64MiB", "CUDA_DOUBLE_CONTEXT_MEMORY=40MiB"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("before free=67108864 total=67108864"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("big rc=0"), std::string::npos) << c.out;  // 4 + 48 MiB of allocations fit 64 MiB
  EXPECT_TRUE(plain.events("footprint").empty());
}

// Where NVML does not list the process (a container's own pid namespace), the shim says so once and the cap
// counts allocations.
TEST_F(Preload, AFootprintCapThatCannotMeasureCountsAllocations) {
  Job job;
  Child c = run({kClient, "info", "export"}, job.env({"OOMH_CAP=64MiB", "OOMH_CAP_COUNTS=footprint",
                                                      "CUDA_DOUBLE_CONTEXT_MEMORY=40MiB", "NVML_DOUBLE_PID_OFFSET=100000"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("before free=67108864 total=67108864"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("big rc=0"), std::string::npos) << c.out;
  auto warnings = job.events("warning");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0]["fields"]["message"].get<std::string>().find("cannot measure"), std::string::npos);
  EXPECT_NE(c.err.find("caps count allocations only"), std::string::npos) << c.err;
}

TEST_F(Preload, CapThroughCuGetProcAddress) {
  Job job;
  Child c = run({kClient, "info", "procaddr"}, job.env({"OOMH_CAP=0=16MiB"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("after free=12582912 total=16777216"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("big rc=2"), std::string::npos) << c.out;
}

TEST_F(Preload, ThirtyTwoThreadsExactTotals) {
  Job job;
  constexpr int threads = 32, per_thread = 100000;
  Child c = run({kClient, "threads", std::to_string(threads), std::to_string(per_thread)}, job.env(), 300);
  ASSERT_FALSE(c.timed_out);
  ASSERT_EQ(c.code, 0) << c.err << c.out;
  const oomh::DeviceCounters& d = job.block()->devices[0];
  constexpr uint64_t calls = uint64_t{threads} * per_thread, kept = uint64_t{threads} * (per_thread / 100);
  EXPECT_EQ(d.alloc_calls.load(), calls);
  EXPECT_EQ(d.free_calls.load(), calls - kept);
  EXPECT_EQ(d.held.load(), 0u);  // given back at exit
  auto exits = job.events("shim_exit");
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0]["fields"]["held"], kept * 4096);  // what the process still held when it exited
  EXPECT_EQ(exits[0]["fields"]["alloc_calls"], calls);
  EXPECT_EQ(exits[0]["fields"]["free_calls"], calls - kept);
}

TEST_F(Preload, AForkedChildIsCounted) {
  Job job;
  Child c = run({kClient, "fork"}, job.env());
  ASSERT_EQ(c.code, 0) << c.err << c.out;
  int parent = 0, child = 0, status = 0, forked = 0, rc = -1;
  for (const auto& line : lines(c.out)) {
    std::sscanf(line.c_str(), "parent pid=%d child=%d status=%d", &parent, &child, &status);
    std::sscanf(line.c_str(), "forked pid=%d rc=%d", &forked, &rc);
  }
  ASSERT_EQ(child, forked);
  EXPECT_EQ(rc, 0);
  const oomh::ProcessSlot* slot = job.slot_of(child);
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->flags.load(), oomh::kProcessForked);
  EXPECT_EQ(slot->parent_pid.load(), parent);
  ASSERT_NE(job.slot_of(parent), nullptr);
  EXPECT_EQ(job.block()->devices[0].alloc_calls.load(), 2u);
  EXPECT_EQ(job.block()->devices[0].peak.load(), 5 * MiB);
  bool child_exit = false;
  for (const auto& e : job.events("shim_exit")) {
    if (e["pid"] == child) {
      child_exit = true;
      EXPECT_EQ(e["fields"]["held"], 3 * MiB);  // its own, not its parent's 2 MiB
      EXPECT_EQ(e["fields"]["alloc_calls"], 1);
    }
  }
  EXPECT_TRUE(child_exit);
  bool forked_start = false;
  for (const auto& e : job.events("shim_start")) forked_start = forked_start || (e["pid"] == child && e["fields"]["forked"] == true);
  EXPECT_TRUE(forked_start);
}

TEST_F(Preload, AnExecdChildRegistersItself) {
  Job job;
  Child c = run({kClient, "exec"}, job.env());
  ASSERT_EQ(c.code, 0) << c.err << c.out;
  int parent = 0, child = 0, status = 0, reported = 0, rc = -1;
  char shim_parent[32] = {};
  for (const auto& line : lines(c.out)) {
    std::sscanf(line.c_str(), "parent pid=%d child=%d status=%d", &parent, &child, &status);
    std::sscanf(line.c_str(), "child pid=%d rc=%d shim_parent=%31s", &reported, &rc, shim_parent);
  }
  ASSERT_EQ(child, reported);
  EXPECT_EQ(std::string(shim_parent), std::to_string(child));  // the nearest shim process: itself, for its children
  int slots = 0;
  for (const auto& s : job.block()->processes) slots += s.pid.load() == child;
  EXPECT_EQ(slots, 1);  // the exec'd image took over the slot its forked image had registered
  const oomh::ProcessSlot* slot = job.slot_of(child);
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->flags.load(), oomh::kProcessExecd);
  EXPECT_EQ(slot->parent_pid.load(), parent);
  EXPECT_EQ(job.block()->devices[0].alloc_calls.load(), 1u);
  bool exec_start = false;
  for (const auto& e : job.events("shim_start")) exec_start = exec_start || (e["pid"] == child && e["fields"]["exec"] == true);
  EXPECT_TRUE(exec_start);
}

TEST_F(Preload, NoOomhVariablesMeansAPurePassThrough) {
  Child c = run({kClient, "passthrough"}, Job::shim_env());
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("control_env=unset"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("shim_parent_env=unset"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("block=absent"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("dlsym=real"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("procaddr=real"), std::string::npos) << c.out;
  EXPECT_EQ(c.err, "");
  // OOMH_DISABLE wins over everything else.
  auto env = Job::shim_env();
  env.push_back("OOMH_DISABLE=1");
  env.push_back("OOMH_CAP=1");
  Child off = run({kClient, "passthrough"}, env);
  ASSERT_EQ(off.code, 0) << off.err;  // a 1-byte cap would have failed the 1 MiB allocation
  EXPECT_NE(off.out.find("block=absent"), std::string::npos) << off.out;
  EXPECT_NE(off.out.find("dlsym=real"), std::string::npos) << off.out;
}

TEST_F(Preload, OnItsOwnTheShimCreatesAndRemovesItsBlock) {
  auto env = Job::shim_env();
  env.push_back("OOMH_CAP=1GiB");
  Child c = run({kClient, "solo"}, env);
  ASSERT_EQ(c.code, 0) << c.err;
  char control[64] = {}, expected[64] = {}, block[16] = {};
  int rc = -1;
  ASSERT_EQ(std::sscanf(c.out.c_str(), "rc=%d control=%63s expected=%63s block=%15s", &rc, control, expected, block), 4) << c.out;
  EXPECT_EQ(rc, 0);
  EXPECT_STREQ(control, expected);
  EXPECT_STREQ(block, "exists");
  struct stat st{};
  EXPECT_NE(stat((std::string("/dev/shm") + expected).c_str(), &st), 0) << "the creator unlinks its block at exit";
}

TEST_F(Preload, ABadPlanIsOneLineAndAPassThrough) {
  Job job;
  Child c = run({kClient, "info", "export"}, job.env({R"(OOMH_PLAN={"rules":[{"when":{"stpe":5}}]})", "OOMH_CAPP=1"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.err.find("oomharness: unknown variable OOMH_CAPP (did you mean OOMH_CAP?)\n"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("oomharness: OOMH_PLAN: rules[0].when: unknown key 'stpe' (no faults and no caps; the shim only counts)\n"),
            std::string::npos) << c.err;
  EXPECT_NE(c.out.find("big rc=0"), std::string::npos) << c.out;
  EXPECT_EQ(job.events("warning").size(), 1u);
  EXPECT_EQ(job.block()->devices[0].alloc_calls.load(), 2u);
}

// A library that looks CUDA up in its constructor, preloaded before and after the shim, active or not.
TEST_F(Preload, StartUpLookupsNeitherDeadlockNorRecurse) {
  for (const std::string& order : {std::string(OOMH_EARLY_LIBRARY) + ":" + OOMH_INJECT_LIBRARY,
                                    std::string(OOMH_INJECT_LIBRARY) + ":" + OOMH_EARLY_LIBRARY}) {
    for (bool active : {false, true}) {
      Job job;
      std::vector<std::string> env = active ? job.env({"OOMH_CAP=16MiB"}) : Job::shim_env();
      env[0] = "LD_PRELOAD=" + order;
      Child c = run({kClient, "info", "export"}, env, 20);
      EXPECT_FALSE(c.timed_out) << order;
      EXPECT_EQ(c.code, 0) << order << "\n" << c.err;
      EXPECT_NE(c.err.find("early: proc=1 alloc=1 procaddr_rc=0"), std::string::npos) << c.err;
      EXPECT_NE(c.out.find(active ? "big rc=2" : "big rc=0"), std::string::npos) << c.out;
    }
  }
}

// Only the hooks and oomh_note_site leave the library (nm -D --defined-only).
TEST_F(Preload, OnlyTheHooksAreExported) {
  FILE* nm = popen((std::string("nm -D --defined-only ") + OOMH_INJECT_LIBRARY + " 2>/dev/null").c_str(), "r");
  ASSERT_NE(nm, nullptr);
  std::set<std::string> exported;
  char line[512];
  while (std::fgets(line, sizeof line, nm)) {
    char address[64], type[8], name[256];
    if (std::sscanf(line, "%63s %7s %255s", address, type, name) == 3) exported.insert(name);
  }
  if (pclose(nm) != 0 && exported.empty()) GTEST_SKIP() << "nm is not available";
  // Besides the hooks: what the job calls (Note [The site of a recorded call], Note [Where a step fault fires]).
  std::set<std::string> expected = {"dlsym", "oomh_note_site", "oomh_register_requests", "oomh_request", "oomh_shim_active"};
  for (const auto& h : kHookTable)
    if (h.library == HookLibrary::cuda) expected.insert(h.name);
  EXPECT_EQ(exported, expected);
}

// issue 12: the cap is checked against the padded rows a pitched allocation holds, not width x height.
// The client's exit gives its bytes back, so the check is on its answers and on the peak, which no exit
// lowers.
TEST(PreloadPitch, CapCountsPaddedRows) {
  Job job;
  Child c = run({kClient, "pitch"}, job.env({"OOMH_CAP=1MiB"}));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("big rc=2 "), std::string::npos) << c.out;  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_NE(c.out.find("small rc=0 pitch=512"), std::string::npos) << c.out;
  EXPECT_LE(job.block()->devices[0].peak.load(), 1 * MiB);
  EXPECT_GE(job.block()->devices[0].cap_failures.load(), 1u);
}

// Note [A block the job cannot take down] (control_block.h): the shim maps the runner's sealed memfd by
// its /proc path, and nobody can shrink it.
TEST(PreloadControl, SealedMemfdByPath) {
  int fd = -1;
  oomh::ControlBlock* cb = oomh::control_block_create_sealed(fd);
  ASSERT_NE(cb, nullptr) << std::strerror(errno);
  std::string events = "/tmp/oomh-preload-test-sealed-" + std::to_string(getpid()) + ".events";
  std::vector<std::string> env = Job::shim_env();
  env.push_back("OOMH_CONTROL=/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd));
  env.push_back("OOMH_EVENTS=" + events);
  env.push_back("OOMH_CAP=1MiB");
  Child c = run({kClient, "pitch"}, env);
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(cb->process_count.load(), 1u) << c.err;
  EXPECT_GE(cb->devices[0].alloc_calls.load(), 2u);
  EXPECT_NE(ftruncate(fd, 0), 0);  // sealed
  struct stat st{};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), sizeof(oomh::ControlBlock));
  oomh::control_block_close(cb);
  close(fd);
  unlink(events.c_str());
}

