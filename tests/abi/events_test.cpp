#include "oomharness/events.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

TEST(EventLine, IsValidJsonWithEveryFieldType) {
  oomh::events::EventLine e(oomh::events::kSrcShim, oomh::events::kInject);
  e.add("entry", "cuMemAlloc_v2").add("size", uint64_t{1} << 40).add("device", 0).add("step", int64_t{-1})
      .add("loss", 0.25).add("nan", NAN).add("caught", true).add("msg", "quote \" back\\slash\nnew\ttab\x01");
  std::string line(e.data(), e.size());
  ASSERT_EQ(line.back(), '\n');
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["src"], "shim");
  EXPECT_EQ(j["kind"], "inject");
  EXPECT_EQ(j["pid"], getpid());
  EXPECT_GT(j["t"].get<double>(), 1.7e9);
  EXPECT_EQ(j["fields"]["entry"], "cuMemAlloc_v2");
  EXPECT_EQ(j["fields"]["size"], uint64_t{1} << 40);
  EXPECT_EQ(j["fields"]["step"], -1);
  EXPECT_DOUBLE_EQ(j["fields"]["loss"].get<double>(), 0.25);
  EXPECT_TRUE(j["fields"]["nan"].is_null());
  EXPECT_EQ(j["fields"]["caught"], true);
  EXPECT_EQ(j["fields"]["msg"], "quote \" back\\slash\nnew\ttab\x01");
}

TEST(EventLine, TooLongStaysValidAndSaysTruncated) {
  oomh::events::EventLine e("probe", "oom");
  std::string big(900, 'x');
  for (int i = 0; i < 10; ++i) e.add(("k" + std::to_string(i)).c_str(), big.c_str());
  auto j = nlohmann::json::parse(std::string(e.data(), e.size()));
  EXPECT_EQ(j["fields"]["truncated"], true);
  EXPECT_LE(e.size(), oomh::events::EventLine::kCapacity);
}

TEST(EventLine, ConcurrentWritersNeverInterleave) {
  char path[] = "/tmp/oomh-events-XXXXXX";
  int tmp = mkstemp(path);
  ASSERT_GE(tmp, 0);
  close(tmp);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      int fd = oomh::events::open_event_log(path);
      std::string pad(200 + t * 50, 'a' + t);
      for (int i = 0; i < 500; ++i) {
        oomh::events::EventLine e("probe", "step");
        e.add("step", i).add("thread", t).add("pad", pad.c_str());
        EXPECT_TRUE(e.write_to(fd));
      }
      close(fd);
    });
  for (auto& th : threads) th.join();
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);  // throws (fails the test) on an interleaved line
    EXPECT_EQ(j["kind"], "step");
    ++lines;
  }
  EXPECT_EQ(lines, 8 * 500);
  unlink(path);
}

TEST(EventLog, OpenFailsCleanly) {
  EXPECT_EQ(oomh::events::open_event_log(nullptr), -1);
  EXPECT_EQ(oomh::events::open_event_log(""), -1);
  EXPECT_EQ(oomh::events::open_event_log("/nonexistent-dir/x.jsonl"), -1);
}

}  // namespace
