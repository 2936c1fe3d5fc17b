// A round trip per boundary type (Note [One codec per boundary type] in oomharness/runner/model.h). For
// each type, `filled<T>()` sets every field to a value that is not its default, and the test checks that
//  - the JSON has one member per field of the struct (field_count), so the codec writes every field;
//  - every member differs from the default value's, so the filler really sets every field (a field added
//    to the struct and to the codec but not here fails this);
//  - reading it back and writing it again gives the same JSON, through a text dump and parse.
// Adding a field to a struct without carrying it fails to compile (the codec's static_assert).

#include <gtest/gtest.h>

#include "oomharness/runner/model.h"

namespace oomh {
namespace {

using nlohmann::json;

template <class T>
T filled();

template <>
SourceLocation filled() { return {"/suites/s.yaml", 12, 7}; }
template <>
ObserveSpec filled() { return {"loss", "loss=([0-9.]+)", filled<SourceLocation>()}; }
template <>
CapChange filled() { return {4, 2.5, 512u << 20}; }
template <>
MemorySpec filled() { return {1ull << 30, true, {filled<CapChange>()}, 64u << 20, 1u << 20, 8u << 20, true}; }
template <>
FaultSpec filled() { return {"f1", json{{"step", 5}, {"times", 2}}, filled<SourceLocation>()}; }
template <>
RestartSpec filled() { return {2, {"oom", "nonzero"}, true}; }
template <>
ExpectSpec filled() { return {"batch_halving", json{{"factor", 0.5}}, filled<SourceLocation>(), true}; }
template <>
SweepSpec filled() { return {"2..4", {"transient"}, 3}; }
template <>
JobSpec filled() {
  JobSpec j;
  j.name = "full";
  j.argv = {"python3", "train.py", "{workdir}/ck.pt"};
  j.shell = true;
  j.env = {{"A", "a,b,c=d"}};
  j.cwd = "/tmp";
  j.timeout = 90;
  j.grace = 3;
  j.probe = ProbeMode::python;
  j.device = DeviceChoice::virtual_device;
  j.observe = {filled<ObserveSpec>()};
  j.memory = filled<MemorySpec>();
  j.faults = {filled<FaultSpec>()};
  j.restart = filled<RestartSpec>();
  j.expect = {filled<ExpectSpec>()};
  j.target_step = 12;
  j.step_base = 0;
  j.ranks = 6;
  j.nodes = 3;
  j.ranks_per_node = 2;
  j.hang_stall = 30;
  j.sweep = filled<SweepSpec>();
  j.matrix = {{"bs", "64"}};
  j.where = filled<SourceLocation>();
  return j;
}
template <>
MemorySample filled() { return {1763900000.123456789, 1, 10, 20, 1ull << 30, 5, 1}; }
template <>
ShimRecord filled() { return {2, 2, 1, 3, true, 77, 5, 6, 1, 4}; }
template <>
RankEnd filled() {
  return {1, 1.5, 2.5, AttemptEnd::signalled, 1, 9, true, 4, "/out/attempt-1.rank1.log", "Current thread 0x1\n"};
}
template <>
LogFold filled() {
  LogFold f;
  f.routine = 70000;
  f.routine_dropped = 5000;
  f.steps = 9000;
  f.steps_dropped = 400;
  f.grads_asked = 8999;
  f.grads_uncleared = 2;
  f.growth_complete = false;
  f.growth_points = 8990;
  f.growth_mx = 4500.5;
  f.growth_my = 1.0e9;
  f.growth_sxx = 6.0e10;
  f.growth_sxy = 1.5e12;
  f.growth_from = 10;
  f.growth_to = 9000;
  f.growth_t = 1763900001.25;
  f.has_gap = true;
  f.gap_from = 1763900002.5;
  f.gap_to = 1763900012.5;
  f.gap_after_step = 77;
  f.merged = true;
  f.windows_missed = 3;
  return f;
}
template <>
Attempt filled() {
  Attempt a;
  a.index = 1;
  a.start = 1763900000.123456789;
  a.end = 1763900003.5;
  a.end_kind = AttemptEnd::timed_out;
  a.exit_code = 1;
  a.signal = 9;
  a.oom_message = true;
  a.faults_enabled = false;
  Event e;
  e.t = a.start + 0.25;
  e.pid = 42;
  e.src = "probe";
  e.kind = "oom";
  e.fields = {{"step", 5}, {"caught", false}, {"rank", 1}};
  a.events = {e};
  a.samples = {filled<MemorySample>()};
  a.output_tail = "CUDA out of memory";
  a.log_path = "/out/attempt-1.log";
  a.shim = filled<ShimRecord>();
  a.ranks = {RankEnd{}, filled<RankEnd>()};
  a.thinned = filled<LogFold>();
  return a;
}
template <>
Trace filled() { return {"s::full", {filled<Attempt>()}, {filled<Attempt>()}, 12, true, 0}; }
template <>
JobOutcome filled() {
  JobOutcome o;
  o.trace = filled<Trace>();
  o.gpu = 3;
  o.gpus = {3, 4};
  o.interrupted = true;
  o.not_started = true;
  o.error = "the sidecar failed";
  o.start = 1763899999.5;
  o.end = 1763900004.5;
  o.argv = {"python3", "train.py"};
  o.work_dir = "/out/jobs/s__full/work";
  return o;
}
template <>
HarnessPaths filled() { return {"/lib/inject.so", "/py", "/bin/oomh-reserve", "/double", "/vdouble"}; }

template <class T>
class RoundTrip : public ::testing::Test {};
using BoundaryTypes = ::testing::Types<SourceLocation, ObserveSpec, CapChange, MemorySpec, FaultSpec, RestartSpec, ExpectSpec,
                                       SweepSpec, JobSpec, MemorySample, ShimRecord, RankEnd, LogFold, Attempt, Trace,
                                       JobOutcome, HarnessPaths>;
TYPED_TEST_SUITE(RoundTrip, BoundaryTypes);

TYPED_TEST(RoundTrip, EveryFieldIsWrittenAndReadBack) {
  const TypeParam value = filled<TypeParam>();
  const json once = value;
  ASSERT_TRUE(once.is_object());
  EXPECT_EQ(once.size(), field_count<TypeParam>()) << "one member per field: " << once.dump();
  const json plain = TypeParam{};
  for (auto it = once.begin(); it != once.end(); ++it)
    EXPECT_NE(it.value(), plain.at(it.key())) << "filled<T>() leaves '" << it.key() << "' at its default";
  const TypeParam back = model_from_json<TypeParam>(json::parse(once.dump()), "value");
  EXPECT_EQ(json(back), once);
}

TYPED_TEST(RoundTrip, AMissingMemberIsRefusedByItsPath) {
  json j = filled<TypeParam>();
  const std::string key = j.begin().key();
  j.erase(key);
  try {
    model_from_json<TypeParam>(j, "value");
    FAIL() << "accepted JSON without '" << key << "'";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(key + ": missing"), std::string::npos) << e.what();
  }
}

TEST(Model, ErrorsNameTheNestedPath) {
  json j = filled<JobOutcome>();
  j["trace"]["attempts"][0]["samples"][0]["rank"] = "one";
  try {
    model_from_json<JobOutcome>(j, "job outcome");
    FAIL() << "accepted a string rank";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a valid job outcome: trace.attempts[0].samples[0].rank: "), std::string::npos)
        << e.what();
  }
  // Note [Whole numbers from JSON]: out of the field's range, or not whole, is refused by its path, not cast.
  for (json bad : {json(1e30), json(2.5), json(4294967296LL)}) {
    j = filled<JobOutcome>();
    j["trace"]["attempts"][0]["samples"][0]["rank"] = bad;
    try {
      model_from_json<JobOutcome>(j, "job outcome");
      FAIL() << "accepted rank " << bad.dump();
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("trace.attempts[0].samples[0].rank: expected a whole number from -2147483648 to "
                                           "2147483647, found " + bad.dump()),
                std::string::npos)
          << e.what();
    }
  }
  j = filled<JobOutcome>();
  j["trace"]["attempts"][0]["samples"][0]["held"] = -1;
  EXPECT_THROW(model_from_json<JobOutcome>(j, "job outcome"), std::runtime_error);
  // An event's pid is read by the event's own codec (whole_member): its error is the codec's too.
  j = filled<JobOutcome>();
  j["trace"]["attempts"][0]["events"][0]["pid"] = 1e30;
  try {
    model_from_json<JobOutcome>(j, "job outcome");
    FAIL() << "accepted a pid of 1e30";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a valid job outcome: trace.attempts[0].events[0]: pid: expected a whole number"),
              std::string::npos)
        << e.what();
  }
  j = filled<JobOutcome>();
  j["trace"]["attempts"][0]["end_kind"] = "vanished";
  EXPECT_THROW(model_from_json<JobOutcome>(j, "job outcome"), std::runtime_error);
  j = filled<JobOutcome>();
  j["trace"]["attempts"][0]["thinned"] = json::array();
  EXPECT_THROW(model_from_json<JobOutcome>(j, "job outcome"), std::runtime_error);
}

TEST(Model, FieldCountCountsMembers) {
  struct Three {
    int a = 1;
    std::optional<int> b;
    std::vector<std::string> c;
  };
  struct WithNested {
    Three t;
    SourceLocation w;
  };
  EXPECT_EQ(field_count<Three>(), 3u);
  EXPECT_EQ(field_count<WithNested>(), 2u);
  EXPECT_EQ(field_count<Attempt>(), 15u);
}

}  // namespace
}  // namespace oomh
