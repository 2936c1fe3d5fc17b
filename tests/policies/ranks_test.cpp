// Distributed jobs (Note [Ranks] in trace.h): merge_ranks, and the checks that judge every rank.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "oomharness/policies/registry.h"
#include "check_policy.h"
#include "trace_builder.h"

namespace oomh {
namespace {

using ::testing::HasSubstr;
using testing::TraceBuilder;
using testing::check;


// One trace whose only attempt is the ranks' attempts merged.
Trace merged(std::vector<TraceBuilder> ranks, std::optional<int64_t> target = std::nullopt) {
  std::vector<Attempt> per_rank;
  for (auto& b : ranks) per_rank.push_back(b.build().attempts.at(0));
  Trace t;
  t.attempts.push_back(merge_ranks(std::move(per_rank)));
  t.target_step = target;
  return t;
}

TraceBuilder rank_steps(int64_t last, int64_t batch = 64) {
  TraceBuilder b;
  b.attempt();
  for (int64_t s = 1; s <= last; ++s) b.step(s, batch);
  return b;
}

TEST(MergeRanks, Rank1DiedOfAnOomWhileRank0Finished) {
  TraceBuilder r1;
  r1.attempt().step(1, 64).oom(2, 64, /*caught=*/false).exit(1, true);
  Trace t = merged({rank_steps(3).exit(0), r1}, 3);
  const Attempt& a = t.attempts[0];
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_EQ(a.exit_code, 1);  // the deciding rank is the one that failed, not rank 0
  EXPECT_TRUE(a.ended_by_oom());
  EXPECT_TRUE(a.ranks[1].ended_by_oom);
  EXPECT_EQ(a.ranks[0].last_step, 3);
  EXPECT_EQ(a.ranks[1].last_step, 1);
  for (const Event& e : a.events) EXPECT_GE(rank_of(e), 0) << e.kind;
  EXPECT_TRUE(std::is_sorted(a.events.begin(), a.events.end(), [](const Event& x, const Event& y) { return x.t < y.t; }));
  Verdict exit = check("exit", t);
  EXPECT_EQ(exit.status, VerdictStatus::fail) << exit.reason;
  Verdict completes = check("completes", t, 3);
  EXPECT_EQ(completes.status, VerdictStatus::fail) << completes.reason;
  EXPECT_THAT(completes.reason, HasSubstr("rank 1 stopped at step 1 of 3"));
}

TEST(MergeRanks, EveryRankReachingTheTargetPasses) {
  Trace t = merged({rank_steps(3).exit(0), rank_steps(3).exit(0)}, 3);
  EXPECT_EQ(t.attempts[0].exit_code, 0);
  EXPECT_EQ(check("exit", t).status, VerdictStatus::pass);
  Verdict v = check("completes", t, 3);
  EXPECT_EQ(v.status, VerdictStatus::pass) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("every rank"));
}

TEST(MergeRanks, AFailureOutranksAStopByTheRunner) {
  TraceBuilder stopped;
  stopped.attempt().step(1).wait(10).timed_out();
  TraceBuilder died;
  died.attempt().step(1).exit(7);
  Attempt a = merged({stopped, died}).attempts[0];
  EXPECT_EQ(a.end_kind, AttemptEnd::exited);
  EXPECT_EQ(a.exit_code, 7);
}

// Note [Checkpoints per rank]: after the attempt dies of rank 1's OOM, every rank must resume from the
// checkpoint (rank 0 saved it; both load it); a rank that starts from scratch fails the job, named.
TEST(CheckpointResume, EveryRankMustResume) {
  auto attempt = [](std::vector<TraceBuilder> ranks, int index) {
    std::vector<Attempt> per_rank;
    for (auto& b : ranks) per_rank.push_back(b.build().attempts.at(0));
    Attempt a = merge_ranks(std::move(per_rank));
    a.index = index;
    return a;
  };
  TraceBuilder saver, dies;
  saver.attempt().step(1).step(2).save("ckpt.pt", 2).step(3).exit(1);  // its peer closed the connection
  dies.attempt().step(1).step(2).step(3).oom(4, 64, /*caught=*/false).exit(1);
  auto resumes = [] {
    TraceBuilder b;
    b.attempt().load("ckpt.pt", 2).step(3).step(4).step(5).exit(0);
    return b;
  };
  TraceBuilder scratch;
  scratch.attempt().step(1).step(2).step(3).step(4).step(5).exit(0);

  Trace good;
  good.attempts = {attempt({saver, dies}, 0), attempt({resumes(), resumes()}, 1)};
  good.target_step = 5;
  Verdict v = check("checkpoint_resume", good);
  EXPECT_EQ(v.status, VerdictStatus::pass) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("every rank resumed"));

  Trace bad = good;
  bad.attempts[1] = attempt({resumes(), scratch}, 1);
  v = check("checkpoint_resume", bad);
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("rank 1: attempt 2 started from scratch"));
}

// Issue 33, found on the virtual device with a DDP trainer: rank 1 dies of an OOM in step 5's forward and
// rank 0 is stopped inside step 5 (its step never completes, so its batch is not recorded). Rank 1's OOM,
// which rank 0's view carries to know the attempt died, holds rank 1's batch: rank 0's first resumed step
// must not be compared with it (another rank's data), or every correct DDP resume reads "a batch no earlier
// attempt trained on" and is inconclusive. Rank 0 is then judged by step numbers; a rank 0 that went back
// to its first batch still fails by data.
TEST(CheckpointResume, AnotherRanksBatchIsNotThisRanksData) {
  auto attempt = [](std::vector<TraceBuilder> ranks, int index) {
    std::vector<Attempt> per_rank;
    for (auto& b : ranks) per_rank.push_back(b.build().attempts.at(0));
    Attempt a = merge_ranks(std::move(per_rank));
    a.index = index;
    return a;
  };
  auto data = [](const std::string& digest) {  // digests are hex
    return nlohmann::json{{"samples", 64}, {"digest", digest}, {"per_sample", true}};
  };
  auto step = [&](TraceBuilder& b, int64_t s, const std::string& digest) {
    b.event("probe", "step", {{"step", s}, {"batch_size", 64}, {"data", data(digest)}});
  };
  TraceBuilder saver, dies;
  saver.attempt();
  for (int s = 1; s <= 4; ++s) step(saver, s, "a00" + std::to_string(s));
  saver.event("probe", "checkpoint_save", {{"path", "last.pt.tmp"}, {"step", 4}, {"completed", 4}, {"digest", "feed0004"}});
  saver.wait(5).killed(15);  // stopped inside step 5 after rank 1 died
  dies.attempt();
  for (int s = 1; s <= 4; ++s) step(dies, s, "b00" + std::to_string(s));
  dies.event("probe", "oom", {{"step", 5}, {"batch_size", 64}, {"phase", "forward"}, {"message", "CUDA out of memory"},
                               {"caught", false}, {"data", data("b005")}});
  dies.exit(1, true);
  auto resumed = [&](const std::string& rank_tag, const std::string& first) {
    TraceBuilder b;
    b.attempt().event("probe", "checkpoint_load", {{"path", "last.pt"}, {"step", 4}, {"digest", "feed0004"}});
    step(b, 5, first);
    for (int s = 6; s <= 6; ++s) step(b, s, rank_tag + std::to_string(s));
    b.exit(0);
    return b;
  };
  Trace good;
  good.attempts = {attempt({saver, dies}, 0), attempt({resumed("c00", "c005"), resumed("d00", "b005")}, 1)};
  good.target_step = 6;
  Verdict v = check("checkpoint_resume", good);
  EXPECT_EQ(v.status, VerdictStatus::pass) << v.reason;

  Trace back = good;
  back.attempts[1] = attempt({resumed("c00", "a001"), resumed("d00", "b005")}, 1);  // rank 0 restarted its loop
  v = check("checkpoint_resume", back);
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("rank 0:"));
  EXPECT_THAT(v.reason, HasSubstr("went back"));
}

// An event of process `pid` from `src`, as a log line would give it.
Event ev(double t, int pid, const std::string& src, const std::string& kind, nlohmann::json f) {
  Event e;
  e.t = t;
  e.pid = pid;
  e.src = src;
  e.kind = kind;
  e.fields = std::move(f);
  return e;
}

// Note [Ranks seen in events]: a job that starts torchrun itself is one process to the runner; its ranks'
// probes tag their events with RANK, and the attempt is folded as if the runner had run the ranks.
TEST(SplitRanksFromEvents, ATorchrunJobIsJudgedRankByRank) {
  Attempt a;
  a.start = 0;
  a.end = 20;
  a.end_kind = AttemptEnd::exited;
  a.exit_code = 1;  // torchrun's: a child failed
  a.log_path = "/o/attempt-0.log";
  a.events = {ev(0, 10, "runner", "attempt_start", {{"attempt", 0}}),
              ev(1, 10, "shim", "shim_start", nlohmann::json::object()),  // torchrun itself: no rank
              ev(2, 11, "probe", "step", {{"step", 1}, {"batch_size", 64}, {"rank", 0}}),
              ev(2, 12, "probe", "step", {{"step", 1}, {"batch_size", 64}, {"rank", 1}}),
              ev(3, 11, "probe", "step", {{"step", 2}, {"batch_size", 64}, {"rank", 0}}),
              ev(3, 12, "shim", "inject", {{"entry", "cuMemAlloc_v2"}, {"size", 1 << 20}}),
              ev(4, 12, "probe", "oom", {{"step", 2}, {"batch_size", 64}, {"phase", "forward"}, {"caught", false}, {"rank", 1}}),
              ev(5, 11, "probe", "step", {{"step", 3}, {"batch_size", 64}, {"rank", 0}}),
              ev(20, 10, "runner", "attempt_exit", {{"code", 1}})};
  Attempt untouched = a;
  std::erase_if(untouched.events, [](const Event& e) { return rank_of(e) == 1; });  // one rank seen: nothing to split
  EXPECT_FALSE(split_ranks_from_events(untouched));
  EXPECT_TRUE(untouched.ranks.empty());

  ASSERT_TRUE(split_ranks_from_events(a));
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_EQ(rank_of(a.events[5]), 1) << "the shim's inject in rank 1's process";
  EXPECT_EQ(rank_of(a.events[1]), -1) << "torchrun's own process is no rank";
  EXPECT_EQ(rank_of(a.events[0]), -1);
  EXPECT_EQ(a.ranks[0].last_step, 3);
  EXPECT_EQ(a.ranks[1].last_step, 1);
  EXPECT_FALSE(a.ranks[0].ended_by_oom);
  EXPECT_TRUE(a.ranks[1].ended_by_oom);
  EXPECT_EQ(a.ranks[1].log_path, "/o/attempt-0.log");
  EXPECT_FALSE(split_ranks_from_events(a)) << "twice is once";
  Trace t;
  t.attempts.push_back(a);
  t.target_step = 3;
  Verdict completes = check("completes", t, 3);
  EXPECT_EQ(completes.status, VerdictStatus::fail) << completes.reason;
  EXPECT_THAT(completes.reason, HasSubstr("rank 1 stopped at step 1 of 3"));
}

// Note [One torchrun per node]: each node's torchrun and its ranks share one log; pids are per node, so the
// same pid on two nodes is two processes, and every rank takes its own node's torchrun's end.
TEST(MergeNodeTorchruns, EachNodesPidsNameItsOwnRanks) {
  auto node = [&](int first_rank, int exit_code, bool oom_on_second) {
    Attempt a;
    a.start = 0;
    a.end = 20;
    a.exit_code = exit_code;
    a.log_path = "/o/attempt-0.node" + std::to_string(first_rank / 2) + ".log";
    a.output_tail = "node of rank " + std::to_string(first_rank) + "\n";
    a.events = {ev(0, 1, "runner", "attempt_start", {{"attempt", 0}}),
                ev(1, 2, "shim", "shim_start", nlohmann::json::object()),  // the torchrun: the same pid on both nodes
                ev(2, 3, "probe", "step", {{"step", 1}, {"batch_size", 64}, {"rank", first_rank}}),
                ev(2, 4, "probe", "step", {{"step", 1}, {"batch_size", 64}, {"rank", first_rank + 1}}),
                ev(3, 3, "probe", "step", {{"step", 2}, {"batch_size", 64}, {"rank", first_rank}})};
    if (oom_on_second) {
      a.events.push_back(ev(3, 4, "shim", "inject", {{"entry", "cuMemAlloc_v2"}, {"size", 1 << 20}}));
      a.events.push_back(ev(4, 4, "probe", "oom", {{"step", 2}, {"batch_size", 64}, {"phase", "forward"}, {"caught", false}, {"rank", first_rank + 1}}));
    } else {
      a.events.push_back(ev(3, 4, "probe", "step", {{"step", 2}, {"batch_size", 64}, {"rank", first_rank + 1}}));
    }
    a.shim = ShimRecord{};
    a.shim->processes = 3;
    return a;
  };
  Attempt a = merge_node_torchruns({node(0, 0, false), node(2, 1, true)}, 2);
  ASSERT_EQ(a.ranks.size(), 4u);
  for (const Event& e : a.events)
    if (e.kind == "inject") EXPECT_EQ(rank_of(e), 3) << "node 2's pid 4 is rank 3, not node 1's rank 1";
  EXPECT_EQ(a.ranks[0].exit_code, 0);
  EXPECT_EQ(a.ranks[1].exit_code, 0);
  EXPECT_EQ(a.ranks[2].exit_code, 1) << "every rank of node 2 ends as its torchrun did";
  EXPECT_EQ(a.ranks[3].exit_code, 1);
  EXPECT_TRUE(a.ranks[3].ended_by_oom);
  EXPECT_FALSE(a.ranks[2].ended_by_oom);
  EXPECT_EQ(a.ranks[3].log_path, "/o/attempt-0.node1.log");
  EXPECT_EQ(a.exit_code, 1) << "the attempt ends as the node that failed";
  ASSERT_TRUE(a.shim);
  EXPECT_EQ(a.shim->processes, 6u) << "each node's shim record counted once";
  EXPECT_EQ(a.ranks[3].last_step, 1);
  EXPECT_EQ(a.ranks[1].last_step, 2);

  // A node that reported nothing of its ranks: they take its end, by --node_rank; a rank two nodes name is
  // said (their torchruns made two worlds).
  Attempt silent;
  silent.start = 0;
  silent.end = 5;
  silent.end_kind = AttemptEnd::signalled;
  silent.signal = 9;
  Attempt b = merge_node_torchruns({node(0, 0, false), silent}, 2);
  ASSERT_EQ(b.ranks.size(), 4u);
  EXPECT_EQ(b.ranks[3].end_kind, AttemptEnd::signalled);
  Attempt c = merge_node_torchruns({node(0, 0, false), node(0, 0, false)}, 2);
  bool warned = false;
  for (const Event& e : c.events)
    if (e.kind == "warning" && e.text("message").find("rank 0 on node 1 and node 2") != std::string::npos) warned = true;
  EXPECT_TRUE(warned);
}

constexpr const char* kStacks =
    "Thread 0x00007f5e9affd6c0 (most recent call first):\n"
    "  File \"/x/ddp_train.py\", line 75 in heartbeat\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
    "\n"
    "Current thread 0x00007f5ec615b480 (most recent call first):\n"
    "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1541 in all_reduce\n"
    "  File \"/x/ddp_train.py\", line 120 in main\n";

TEST(InnermostFrame, MainThreadIsTheLastBlock) {
  EXPECT_EQ(innermost_frame(kStacks), "all_reduce (distributed_c10d.py:1541)");
  EXPECT_EQ(innermost_frame(""), "");
  EXPECT_EQ(innermost_frame("Current thread 0x1 (most recent call first):\n  File \"a.py\", line 3 in f\n"), "f (a.py:3)");
}

TEST(NoHang, NamesTheHungRankWhatItWaitedInAndWhy) {
  TraceBuilder r0;
  r0.attempt().step(1).step(2).wait(5).event("runner", "hang", {{"rank", 0}, {"step", 3}, {"waited", 5.0}, {"stall", 5.0},
                                                                  {"after_rank", 1}, {"after", "oom"}}).timed_out();
  TraceBuilder r1;
  r1.attempt().step(1).step(2).oom(3, 64, false).wait(6).timed_out();
  Trace t = merged({r0, r1});
  t.attempts[0].ranks[0].stacks = kStacks;
  Verdict v = check("no_hang", t, nlohmann::json{{"stall", 5}});
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("rank 0 waited 5s in all_reduce (distributed_c10d.py:1541) after rank 1 raised an "
                                  "out-of-memory error at step 3"));
}

TEST(RanksRecoverTogether, SameBatchOnEveryRankPasses) {
  TraceBuilder r0 = rank_steps(4, 64);
  r0.step(5, 32).step(6, 32).exit(0);
  TraceBuilder r1 = rank_steps(4, 64);
  r1.inject_at(5).oom(5, 64).step(5, 32).step(6, 32).exit(0);
  Verdict v = check("ranks_recover_together", merged({r0, r1}));
  EXPECT_EQ(v.status, VerdictStatus::pass) << v.reason;
}

TEST(RanksRecoverTogether, HalvingOnlyOnTheFailedRankFails) {
  TraceBuilder r0 = rank_steps(4, 64);
  r0.step(5, 64).step(6, 64).exit(0);
  TraceBuilder r1 = rank_steps(4, 64);
  r1.inject_at(5).oom(5, 64).step(5, 32).step(6, 32).exit(0);
  Verdict v = check("ranks_recover_together", merged({r0, r1}));
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("after rank 1's OOM at step 5, step 5 ran at batch 64 on rank 0 but at batch 32 on rank 1"));
}

TEST(RanksRecoverTogether, ARankLeftRunningAfterItsPeerDiedFails) {
  TraceBuilder r0 = rank_steps(4, 64);
  r0.wait(100).timed_out();
  TraceBuilder r1 = rank_steps(4, 64);
  r1.inject_at(5).oom(5, 64, false).exit(1, true);
  Verdict v = check("ranks_recover_together", merged({r0, r1}));
  EXPECT_EQ(v.status, VerdictStatus::fail) << v.reason;
  EXPECT_THAT(v.reason, HasSubstr("rank 1 died of the OOM but rank 0 did not end by itself"));
}

TEST(RanksRecoverTogether, InconclusiveWithoutRanks) {
  Trace t = TraceBuilder().attempt().step(1).inject_at(2).oom(2, 64).step(2, 32).exit(0).build();
  EXPECT_EQ(check("ranks_recover_together", t).status, VerdictStatus::inconclusive);
}

}  // namespace
}  // namespace oomh
