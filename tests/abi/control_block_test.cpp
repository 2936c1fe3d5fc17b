#include "oomharness/control_block.h"

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sys/wait.h>

namespace {

std::string unique_name(const char* tag) {
  return "/oomh-test-" + std::string(tag) + "-" + std::to_string(getpid());
}

TEST(ControlBlock, CreateOpenAndValidate) {
  auto name = unique_name("open");
  oomh::ControlBlock* cb = oomh::control_block_create(name.c_str());
  ASSERT_NE(cb, nullptr) << std::strerror(errno);
  EXPECT_TRUE(oomh::control_block_valid(cb));
  EXPECT_EQ(cb->step.load(), oomh::kUnknownStep);
  EXPECT_EQ(cb->batch_size.load(), -1);
  EXPECT_GT(cb->start_ns, 0u);

  // A second create with the same name fails: names are unique per attempt.
  EXPECT_EQ(oomh::control_block_create(name.c_str()), nullptr);
  EXPECT_EQ(errno, EEXIST);

  oomh::ControlBlock* other = oomh::control_block_open(name.c_str());
  ASSERT_NE(other, nullptr);
  cb->devices[0].held.store(123);
  EXPECT_EQ(other->devices[0].held.load(), 123u);
  oomh::control_block_close(other);
  oomh::control_block_close(cb);
  EXPECT_EQ(shm_unlink(name.c_str()), 0);
}

TEST(ControlBlock, OpenRejectsMissingAndForeignSegments) {
  EXPECT_EQ(oomh::control_block_open("/oomh-test-does-not-exist"), nullptr);
  auto name = unique_name("foreign");
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, sizeof(oomh::ControlBlock)), 0);  // zeros: no magic
  close(fd);
  EXPECT_EQ(oomh::control_block_open(name.c_str()), nullptr);
  EXPECT_EQ(errno, EPROTO);
  shm_unlink(name.c_str());
}

TEST(ControlBlock, SharedAcrossFork) {
  auto name = unique_name("fork");
  oomh::ControlBlock* cb = oomh::control_block_create(name.c_str());
  ASSERT_NE(cb, nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    oomh::ControlBlock* child = oomh::control_block_open(name.c_str());
    if (!child) _exit(2);
    child->step.store(42);
    child->devices[3].held.fetch_add(1000);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(cb->step.load(), 42);
  EXPECT_EQ(cb->devices[3].held.load(), 1000u);
  oomh::control_block_close(cb);
  shm_unlink(name.c_str());
}

TEST(ControlBlock, RaisePeakIsMonotonicUnderThreads) {
  std::atomic<uint64_t> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 10000; ++i) oomh::raise_peak(peak, i * 8 + static_cast<uint64_t>(t));
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(peak.load(), 9999u * 8 + 7);
}

TEST(ControlBlock, PlanPublishAndRead) {
  auto* cb = static_cast<oomh::ControlBlock*>(calloc(1, sizeof(oomh::ControlBlock)));
  oomh::control_block_init(cb);
  static char buf[oomh::kPlanCapacity];
  uint32_t size = 0;
  EXPECT_EQ(oomh::control_block_read_plan(cb, buf, size), 0u);  // nothing published yet
  std::string plan = R"({"version":1,"rules":[]})";
  ASSERT_TRUE(oomh::control_block_publish_plan(cb, plan.data(), static_cast<uint32_t>(plan.size())));
  uint32_t g = oomh::control_block_read_plan(cb, buf, size);
  EXPECT_EQ(g, 2u);
  EXPECT_EQ(std::string(buf, size), plan);
  cb->plan_generation.store(3);  // a writer is mid-way
  EXPECT_EQ(oomh::control_block_read_plan(cb, buf, size), 0u);
  std::string too_big(oomh::kPlanCapacity + 1, 'x');
  cb->plan_generation.store(4);
  EXPECT_FALSE(oomh::control_block_publish_plan(cb, too_big.data(), static_cast<uint32_t>(too_big.size())));
  free(cb);
}

TEST(Phase, NamesRoundTrip) {
  for (uint32_t i = 0; i <= 6; ++i) {
    oomh::Phase p{};
    ASSERT_TRUE(oomh::phase_from_name(oomh::phase_name(static_cast<oomh::Phase>(i)), p));
    EXPECT_EQ(static_cast<uint32_t>(p), i);
  }
  oomh::Phase p{};
  EXPECT_FALSE(oomh::phase_from_name("forwards", p));
}

}  // namespace
