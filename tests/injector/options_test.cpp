// The OOMH_ options table: what turns the shim on, and warnings for unknown names and bad values.
#include "engine/options.h"

#include <gtest/gtest.h>

#include <vector>

using namespace oomh::inject;

namespace {
Options read(std::vector<const char*> env) {
  env.push_back(nullptr);
  return read_options(const_cast<char**>(env.data()));
}
}  // namespace

TEST(Options, NothingSetIsAPassThrough) {
  Options o = read({"PATH=/bin", "HOME=/root"});
  EXPECT_FALSE(o.any_set);
  EXPECT_FALSE(o.active());
  EXPECT_TRUE(o.problems.empty());
}

TEST(Options, ShimVariablesTurnItOn) {
  for (const char* v : {"OOMH_PLAN={}", "OOMH_CAP=8GiB", "OOMH_CONTROL=/oomh-x", "OOMH_EVENTS=/tmp/e"}) {
    EXPECT_TRUE(read({v}).active()) << v;
  }
  EXPECT_FALSE(read({"OOMH_CAP=8GiB", "OOMH_DISABLE=1"}).active());
  EXPECT_TRUE(read({"OOMH_CAP=8GiB", "OOMH_DISABLE=0"}).active());
}

TEST(Options, OtherPartsVariablesAreAcceptedSilently) {
  Options o = read({"OOMH_PROBE=1", "OOMH_JOB=demo", "OOMH_ATTEMPT=2", "OOMH_SNAPSHOT=/tmp/s", "OOMH_SHIM_PARENT=12",
                    "OOMH_LOG=debug"});
  EXPECT_TRUE(o.problems.empty());
  EXPECT_FALSE(o.active());
  EXPECT_EQ(o.log, LogLevel::debug);
  EXPECT_TRUE(o.has_shim_parent);
  EXPECT_EQ(o.shim_parent, "12");
}

// CI runs the tests with scripts/test.sh's variables set (OOMH_REQUIRE_SLURM as root): a job inherits them,
// and a warning from its shim came before the job's own first line (hostile.jobs.bigout failed in CI).
TEST(Options, TheScriptsAndTestsVariablesAreAcceptedSilently) {
  Options o = read({"OOMH_REQUIRE_SLURM=1", "OOMH_SLURM_DIR=/tmp/s", "OOMH_SLURM_PORT=6817", "OOMH_BUILD_DIR=/b",
                    "OOMH_JOBS=2", "OOMH_SOURCE_DIR=/s", "OOMH_SANITIZERS=0", "OOMH_FUZZ=0", "OOMH_FUZZ_SECONDS=30",
                    "OOMH_FUZZ_BUILD_DIR=/f", "OOMH_FUZZ_WORK=/w", "OOMH_FUZZ_CXX=clang++", "OOMH_UPDATE_GOLDEN=1",
                    "OOMH_BENCH_DIR=/x", "OOMH_HEARTBEAT=30", "OOMH_BINARY=/bin/oomharness",
                    "OOMH_TORCH_PYTHON=/venv/bin/python"});  // set by the wheel's console script
  EXPECT_TRUE(o.problems.empty()) << o.problems.front();
  EXPECT_FALSE(o.active());
}

TEST(Options, UnknownNamesGetASuggestion) {
  Options o = read({"OOMH_CAPP=8GiB", "OOMH_TOTALLY_DIFFERENT=1"});
  ASSERT_EQ(o.problems.size(), 2u);
  EXPECT_EQ(o.problems[0], "unknown variable OOMH_CAPP (did you mean OOMH_CAP?)");
  EXPECT_EQ(o.problems[1], "unknown variable OOMH_TOTALLY_DIFFERENT");
  EXPECT_FALSE(o.active());
}

TEST(Options, BadValues) {
  Options o = read({"OOMH_LOG=loud", "OOMH_DISABLE=maybe", "OOMH_CAP=1GiB"});
  ASSERT_EQ(o.problems.size(), 2u);
  EXPECT_EQ(o.problems[0], "OOMH_LOG: unknown level 'loud' (use quiet, warn, info or debug)");
  EXPECT_EQ(o.problems[1], "OOMH_DISABLE: 'maybe' is not 1 or 0; the shim is disabled");
  EXPECT_FALSE(o.active());
}

TEST(Options, RecordStepIsAStepOrARange) {
  EXPECT_EQ(read({"OOMH_EVENTS=/tmp/x"}).record_from, -1);
  Options o = read({"OOMH_EVENTS=/tmp/x", "OOMH_RECORD_STEP=12"});
  EXPECT_EQ(o.record_from, 12);
  EXPECT_EQ(o.record_to, 12);
  EXPECT_TRUE(o.problems.empty());
  Options range = read({"OOMH_EVENTS=/tmp/x", "OOMH_RECORD_STEP=2..5"});
  EXPECT_EQ(range.record_from, 2);
  EXPECT_EQ(range.record_to, 5);
  for (const char* bad : {"OOMH_RECORD_STEP=two", "OOMH_RECORD_STEP=5..2", "OOMH_RECORD_STEP=2..", "OOMH_RECORD_STEP=-1"}) {
    Options b = read({"OOMH_EVENTS=/tmp/x", bad});
    EXPECT_EQ(b.record_from, -1) << bad;
    ASSERT_EQ(b.problems.size(), 1u) << bad;
    EXPECT_NE(b.problems[0].find("is not a step or a range of steps (3, 2..5); no allocation is recorded"), std::string::npos);
  }
}

TEST(Options, EveryTableEntryIsKnown) {
  for (const auto& spec : kOptionTable) EXPECT_EQ(closest_option(spec.name), spec.name);
}

TEST(Options, CapCountsAllocationsUnlessToldFootprint) {
  EXPECT_EQ(read({"OOMH_CAP=8GiB"}).cap_counts, CapCounting::allocations);
  Options o = read({"OOMH_CAP=8GiB", "OOMH_CAP_COUNTS=footprint"});
  EXPECT_EQ(o.cap_counts, CapCounting::footprint);
  EXPECT_TRUE(o.problems.empty());
  o = read({"OOMH_CAP=8GiB", "OOMH_CAP_COUNTS=context"});
  EXPECT_EQ(o.cap_counts, CapCounting::allocations);
  ASSERT_EQ(o.problems.size(), 1u);
  EXPECT_EQ(o.problems[0], "OOMH_CAP_COUNTS: 'context' is not allocations or footprint; caps count allocations");
  EXPECT_FALSE(read({"OOMH_CAP_COUNTS=footprint"}).active());  // it says what a cap counts, not that there is one
}
