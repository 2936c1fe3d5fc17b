// Note [Processes outside the shim] in runner/src/exec/escapes.h: NVML's processes through a fake NVML library
// (this machine has no GPU), and how the runner tells a process of the attempt and whether the shim is active
// in it, on real processes.

#include "exec/escapes.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

extern char** environ;

namespace oomh::exec {
namespace {

namespace fs = std::filesystem;

const char* fake_nvml() { return std::getenv("EXEC_TEST_FAKE_NVML"); }

// A `sleep 30` child with the given environment (added to this process's), optionally in a session of its own.
struct Sleeper {
  pid_t pid = -1;
  Sleeper(const std::vector<std::string>& extra, bool own_session) {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0 && std::strncmp(*e, "OOMH_", 5) != 0) env.push_back(*e);
    env.insert(env.end(), extra.begin(), extra.end());
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    if (own_session) posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    char sleep_cmd[] = "sleep", thirty[] = "30";
    char* argv[] = {sleep_cmd, thirty, nullptr};
    if (posix_spawnp(&pid, "sleep", nullptr, &attr, argv, envp.data()) != 0) pid = -1;
    posix_spawnattr_destroy(&attr);
    // posix_spawn returns as the exec begins, before the kernel has laid out the new image's environment:
    // /proc/<pid>/environ reads empty for a moment.
    for (int i = 0; pid > 0 && i < 500; ++i) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
      if (in && in.peek() != std::ifstream::traits_type::eof()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Sleeper() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

class Escapes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("oomh-escapes-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    pids_ = (dir_ / "pids").string();
    setenv("FAKE_NVML_PIDS", pids_.c_str(), 1);
    unsetenv("FAKE_NVML_DEVICES");
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_PIDS");
    unsetenv("FAKE_NVML_DEVICES");
    fs::remove_all(dir_);
  }
  void write_pids(const std::string& text) { std::ofstream(pids_) << text; }
  fs::path dir_;
  std::string pids_;
};

TEST_F(Escapes, NoNvmlLibraryMeansNothingIsPolled) {
  GpuProcessList none((dir_ / "no-such-libnvidia-ml.so").string());
  EXPECT_FALSE(none.available());
  EXPECT_TRUE(none.now().empty());
}

TEST_F(Escapes, NvmlWithoutAGpuIsNotPolled) {
  if (!fake_nvml()) GTEST_SKIP() << "no fake NVML built";
  setenv("FAKE_NVML_DEVICES", "0", 1);
  GpuProcessList list(fake_nvml());
  EXPECT_FALSE(list.available());
}

TEST_F(Escapes, ListsTheProcessesNvmlReports) {
  if (!fake_nvml()) GTEST_SKIP() << "no fake NVML built";
  write_pids("1234 134217728\n5678\n");
  GpuProcessList list(fake_nvml());
  ASSERT_TRUE(list.available());
  std::vector<GpuProcess> got = list.now();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].pid, 1234);
  EXPECT_EQ(got[0].used, 134217728u);
  EXPECT_EQ(got[1].pid, 5678);
  EXPECT_EQ(got[1].used, 0u);
  // More processes than the first call has room for: asked again with the size NVML said.
  std::string many;
  for (int i = 1; i <= 100; ++i) many += std::to_string(i) + "\n";
  write_pids(many);
  got = list.now();
  ASSERT_EQ(got.size(), 100u);
  EXPECT_EQ(got.back().pid, 100);
  write_pids("");
  EXPECT_TRUE(list.now().empty());
}

TEST_F(Escapes, AProcessIsTheAttemptsByAncestryEnvironmentOrSession) {
  Sleeper child({}, false);
  ASSERT_GT(child.pid, 0);
  AttemptProcesses mine{getpid(), "/proc/1/fd/99", nullptr, "liboomharness_inject.so"};
  EXPECT_TRUE(belongs_to(child.pid, mine)) << "a child of the attempt's process";
  AttemptProcesses other{999999, "/proc/1/fd/98", nullptr, "liboomharness_inject.so"};  // no process of ours
  EXPECT_FALSE(belongs_to(child.pid, other));

  // Orphaned in a session of its own, still naming the attempt's block: the attempt's.
  Sleeper named({"OOMH_CONTROL=/proc/1/fd/99"}, true);
  ASSERT_GT(named.pid, 0);
  AttemptProcesses stranger{999999, "/proc/1/fd/99", nullptr, "liboomharness_inject.so"};
  EXPECT_TRUE(belongs_to(named.pid, stranger));
  stranger.control = "/proc/1/fd/9";  // a prefix of the name is not the name
  EXPECT_FALSE(belongs_to(named.pid, stranger));
  // Its own session leader is itself: an attempt led by it owns it.
  EXPECT_TRUE(belongs_to(named.pid, AttemptProcesses{named.pid, "", nullptr, ""}));
  // One that has ended (a zombie not reaped yet: NVML may still list it) is nobody's.
  const pid_t ended = fork();
  if (ended == 0) _exit(0);
  ASSERT_GT(ended, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(belongs_to(ended, mine));
  waitpid(ended, nullptr, 0);
  EXPECT_FALSE(belongs_to(0, mine));
  EXPECT_FALSE(belongs_to(999999, mine));
}

TEST_F(Escapes, TheShimIsActiveOnlyWhereItIsMappedAndRegistered) {
  const char* inject = std::getenv("EXEC_TEST_INJECT");
  if (!inject) GTEST_SKIP() << "no shim built";
  const std::string name = "/oomh-escapes-" + std::to_string(getpid());
  ControlBlock* cb = control_block_create(name.c_str());
  ASSERT_NE(cb, nullptr);
  const std::string shim_file = fs::path(inject).filename().string();
  AttemptProcesses mine{getpid(), name, cb, shim_file};

  Sleeper plain({}, false);
  Sleeper shimmed({std::string("LD_PRELOAD=") + inject, "OOMH_CONTROL=" + name, "OOMH_LOG=quiet"}, false);
  Sleeper disabled({std::string("LD_PRELOAD=") + inject, "OOMH_CONTROL=" + name, "OOMH_LOG=quiet", "OOMH_DISABLE=1"}, false);
  ASSERT_GT(plain.pid, 0);
  ASSERT_GT(shimmed.pid, 0);
  ASSERT_GT(disabled.pid, 0);
  // The shims register as their processes start.
  for (int i = 0; i < 1000 && cb->process_count.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(shim_state(plain.pid, mine), "absent");
  EXPECT_EQ(shim_state(shimmed.pid, mine), "");
  EXPECT_EQ(shim_state(disabled.pid, mine), "inactive");
  // A pid the shim registered, in a process whose image no longer has it (exec through `env -u LD_PRELOAD`):
  // what /proc/<pid>/maps shows decides.
  cb->processes[kMaxProcesses - 1].pid.store(plain.pid);
  EXPECT_EQ(shim_state(plain.pid, mine), "absent");
  EXPECT_NE(command_of(shimmed.pid).find("sleep 30"), std::string::npos) << command_of(shimmed.pid);
  control_block_close(cb);
  shm_unlink(name.c_str());
}

}  // namespace
}  // namespace oomh::exec
