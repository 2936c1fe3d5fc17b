// The C++ probe: silent outside the harness, one event per call inside it. Each case runs in a forked
// child because the probe reads its environment once per process.
#include "oomharness/probe.hpp"

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace {

template <class F>
int in_child(F&& f) {
  pid_t pid = fork();
  if (pid == 0) {
    f();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(Probe, SilentOutsideTheHarness) {
  int rc = in_child([] {
    unsetenv("OOMH_EVENTS");
    unsetenv("OOMH_CONTROL");
    if (oomh::probe::active()) _exit(3);
    oomh::probe::step(1, 64, 0.5);
    oomh::probe::oom(1, 64, "CUDA out of memory", true);
    oomh::probe::phase(oomh::Phase::forward);
  });
  EXPECT_EQ(rc, 0);
}

TEST(Probe, FlushDueOncePerListedStep) {
  int rc = in_child([] {
    setenv("OOMH_FLUSH_AT_STEPS", "5,8,12", 1);
    if (oomh::probe::flush_due(4)) _exit(3);
    if (!oomh::probe::flush_due(5)) _exit(4);
    if (oomh::probe::flush_due(5)) _exit(5);  // once
    if (!oomh::probe::flush_due(12)) _exit(6);
    if (!oomh::probe::flush_due(8)) _exit(7);
  });
  EXPECT_EQ(rc, 0);
  rc = in_child([] {
    unsetenv("OOMH_FLUSH_AT_STEPS");
    if (oomh::probe::flush_due(1)) _exit(3);
  });
  EXPECT_EQ(rc, 0);
}

TEST(Probe, WritesEventsAndControlBlock) {
  std::string events = "/tmp/oomh-probe-test-" + std::to_string(getpid()) + ".jsonl";
  std::string control = "/oomh-probe-test-" + std::to_string(getpid());
  oomh::ControlBlock* cb = oomh::control_block_create(control.c_str());
  ASSERT_NE(cb, nullptr);
  int rc = in_child([&] {
    setenv("OOMH_EVENTS", events.c_str(), 1);
    setenv("OOMH_CONTROL", control.c_str(), 1);
    if (!oomh::probe::active()) _exit(3);
    oomh::probe::begin_step(5, 64);
    oomh::probe::phase(oomh::Phase::backward);
    oomh::probe::oom(5, 64, "CUDA out of memory. Tried to allocate 2.00 GiB", true);
    oomh::probe::empty_cache(1000, 10);
    oomh::probe::empty_cache(1000, 600, 400);            // freeable: what is reserved and not allocated
    oomh::probe::empty_cache(1000, 1000, 400, 0);        // split segments: nothing could go back
    oomh::probe::step(5, 32, 0.125);
    oomh::probe::checkpoint_saved("/tmp/ck.pt", 5);
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(cb->step.load(), 5);
  EXPECT_EQ(cb->batch_size.load(), 64);
  EXPECT_EQ(cb->phase.load(), static_cast<uint32_t>(oomh::Phase::backward));
  EXPECT_EQ(cb->ooms_seen.load(), 1u);
  EXPECT_EQ(cb->ooms_caught.load(), 1u);
  EXPECT_EQ(cb->empty_cache_calls.load(), 3u);
  EXPECT_EQ(cb->events_written.load(), 6u);
  auto lines = read_lines(events);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0]["kind"], "oom");
  EXPECT_EQ(lines[0]["fields"]["phase"], "backward");
  EXPECT_EQ(lines[0]["fields"]["caught"], true);
  EXPECT_EQ(lines[1]["kind"], "empty_cache");
  EXPECT_EQ(lines[1]["fields"], (nlohmann::json{{"reserved_before", 1000}, {"reserved_after", 10}}));
  EXPECT_EQ(lines[2]["fields"], (nlohmann::json{{"reserved_before", 1000}, {"reserved_after", 600},
                                                {"allocated_before", 400}, {"freeable_before", 600}}));
  EXPECT_EQ(lines[3]["fields"], (nlohmann::json{{"reserved_before", 1000}, {"reserved_after", 1000},
                                                {"allocated_before", 400}, {"freeable_before", 0}}));
  EXPECT_EQ(lines[4]["kind"], "step");
  EXPECT_EQ(lines[4]["fields"]["batch_size"], 32);
  EXPECT_EQ(lines[5]["fields"]["path"], "/tmp/ck.pt");
  oomh::control_block_close(cb);
  shm_unlink(control.c_str());
  unlink(events.c_str());
}

}  // namespace
