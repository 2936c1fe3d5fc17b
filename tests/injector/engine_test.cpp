// The engine without preloading: caps across two "processes" sharing one control block, cap schedules,
// memory-info capping, plan changes through the control block, events, and the inject rate limit.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace oomh::inject;
using oomh::ControlBlock;

namespace {

constexpr uint64_t MiB = 1ull << 20;

// A control block of its own, unlinked at the end of the test.
class Block {
 public:
  Block() {
    static int n = 0;
    name_ = "/oomh-engine-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    cb_ = oomh::control_block_create(name_.c_str());
  }
  ~Block() {
    oomh::control_block_close(cb_);
    shm_unlink(name_.c_str());
  }
  ControlBlock* get() const { return cb_; }

 private:
  std::string name_;
  ControlBlock* cb_;
};

class EventFile {
 public:
  EventFile() {
    char path[] = "/tmp/oomh-engine-events-XXXXXX";
    fd_ = mkstemp(path);
    path_ = path;
  }
  ~EventFile() {
    close(fd_);
    unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  std::vector<nlohmann::json> read(const std::string& kind = "") const {
    std::vector<nlohmann::json> out;
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (kind.empty() || j["kind"] == kind) out.push_back(j);
    }
    return out;
  }

 private:
  std::string path_;
  int fd_;
};

FaultPlan plan(const std::string& json) {
  auto r = parse_fault_plan(json);
  EXPECT_TRUE(r) << r.error();
  return r ? *r : FaultPlan{};
}

EngineSetup setup(ControlBlock* cb, int events_fd = -1) {
  EngineSetup s;
  s.block = cb;
  s.events_fd = events_fd;
  s.log = LogLevel::quiet;
  return s;
}

// One allocation of `size` bytes as the preload does it, with the driver succeeding. Returns false when the
// engine failed it.
bool allocate(Engine& e, uint64_t key, uint64_t size, int device = 0, Entry entry = Entry::mem_alloc) {
  AllocDecision d = e.begin_alloc(entry, "cuMemAlloc_v2", device, size);
  if (d.fail) return false;
  e.end_alloc(d, true, Space::device_pointer, key, size);
  return true;
}

void release(Engine& e, uint64_t key) {
  auto taken = e.begin_free(Space::device_pointer, key);
  e.end_free(Space::device_pointer, key, taken, true);
}

}  // namespace

TEST(CappedMemInfo, NeverAboveThePhysicalFigures) {
  EXPECT_EQ(capped_mem_info(70, 100, 0, 0).free, 70u);  // no cap
  MemInfo m = capped_mem_info(70, 100, 40, 10);
  EXPECT_EQ(m.total, 40u);
  EXPECT_EQ(m.free, 30u);  // cap - job held
  m = capped_mem_info(5, 100, 40, 10);
  EXPECT_EQ(m.free, 5u);  // the physical free is smaller
  m = capped_mem_info(70, 100, 400, 10);
  EXPECT_EQ(m.total, 100u);  // a cap above the device
  EXPECT_EQ(m.free, 70u);
  m = capped_mem_info(70, 100, 40, 55);
  EXPECT_EQ(m.free, 0u);  // over the cap (the cap came down after the allocations)
}

TEST(CapSchedule, LaterEntriesOverrideAndLatch) {
  CapSchedule s({CapEntry{-1, 8 * MiB, CapEntry::At::start, 0, 0}, CapEntry{-1, 6 * MiB, CapEntry::At::step, 8, 0},
                 CapEntry{1, 4 * MiB, CapEntry::At::after, 0, 60}});
  EXPECT_TRUE(s.changes());
  EXPECT_TRUE(s.covers(3));
  const char* why = nullptr;
  EXPECT_EQ(s.limit_for(0, 7, 0, &why), 8 * MiB);
  EXPECT_STREQ(why, "start");
  EXPECT_EQ(s.limit_for(0, 8, 0, &why), 6 * MiB);
  EXPECT_STREQ(why, "step");
  EXPECT_EQ(s.limit_for(0, 2, 0, &why), 6 * MiB);  // latched: a resume to an earlier step keeps the cap
  EXPECT_EQ(s.limit_for(1, 9, 59, &why), 6 * MiB);
  EXPECT_EQ(s.limit_for(1, 9, 60, &why), 4 * MiB);
  EXPECT_STREQ(why, "time");
  EXPECT_EQ(s.limit_for(0, 9, 61, &why), 6 * MiB);  // device 1's entry leaves device 0 alone
  CapSchedule only_one({CapEntry{2, MiB, CapEntry::At::start, 0, 0}});
  EXPECT_FALSE(only_one.covers(0));
  EXPECT_EQ(only_one.limit_for(0, 0, 0, nullptr), 0u);
}

TEST(Engine, CapCountsTheWholeJob) {
  Block block;
  EngineSetup a = setup(block.get());
  a.option_caps = parse_cap_option("10MiB").value();
  EngineSetup b = setup(block.get());
  b.option_caps = a.option_caps;
  Engine first(std::move(a)), second(std::move(b));
  EXPECT_EQ(block.get()->devices[0].cap.load(), 10 * MiB);
  EXPECT_TRUE(allocate(first, 0x1000, 6 * MiB));
  EXPECT_TRUE(allocate(second, 0x2000, 4 * MiB));   // exactly at the cap
  EXPECT_FALSE(allocate(second, 0x3000, 1));        // one byte over, whoever asks
  EXPECT_FALSE(allocate(first, 0x4000, 1));
  EXPECT_EQ(block.get()->devices[0].held.load(), 10 * MiB);
  EXPECT_EQ(block.get()->devices[0].cap_failures.load(), 2u);
  EXPECT_EQ(block.get()->devices[0].alloc_calls.load(), 4u);
  EXPECT_EQ(first.slot()->held[0].load(), 6 * MiB);
  EXPECT_EQ(second.slot()->held[0].load(), 4 * MiB);
  release(first, 0x1000);
  EXPECT_EQ(block.get()->devices[0].held.load(), 4 * MiB);
  EXPECT_EQ(block.get()->devices[0].free_calls.load(), 1u);
  EXPECT_TRUE(allocate(second, 0x3000, 6 * MiB));  // room again
  EXPECT_EQ(block.get()->devices[0].peak.load(), 10 * MiB);
  // The figures a memory query answers: total = cap, free = cap - job held, never above physical.
  MemInfo m = first.mem_info(0, 80 * MiB, 100 * MiB);
  EXPECT_EQ(m.total, 10 * MiB);
  EXPECT_EQ(m.free, 0u);
  release(second, 0x2000);
  m = first.mem_info(0, 80 * MiB, 100 * MiB);
  EXPECT_EQ(m.free, 4 * MiB);
  EXPECT_EQ(first.total_mem(0, 100 * MiB), 10 * MiB);
  EXPECT_EQ(block.get()->devices[0].physical_total.load(), 100 * MiB);
  EXPECT_EQ(block.get()->process_count.load(), 2u);
}

TEST(Engine, AFailedDriverCallGivesTheReservationBack) {
  Block block;
  EngineSetup s = setup(block.get());
  s.option_caps = parse_cap_option("0=10MiB").value();
  Engine e(std::move(s));
  AllocDecision d = e.begin_alloc(Entry::mem_alloc, "cuMemAlloc_v2", 0, 8 * MiB);
  ASSERT_FALSE(d.fail);
  EXPECT_EQ(block.get()->devices[0].held.load(), 8 * MiB);
  e.end_alloc(d, false, Space::device_pointer, 0, 0);
  EXPECT_EQ(block.get()->devices[0].held.load(), 0u);
  EXPECT_EQ(e.slot()->held[0].load(), 0u);
  // A free the driver refuses keeps the bytes on the books.
  ASSERT_TRUE(allocate(e, 0x10, 3 * MiB));
  auto taken = e.begin_free(Space::device_pointer, 0x10);
  e.end_free(Space::device_pointer, 0x10, taken, false);
  EXPECT_EQ(block.get()->devices[0].held.load(), 3 * MiB);
  release(e, 0x10);
  EXPECT_EQ(block.get()->devices[0].held.load(), 0u);
  // A pitch allocation books what the driver really gave.
  d = e.begin_alloc(Entry::mem_alloc_pitch, "cuMemAllocPitch_v2", 0, 1000);
  e.end_alloc(d, true, Space::device_pointer, 0x20, 1024);
  EXPECT_EQ(block.get()->devices[0].held.load(), 1024u);
  EXPECT_EQ(e.held(0), 1024u);
  EXPECT_EQ(e.slot()->held[0].load(), 1024u);
}

TEST(Engine, CapScheduleChangesAtAStep) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"caps":[{"limit":"8MiB","device":0},{"limit":"4MiB","device":0,"at":{"step":3}}]})");
  Engine e(std::move(s));
  EXPECT_EQ(block.get()->devices[0].cap.load(), 8 * MiB);
  EXPECT_EQ(block.get()->devices[1].cap.load(), 0u);  // not named: left alone
  EXPECT_TRUE(allocate(e, 0x1, 5 * MiB));
  block.get()->step.store(3);
  EXPECT_FALSE(allocate(e, 0x2, 1));  // a neighbour took 4 MiB: we now hold more than the cap
  EXPECT_EQ(block.get()->devices[0].cap.load(), 4 * MiB);
  auto changes = events.read("cap_change");
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0]["fields"]["reason"], "start");
  EXPECT_EQ(changes[1]["fields"]["from"], 8 * MiB);
  EXPECT_EQ(changes[1]["fields"]["to"], 4 * MiB);
  EXPECT_EQ(changes[1]["fields"]["reason"], "step");
  auto inject = events.read("inject");
  ASSERT_EQ(inject.size(), 1u);
  EXPECT_EQ(inject[0]["fields"]["reason"], "cap");
  EXPECT_EQ(inject[0]["fields"]["rule"], "cap");
  EXPECT_EQ(inject[0]["fields"]["step"], 3);
  EXPECT_EQ(inject[0]["fields"]["call"], 2);
}

TEST(Engine, RuleFailureWritesAnInjectEvent) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"rules":[{"name":"second","when":{"nth":2,"phase":"forward"},"fail":{"times":2}}]})");
  Engine e(std::move(s));
  block.get()->phase.store(static_cast<uint32_t>(oomh::Phase::forward));
  block.get()->step.store(7);
  EXPECT_TRUE(allocate(e, 0x1, MiB));
  EXPECT_FALSE(allocate(e, 0x2, 2 * MiB, 0, Entry::mem_create));
  EXPECT_FALSE(allocate(e, 0x3, 3 * MiB));
  EXPECT_TRUE(allocate(e, 0x4, MiB));
  EXPECT_EQ(block.get()->devices[0].failures_injected.load(), 2u);
  EXPECT_EQ(block.get()->devices[0].held.load(), 2 * MiB);
  auto inject = events.read("inject");
  ASSERT_EQ(inject.size(), 2u);
  const auto& f = inject[0]["fields"];
  EXPECT_EQ(f["rule"], "second");
  EXPECT_EQ(f["reason"], "rule");
  EXPECT_EQ(f["size"], 2 * MiB);
  EXPECT_EQ(f["device"], 0);
  EXPECT_EQ(f["step"], 7);
  EXPECT_EQ(f["phase"], "forward");
  EXPECT_EQ(f["call"], 2);
  EXPECT_EQ(f["tid"], static_cast<int64_t>(gettid()));
  EXPECT_EQ(inject[1]["fields"]["call"], 3);
  EXPECT_EQ(events.read("shim_start").size(), 1u);
  EXPECT_EQ(events.read("driver_call").size(), 1u);  // the process's first driver call (Note [Armed record])
  EXPECT_EQ(block.get()->events_written.load(), 4u);
}

// Note [Where a step fault fires] in injector/engine/fault_plan.h: once a request layer is registered, a step
// rule fails requests there (an inject event with its layer) and no longer driver calls; at exit, what each
// step rule met is written (rule_seen).
TEST(Engine, AStepRuleFailsRequestsAtTheRegisteredLayer) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"rules":[{"name":"at-3","when":{"step":3},"fail":{"times":2}},{"name":"nth","when":{"nth":2}}]})");
  Engine e(std::move(s));
  block.get()->step.store(3);
  const auto fwd = oomh::Phase::forward;
  EXPECT_FALSE(e.request(Layer::allocator, MiB, 0, 3, fwd)) << "no layer registered: requests are not asked";
  e.register_requests(Layer::allocator);
  EXPECT_FALSE(e.request(Layer::probe, MiB, 0, 3, fwd)) << "another layer than the registered one is not asked";
  EXPECT_TRUE(allocate(e, 0x1, MiB)) << "the step rule is the allocator's now";
  EXPECT_FALSE(e.request(Layer::allocator, 4 * MiB, 0, 3, oomh::Phase::data)) << "the batch's copy is not the step's work";
  EXPECT_FALSE(e.request(Layer::allocator, 4 * MiB, 0, 2, fwd)) << "the request's own step, not the block's";
  EXPECT_TRUE(e.request(Layer::allocator, 4 * MiB, 0, 3, fwd));
  EXPECT_TRUE(e.request(Layer::allocator, 4 * MiB, 0, 3, fwd));
  EXPECT_FALSE(e.request(Layer::allocator, 4 * MiB, 0, 3, fwd));
  EXPECT_FALSE(allocate(e, 0x2, MiB)) << "a driver rule still counts driver calls";
  EXPECT_EQ(block.get()->devices[0].failures_injected.load(), 3u);
  auto inject = events.read("inject");
  ASSERT_EQ(inject.size(), 3u);
  EXPECT_EQ(inject[0]["fields"]["rule"], "at-3");
  EXPECT_EQ(inject[0]["fields"]["layer"], "allocator");
  EXPECT_EQ(inject[0]["fields"]["entry"], "allocator");
  EXPECT_EQ(inject[0]["fields"]["size"], 4 * MiB);
  EXPECT_EQ(inject[0]["fields"]["step"], 3);
  EXPECT_EQ(inject[2]["fields"]["rule"], "nth");
  EXPECT_EQ(inject[2]["fields"]["layer"], "driver");
  e.finish();
  auto seen = events.read("rule_seen");
  ASSERT_EQ(seen.size(), 1u) << "one step rule";
  EXPECT_EQ(seen[0]["fields"]["rule"], "at-3");
  EXPECT_EQ(seen[0]["fields"]["layer"], "allocator");
  EXPECT_EQ(seen[0]["fields"]["triggers"], 1);
  EXPECT_EQ(seen[0]["fields"]["requests"], 2);
  EXPECT_EQ(seen[0]["fields"]["driver_calls"], 0);
}

// Note [Recording a step's allocations]: the calls of the recorded step, numbered as a rule
// `step=N,nth=K` counts them, and no other step's.
TEST(Engine, RecordStepWritesOneAllocEventPerCallOfThatStepNumberedAsNth) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.record_from = s.record_to = 2;
  Engine e(std::move(s));
  block.get()->step.store(1);
  EXPECT_TRUE(allocate(e, 0x1, MiB));
  block.get()->step.store(2);
  block.get()->phase.store(static_cast<uint32_t>(oomh::Phase::backward));
  EXPECT_TRUE(allocate(e, 0x2, 2 * MiB));
  EXPECT_TRUE(allocate(e, 0x3, 3 * MiB, 0, Entry::mem_create));
  block.get()->step.store(3);
  EXPECT_TRUE(allocate(e, 0x4, MiB));
  auto recorded = events.read("alloc");
  ASSERT_EQ(recorded.size(), 2u);
  EXPECT_EQ(recorded[0]["fields"]["nth"], 1);
  EXPECT_EQ(recorded[0]["fields"]["size"], 2 * MiB);
  EXPECT_EQ(recorded[0]["fields"]["step"], 2);
  EXPECT_EQ(recorded[0]["fields"]["phase"], "backward");
  EXPECT_EQ(recorded[0]["fields"]["call"], 2);
  EXPECT_EQ(recorded[1]["fields"]["nth"], 2);
  EXPECT_EQ(recorded[1]["fields"]["size"], 3 * MiB);

  // A range: each step's calls numbered from 1.
  Block ranged;
  EventFile both;
  EngineSetup r = setup(ranged.get(), both.fd());
  r.record_from = 2;
  r.record_to = 3;
  Engine two(std::move(r));
  for (int64_t step : {2, 2, 3, 3, 3, 4}) {
    ranged.get()->step.store(step);
    EXPECT_TRUE(allocate(two, static_cast<uint64_t>(0x100 + step * 10 + both.read("alloc").size()), MiB));
  }
  auto per_step = both.read("alloc");
  ASSERT_EQ(per_step.size(), 5u);
  std::vector<std::pair<int64_t, int64_t>> seen;
  for (const auto& a : per_step) seen.emplace_back(a["fields"]["step"], a["fields"]["nth"]);
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{{2, 1}, {2, 2}, {3, 1}, {3, 2}, {3, 3}}));

  // Without OOMH_RECORD_STEP nothing is recorded.
  Block other;
  EventFile quiet;
  Engine off(setup(other.get(), quiet.fd()));
  other.get()->step.store(2);
  EXPECT_TRUE(allocate(off, 0x1, MiB));
  EXPECT_TRUE(quiet.read("alloc").empty());
}

// Note [The site of a recorded call]: a noted site rides on the recorded calls of its thread until it is
// cleared; another thread's calls do not carry it; a site longer than the buffer is cut, not overrun.
TEST(Engine, RecordedCallsCarryTheSiteTheirThreadNoted) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.record_from = s.record_to = 1;
  Engine e(std::move(s));
  block.get()->step.store(1);
  EXPECT_TRUE(allocate(e, 0x1, MiB));
  Engine::note_site("train.py:77");
  EXPECT_TRUE(allocate(e, 0x2, MiB));
  std::thread other([&] { EXPECT_TRUE(allocate(e, 0x3, MiB)); });
  other.join();
  Engine::note_site(nullptr);
  EXPECT_TRUE(allocate(e, 0x4, MiB));
  Engine::note_site(std::string(400, 'x').c_str());
  EXPECT_TRUE(allocate(e, 0x5, MiB));
  Engine::note_site(nullptr);
  auto recorded = events.read("alloc");
  ASSERT_EQ(recorded.size(), 5u);
  EXPECT_FALSE(recorded[0]["fields"].contains("where"));
  EXPECT_EQ(recorded[1]["fields"]["where"], "train.py:77");
  EXPECT_FALSE(recorded[2]["fields"].contains("where"));  // the other thread noted nothing
  EXPECT_FALSE(recorded[3]["fields"].contains("where"));
  EXPECT_EQ(recorded[4]["fields"]["where"], std::string(159, 'x'));
}

TEST(Engine, PlanChangesThroughTheControlBlock) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"rules":[{"when":{"nth":100}}]})");
  Engine e(std::move(s));
  EXPECT_TRUE(allocate(e, 0x1, MiB));
  std::string next = R"({"rules":[{"name":"now","when":{"every":1}}],"caps":[{"device":2,"limit":"1MiB"}]})";
  ASSERT_TRUE(oomh::control_block_publish_plan(block.get(), next.data(), static_cast<uint32_t>(next.size())));
  EXPECT_FALSE(allocate(e, 0x2, MiB));
  EXPECT_EQ(e.rule_count(), 1u);
  EXPECT_EQ(block.get()->devices[2].cap.load(), MiB);
  auto changes = events.read("plan_change");
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0]["fields"]["generation"], 2);
  EXPECT_EQ(events.read("cap_change").back()["fields"]["reason"], "plan");
  // A bad plan is reported and the current one stays.
  std::string bad = R"({"rules":[{"when":{"stpe":1}}]})";
  ASSERT_TRUE(oomh::control_block_publish_plan(block.get(), bad.data(), static_cast<uint32_t>(bad.size())));
  EXPECT_FALSE(allocate(e, 0x3, MiB));
  auto warnings = events.read("warning");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0]["fields"]["message"].get<std::string>().find("rules[0].when: unknown key 'stpe'"), std::string::npos);
  // An empty plan lifts the cap the previous plan set.
  std::string none = "{}";
  ASSERT_TRUE(oomh::control_block_publish_plan(block.get(), none.data(), static_cast<uint32_t>(none.size())));
  EXPECT_TRUE(allocate(e, 0x4, MiB));
  EXPECT_EQ(block.get()->devices[2].cap.load(), 0u);
}

// Issue 44 (2): a job wrote a plan with no caps into its control block and bumped the generation, and the
// shim installed it. In a runner's block the shim refuses it (Note [A plan only the runner writes]).
TEST(Engine, ARunnersBlockTakesNoPlanFromTheJob) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"caps":[{"limit":"2MiB"}]})");
  s.plan_updates = false;  // a runner's block
  Engine e(std::move(s));
  EXPECT_TRUE(allocate(e, 0x1, MiB));
  std::string none = "{}";
  ASSERT_TRUE(oomh::control_block_publish_plan(block.get(), none.data(), static_cast<uint32_t>(none.size())));
  EXPECT_TRUE(allocate(e, 0x2, MiB));
  EXPECT_FALSE(allocate(e, 0x3, MiB)) << "the job's plan (no caps) was installed";
  EXPECT_EQ(block.get()->devices[0].cap.load(), 2 * MiB);
  EXPECT_EQ(block.get()->tampered.load(), 1u);
  EXPECT_TRUE(events.read("plan_change").empty());
  auto tamper = events.read("tamper");
  ASSERT_EQ(tamper.size(), 1u);
  EXPECT_EQ(tamper[0]["fields"]["what"], "plan");
  EXPECT_EQ(tamper[0]["fields"]["generation"], 2);
  EXPECT_NE(tamper[0]["fields"]["message"].get<std::string>().find("only the runner may change a running job's plan"),
            std::string::npos);
  // A generation left odd (a writer "mid-way" for ever) is refused as well, and reported once per change.
  block.get()->plan_generation.store(7);
  EXPECT_FALSE(allocate(e, 0x4, MiB));
  EXPECT_FALSE(allocate(e, 0x5, MiB));
  EXPECT_EQ(block.get()->tampered.load(), 2u);
  EXPECT_EQ(events.read("tamper").size(), 2u);
}

// ... and a cap written into the block changes nothing: each process enforces its own, and puts it back.
TEST(Engine, ACapWrittenIntoTheBlockIsNotTheCap) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"caps":[{"limit":"2MiB"}]})");
  s.plan_updates = false;
  Engine e(std::move(s));
  block.get()->devices[0].cap.store(0);  // the job lifts the cap
  EXPECT_TRUE(allocate(e, 0x1, MiB));
  EXPECT_TRUE(allocate(e, 0x2, MiB));
  EXPECT_FALSE(allocate(e, 0x3, MiB));
  EXPECT_EQ(block.get()->devices[0].cap.load(), 2 * MiB);
  EXPECT_EQ(e.mem_info(0, 100 * MiB, 100 * MiB).total, 2 * MiB);
  EXPECT_EQ(block.get()->tampered.load(), 1u);
  auto tamper = events.read("tamper");
  ASSERT_EQ(tamper.size(), 1u);
  EXPECT_EQ(tamper[0]["fields"]["what"], "cap");
  EXPECT_EQ(tamper[0]["fields"]["found"], 0);
  EXPECT_NE(tamper[0]["fields"]["message"].get<std::string>().find("the control block's cap for device 0 was 0 bytes"),
            std::string::npos);
  block.get()->devices[0].cap.store(64 * MiB);  // or raises it: the memory queries keep the real one
  EXPECT_EQ(e.mem_info(0, 100 * MiB, 100 * MiB).total, 2 * MiB);
}

TEST(Engine, InjectEventsAreRateLimited) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"rules":[{"fail":{"forever":true}}]})");
  Engine e(std::move(s));
  const uint64_t calls = Engine::kInjectEventLimit + 250;
  for (uint64_t i = 0; i < calls; ++i) ASSERT_FALSE(allocate(e, i + 1, 1));
  EXPECT_EQ(events.read("inject").size(), Engine::kInjectEventLimit);
  EXPECT_EQ(e.events_dropped(), 250u);
  EXPECT_EQ(block.get()->devices[0].failures_injected.load(), calls);
  e.finish();
  auto exits = events.read("shim_exit");
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0]["fields"]["failures"], calls);
  EXPECT_EQ(exits[0]["fields"]["events_dropped"], 250);
}

TEST(Engine, FinishGivesTheProcessBytesBackToTheJob) {
  Block block;
  EventFile events;
  Engine a(setup(block.get(), events.fd())), b(setup(block.get()));
  ASSERT_TRUE(allocate(a, 0x1, 3 * MiB, 1));
  ASSERT_TRUE(allocate(b, 0x2, 2 * MiB, 1));
  a.finish();
  EXPECT_EQ(block.get()->devices[1].held.load(), 2 * MiB);
  EXPECT_EQ(block.get()->devices[1].peak.load(), 5 * MiB);
  auto exits = events.read("shim_exit");
  ASSERT_EQ(exits.size(), 1u);  // device 1 only: the one it used
  EXPECT_EQ(exits[0]["fields"]["device"], 1);
  EXPECT_EQ(exits[0]["fields"]["held"], 3 * MiB);
  EXPECT_EQ(exits[0]["fields"]["alloc_calls"], 1);
  EXPECT_EQ(block.get()->device_count.load(), 2u);
  // After finish the engine takes no part (other libraries' destructors still free memory).
  EXPECT_FALSE(a.begin_alloc(Entry::mem_alloc, "cuMemAlloc_v2", 1, 1).tracked);
  release(a, 0x1);
  EXPECT_EQ(block.get()->devices[1].held.load(), 2 * MiB);
}

TEST(Engine, ProcessAndJobHeldAndPeakAreWhatTheDriverGave) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.option_caps = parse_cap_option("0=100MiB").value();
  Engine e(std::move(s));
  ASSERT_TRUE(allocate(e, 0x1, 3 * MiB));
  ASSERT_TRUE(allocate(e, 0x2, 2 * MiB));
  EXPECT_EQ(e.held(0), 5 * MiB);
  EXPECT_EQ(e.peak(0), 5 * MiB);
  release(e, 0x1);
  EXPECT_EQ(e.held(0), 2 * MiB);
  EXPECT_EQ(e.slot()->held[0].load(), 2 * MiB);  // the process's held is its slot's share, nothing else
  // A reservation that the driver then refuses never was memory the process held: not a peak.
  AllocDecision d = e.begin_alloc(Entry::mem_alloc, "cuMemAlloc_v2", 0, 90 * MiB);
  ASSERT_FALSE(d.fail);
  EXPECT_EQ(e.held(0), 92 * MiB);  // reserved while the driver works on it
  EXPECT_EQ(block.get()->devices[0].held.load(), 92 * MiB);
  e.end_alloc(d, false, Space::device_pointer, 0, 0);
  EXPECT_EQ(e.held(0), 2 * MiB);
  EXPECT_EQ(e.peak(0), 5 * MiB);
  EXPECT_EQ(block.get()->devices[0].peak.load(), 5 * MiB);  // the job's peak neither
  // A pointer the driver hands out again (freed behind the shim's back) replaces its old record.
  ASSERT_TRUE(allocate(e, 0x2, 4 * MiB));
  EXPECT_EQ(e.held(0), 4 * MiB);
  EXPECT_EQ(e.peak(0), 5 * MiB);
  ASSERT_TRUE(allocate(e, 0x3, 3 * MiB));
  EXPECT_EQ(e.peak(0), 7 * MiB);
  // A free the driver refuses is still a free call.
  auto taken = e.begin_free(Space::device_pointer, 0x3);
  e.end_free(Space::device_pointer, 0x3, taken, false);
  release(e, 0x3);
  e.begin_free(Space::device_pointer, 0x999);  // unknown to the shim: not counted
  e.finish();
  auto exits = events.read("shim_exit");
  ASSERT_EQ(exits.size(), 1u);
  const auto& f = exits[0]["fields"];
  EXPECT_EQ(f["alloc_calls"], 5);
  EXPECT_EQ(f["free_calls"], 3);
  EXPECT_EQ(f["held"], 4 * MiB);
  EXPECT_EQ(f["peak"], 7 * MiB);
  EXPECT_EQ(f["job_peak"], 7 * MiB);
  EXPECT_EQ(block.get()->devices[0].free_calls.load(), 3u);
}

TEST(Engine, UntilFreedCountsTheProcessFrees) {
  Block block;
  EngineSetup s = setup(block.get());
  // Fails device 0's second call, then every device 0 call until the process freed 4 MiB + 512 bytes.
  s.plan = plan(R"({"rules":[{"when":{"nth":2,"device":0},"fail":{"until_freed":4194816}}]})");
  Engine e(std::move(s));
  ASSERT_TRUE(allocate(e, 0x1, 2 * MiB));
  ASSERT_TRUE(allocate(e, 0x2, 2 * MiB, 1));
  ASSERT_TRUE(allocate(e, 0x3, 512, 1));
  release(e, 0x1);                  // freed before the trigger: does not count towards it
  ASSERT_TRUE(allocate(e, 0x1, 2 * MiB, 1));
  EXPECT_FALSE(allocate(e, 0x4, 1));  // the trigger
  release(e, 0x1);
  EXPECT_FALSE(allocate(e, 0x4, 1));  // 2 MiB freed
  auto taken = e.begin_free(Space::device_pointer, 0x2);
  e.end_free(Space::device_pointer, 0x2, taken, false);
  EXPECT_FALSE(allocate(e, 0x4, 1));  // a free the driver refused frees nothing
  release(e, 0x2);
  EXPECT_FALSE(allocate(e, 0x4, 1));  // 4 MiB freed: 512 bytes short
  ASSERT_TRUE(allocate(e, 0x3, 1000, 1));  // the driver handed 0x3 out again: its old 512 bytes were freed
  EXPECT_TRUE(allocate(e, 0x4, 1));
}

TEST(Engine, ManyThreadsKeepExactTotals) {
  Block block;
  EngineSetup s = setup(block.get());
  s.plan = plan(R"({"rules":[{"when":{"min_size":"1GiB"}},{"when":{"device":3}},{"when":{"step":1000}}]})");
  Engine e(std::move(s));
  constexpr int threads = 8, per_thread = 20000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&e, t] {
      for (int i = 0; i < per_thread; ++i) {
        uint64_t key = (static_cast<uint64_t>(t + 1) << 40) | static_cast<uint64_t>(i + 1);
        allocate(e, key, 512);
        if (i % 4 != 0) release(e, key);
      }
    });
  }
  for (auto& th : pool) th.join();
  const auto& d = block.get()->devices[0];
  EXPECT_EQ(d.alloc_calls.load(), static_cast<uint64_t>(threads) * per_thread);
  EXPECT_EQ(d.free_calls.load(), static_cast<uint64_t>(threads) * per_thread * 3 / 4);
  EXPECT_EQ(d.held.load(), static_cast<uint64_t>(threads) * per_thread / 4 * 512);
  EXPECT_EQ(e.slot()->held[0].load(), d.held.load());
  EXPECT_EQ(d.failures_injected.load(), 0u);
}

TEST(Engine, RankComesFromTheSetup) {
  Block block;
  EngineSetup s = setup(block.get());
  s.rank = 1;
  s.plan = plan(R"({"rules":[{"when":{"rank":1}}]})");
  Engine one(std::move(s));
  EngineSetup z = setup(block.get());
  z.plan = plan(R"({"rules":[{"when":{"rank":1}}]})");
  Engine zero(std::move(z));
  EXPECT_FALSE(allocate(one, 1, 1));
  EXPECT_TRUE(allocate(zero, 2, 1));
}

// ---- Note [Counting the footprint] -------------------------------------------------------------------------
namespace {

// A fake footprint probe: what "the driver" says this process holds on device 0 (a context plus what the
// test has allocated), and how often it was asked.
struct FakeDevice {
  uint64_t context = 0;
  uint64_t allocated = 0;
  bool measurable = true;
  int probes = 0;
};
FakeDevice g_fake;

bool fake_probe(int device, uint64_t* bytes) noexcept {
  ++g_fake.probes;
  if (!g_fake.measurable || device != 0) return false;
  *bytes = g_fake.context + g_fake.allocated;
  return true;
}

EngineSetup footprint_setup(ControlBlock* cb, const char* cap, int events_fd = -1) {
  g_fake = FakeDevice{};
  EngineSetup s = setup(cb, events_fd);
  s.option_caps = parse_cap_option(cap).value();
  s.cap_counts = CapCounting::footprint;
  s.footprint_probe = &fake_probe;
  return s;
}

// An allocation the fake driver then holds.
bool allocate_real(Engine& e, uint64_t key, uint64_t size) {
  if (!allocate(e, key, size)) return false;
  g_fake.allocated += size;
  return true;
}

}  // namespace

TEST(Footprint, TheContextCountsAgainstTheCapAndInTheMemoryFigures) {
  Block block;
  EventFile events;
  Engine e(footprint_setup(block.get(), "1024MiB", events.fd()));
  g_fake.context = 600 * MiB;
  EXPECT_EQ(e.cap_counting(), CapCounting::footprint);
  EXPECT_TRUE(allocate_real(e, 0x1, 300 * MiB));
  EXPECT_EQ(e.footprint_overhead(0), 600 * MiB);
  EXPECT_EQ(block.get()->devices[0].held.load(), 900 * MiB);
  EXPECT_EQ(e.slot()->held[0].load(), 900 * MiB);
  EXPECT_FALSE(allocate_real(e, 0x2, 200 * MiB));  // 600 + 300 + 200 > 1024
  EXPECT_TRUE(allocate_real(e, 0x3, 124 * MiB));   // exactly at the cap
  MemInfo m = e.mem_info(0, 70000 * MiB, 80000 * MiB);
  EXPECT_EQ(m.total, 1024 * MiB);
  EXPECT_EQ(m.free, 0u);
  release(e, 0x3);
  g_fake.allocated -= 124 * MiB;
  EXPECT_EQ(e.mem_info(0, 70000 * MiB, 80000 * MiB).free, 124 * MiB);
  auto first = events.read("footprint");
  ASSERT_EQ(first.size(), 1u);  // the first measurement of the device only
  EXPECT_EQ(first[0]["fields"]["footprint"], 600 * MiB);
  EXPECT_EQ(first[0]["fields"]["overhead"], 600 * MiB);
  e.finish();
  EXPECT_EQ(events.read("shim_exit").at(0)["fields"]["overhead"], 600 * MiB);
  EXPECT_EQ(block.get()->devices[0].held.load(), 0u);  // the overhead leaves with the process

  // The same calls when the cap counts allocations: the context is the driver's business.
  Block other;
  EngineSetup s = footprint_setup(other.get(), "1024MiB");
  s.cap_counts = CapCounting::allocations;
  Engine plain(std::move(s));
  g_fake.context = 600 * MiB;
  EXPECT_TRUE(allocate_real(plain, 0x1, 300 * MiB));
  EXPECT_TRUE(allocate_real(plain, 0x2, 200 * MiB));
  EXPECT_EQ(plain.footprint_overhead(0), 0u);
  EXPECT_EQ(g_fake.probes, 0);
}

TEST(Footprint, MeasuredAtMostEveryMaxAgeButAfreshBeforeARefusal) {
  Block block;
  Engine e(footprint_setup(block.get(), "1024MiB"));
  g_fake.context = 600 * MiB;
  for (uint64_t i = 1; i <= 20; ++i) ASSERT_TRUE(allocate_real(e, i, MiB));
  EXPECT_EQ(g_fake.probes, 1);  // 20 allocations well within kFootprintMaxAge
  // The driver gave memory back (a smaller context): the booked figure is stale and too high. An
  // allocation that fits the fresh figure is not refused on the stale one.
  g_fake.context = 100 * MiB;
  EXPECT_TRUE(allocate_real(e, 0x100, 500 * MiB));  // stale: 600 + 20 + 500 > 1024; fresh: 100 + 20 + 500
  EXPECT_EQ(g_fake.probes, 2);
  EXPECT_EQ(e.footprint_overhead(0), 100 * MiB);
  EXPECT_EQ(block.get()->devices[0].held.load(), 620 * MiB);
  // Growth after a measurement is counted once kFootprintMaxAge has passed.
  g_fake.context = 400 * MiB;
  std::this_thread::sleep_for(std::chrono::nanoseconds(Engine::kFootprintMaxAge + 10'000'000));
  EXPECT_TRUE(allocate_real(e, 0x101, MiB));
  EXPECT_EQ(e.footprint_overhead(0), 400 * MiB);
  EXPECT_EQ(block.get()->devices[0].held.load(), 921 * MiB);
  EXPECT_EQ(block.get()->devices[0].peak.load(), 921 * MiB);
}

TEST(Footprint, WithoutAMeasurementCapsCountAllocationsAndSaySoOnce) {
  Block block;
  EventFile events;
  Engine e(footprint_setup(block.get(), "1024MiB", events.fd()));
  g_fake.context = 600 * MiB;
  g_fake.measurable = false;  // NVML does not list the pid (a container's own pid namespace)
  EXPECT_TRUE(allocate_real(e, 0x1, 600 * MiB));
  EXPECT_TRUE(allocate_real(e, 0x2, 424 * MiB));
  EXPECT_FALSE(allocate_real(e, 0x3, 1));  // the refusal asked once more, and still could not measure
  EXPECT_EQ(e.footprint_overhead(0), 0u);
  auto warnings = events.read("warning");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0]["fields"]["message"].get<std::string>().find("caps count allocations only"), std::string::npos);
}

TEST(Footprint, APlanDecidesWhatTheCapCountsAndTurningItOffGivesTheOverheadBack) {
  Block block;
  EngineSetup s = footprint_setup(block.get(), "1024MiB");
  s.cap_counts = CapCounting::allocations;  // OOMH_CAP_COUNTS unset; the plan says footprint
  s.plan = plan(R"({"cap_counts":"footprint"})");
  Engine e(std::move(s));
  g_fake.context = 600 * MiB;
  EXPECT_EQ(e.cap_counting(), CapCounting::footprint);
  EXPECT_TRUE(allocate_real(e, 0x1, 100 * MiB));
  EXPECT_EQ(block.get()->devices[0].held.load(), 700 * MiB);
  std::string next = R"({"caps":[{"limit":"1024MiB"}],"cap_counts":"allocations"})";
  ASSERT_TRUE(oomh::control_block_publish_plan(block.get(), next.data(), static_cast<uint32_t>(next.size())));
  EXPECT_TRUE(allocate_real(e, 0x2, 900 * MiB));  // the new plan is read here; 100 + 900 fit
  EXPECT_EQ(e.cap_counting(), CapCounting::allocations);
  EXPECT_EQ(e.footprint_overhead(0), 0u);
  EXPECT_EQ(block.get()->devices[0].held.load(), 1000 * MiB);
  EXPECT_EQ(e.slot()->held[0].load(), 1000 * MiB);
}

TEST(Footprint, NoProbeMeansAllocationsAndAWarning) {
  Block block;
  EventFile events;
  EngineSetup s = footprint_setup(block.get(), "1GiB", events.fd());
  s.footprint_probe = nullptr;
  Engine e(std::move(s));
  EXPECT_EQ(e.cap_counting(), CapCounting::allocations);
  EXPECT_EQ(events.read("warning").size(), 1u);
}

namespace {
bool pin(Engine& e, uint64_t key, uint64_t size, Entry entry = Entry::mem_host_alloc) {
  AllocDecision d = e.begin_host_alloc(entry, "cuMemHostAlloc", size);
  if (d.fail) return false;
  e.end_host_alloc(d, true, entry == Entry::mem_create ? Space::vmm_handle : Space::host_pointer, key, size);
  return true;
}
void unpin(Engine& e, uint64_t key) {
  auto taken = e.begin_free(Space::host_pointer, key);
  e.end_free(Space::host_pointer, key, taken, true);
}
}  // namespace

// Note [Host memory]: a host rule fails pins and never a device allocation; a device rule (the default)
// never fails a pin; each refused pin is an inject event with memory "host" and device -1.
TEST(Engine, HostRulesTargetPinnedMemoryOnly) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"rules":[{"name":"pin-fault","when":{"memory":"host","nth":2},"fail":{"times":2}},
                             {"name":"device-fault","when":{"min_size":"1MiB"},"fail":{"forever":true}}]})");
  Engine e(std::move(s));
  EXPECT_TRUE(pin(e, 0x1000, 4 * MiB));   // 1st pin: the host rule waits for its 2nd; the device rule ignores it
  EXPECT_FALSE(pin(e, 0x2000, 4 * MiB));  // 2nd: triggered
  EXPECT_FALSE(pin(e, 0x3000, 64, Entry::mem_alloc_host));  // times: 2
  EXPECT_TRUE(pin(e, 0x4000, 64, Entry::mem_host_register));
  EXPECT_TRUE(allocate(e, 0x10, 1024));       // the host rule never fails a device allocation
  EXPECT_FALSE(allocate(e, 0x20, 2 * MiB));   // the device rule does
  EXPECT_EQ(e.host_held(), 4 * MiB + 64);
  EXPECT_EQ(e.held(0), 1024u);                // pinned bytes are no device's
  auto injects = events.read("inject");
  ASSERT_EQ(injects.size(), 3u);
  EXPECT_EQ(injects[0]["fields"]["rule"], "pin-fault");
  EXPECT_EQ(injects[0]["fields"]["memory"], "host");
  EXPECT_EQ(injects[0]["fields"]["device"], -1);
  EXPECT_EQ(injects[0]["fields"]["entry"], "cuMemHostAlloc");
  EXPECT_EQ(injects[0]["fields"]["size"], 4 * MiB);
  EXPECT_EQ(injects[1]["fields"]["memory"], "host");
  EXPECT_EQ(injects[2]["fields"]["rule"], "device-fault");
  EXPECT_EQ(injects[2]["fields"]["memory"], "device");
  EXPECT_EQ(injects[2]["fields"]["device"], 0);
}

// A host cap limits the bytes this process has pinned; unpinning gives them back; device caps and host
// caps do not see each other's bytes.
TEST(Engine, HostCapLimitsPinnedBytes) {
  Block block;
  EventFile events;
  EngineSetup s = setup(block.get(), events.fd());
  s.plan = plan(R"({"caps":[{"memory":"host","limit":"8MiB"},{"limit":"4MiB"}]})");
  Engine e(std::move(s));
  EXPECT_TRUE(pin(e, 0x1000, 6 * MiB));
  EXPECT_FALSE(pin(e, 0x2000, 4 * MiB));      // 10 MiB > 8 MiB
  EXPECT_TRUE(allocate(e, 0x10, 3 * MiB));    // the device cap counts device bytes only
  EXPECT_FALSE(allocate(e, 0x20, 2 * MiB));
  EXPECT_TRUE(pin(e, 0x3000, 2 * MiB));       // exactly 8 MiB
  EXPECT_EQ(e.host_peak(), 8 * MiB);
  unpin(e, 0x1000);
  EXPECT_EQ(e.host_held(), 2 * MiB);
  EXPECT_TRUE(pin(e, 0x2000, 4 * MiB));
  EXPECT_TRUE(pin(e, 0x5000, 2 * MiB, Entry::mem_create));  // a host cuMemCreate counts too
  EXPECT_FALSE(pin(e, 0x6000, 1, Entry::mem_create));
  auto release_handle = [&](uint64_t key) {
    auto taken = e.begin_free(Space::vmm_handle, key);
    ASSERT_TRUE(taken.has_value());
    EXPECT_EQ(taken->device, kHostDevice);
    e.end_free(Space::vmm_handle, key, taken, true);
  };
  release_handle(0x5000);
  EXPECT_EQ(e.host_held(), 6 * MiB);
  auto injects = events.read("inject");
  ASSERT_EQ(injects.size(), 3u);
  EXPECT_EQ(injects[0]["fields"]["reason"], "cap");
  EXPECT_EQ(injects[0]["fields"]["memory"], "host");
  EXPECT_EQ(injects[1]["fields"]["memory"], "device");
  EXPECT_EQ(injects[2]["fields"]["entry"], "cuMemHostAlloc");
}
