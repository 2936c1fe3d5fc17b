#pragma once
// The nodes of one job whose ranks spread over several (Slurm's) nodes.
//
// Note [Ranks on several nodes]
// A job with `nodes: N` and `ranks_per_node: M` (JobSpec::ranks is N x M) runs on Slurm as one allocation
// (`sbatch --nodes=N --ntasks-per-node=M`). Its batch script's agent (on the first node) checks the nodes
// (every node reads the shared folder and runs the same oomharness version), then starts one *node agent*
// per node with one `srun --nodes=N --ntasks=N` step. Each node agent is the local job runner for its M
// ranks: global ranks node*M .. node*M+M-1, each under the shim with its own control block, log, event log
// and stack file in the job's folder (shared), exactly as a local job with ranks. What the nodes must
// agree on goes through files in the job's Slurm folder (`nodes/`), which every node shares:
// - the start of each attempt: node 0 prepares the attempt (a reference run's empty work folder) and says
//   `go`; the others wait for it. MASTER_ADDR is the first node's address (SLURM_LAUNCH_NODE_IPADDR: the
//   node whose agent ran srun), MASTER_PORT a port the first node found free, plus the attempt's number.
// - the first end: the first rank (on any node) to exit or raise an OOM, which starts every node's hang
//   watch (Note [Hang detection] in job_runner_hangs.cpp). A remote end counts from when this node saw it.
// - a hang: the node that finds a rank stalled records the `hang` event and says so; every node then takes
//   its own ranks' stacks (SIGUSR1) and stops them. So no_hang gets the stacks of every rank on every node.
// - the end of each attempt: each node writes its ranks' attempts (events, samples, exits, stacks) and
//   waits for every other node's; all nodes then fold the same N x M ranks into the same attempt (Note
//   [Ranks] in trace.h), and so make the same decision about a restart: the ranks restart together, inside
//   the allocation.
// - a heartbeat: every node writes a counter about once a second. A node whose counter has not changed for
//   kNodeSilence seconds (by this node's clock: no clocks are compared) has disappeared (its slurmd and
//   tasks killed, the node down): the others stop their ranks and the job is an error that names that node,
//   never a pass and never an OOM verdict.
//
// Note [One torchrun per node]
// On a cluster, distributed PyTorch is often `srun torchrun --nnodes=$SLURM_NNODES --nproc_per_node=M
// --node_rank=$SLURM_NODEID --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT train.py`: one torchrun per node, which
// starts the node's M ranks. A job on several nodes whose command starts torchrun (Note [A command that starts
// torchrun] in runner/src/suite/torchrun_command.h; the loader has refused an --nnodes or --nproc_per_node it
// can read that contradicts nodes and ranks_per_node) is run that way: each node agent starts ONE process, the
// node's torchrun, under the shim, with what srun gives one task per node (SLURM_NODEID, SLURM_NNODES,
// SLURM_PROCID = the node, SLURM_LOCALID 0, SLURM_NTASKS = the nodes) and MASTER_ADDR/MASTER_PORT of the
// attempt (above), and no RANK, LOCAL_RANK or WORLD_SIZE: torchrun gives those to its ranks. The ranks of a
// node then share the node's output log, event log and control block (`attempt-0.node1.log`, ...), as the
// ranks of a local job that starts torchrun itself do (docs/distributed.md); the probe tags each event with
// its process's RANK and the shim's `rank:` filter reads RANK, so a fault on rank k hits global rank k on
// whichever node torchrun put it. At the end of each attempt the nodes exchange their torchruns' attempts
// (as ranks' parts, keyed by node) and every node folds them with merge_node_torchruns (trace.h): each
// node's shim events take the rank of their pid within that node's log (pids are per node), every rank gets
// its node's torchrun's end, and the ranks are merged as above; so restarts are of every node together.
// The first end, the hang watch and the heartbeat are as above, with a node's torchrun standing for its
// ranks: its exit or its control block's first OOM starts every node's watch (its rank is not known while it
// runs: the `hang` event names the nodes instead), and a torchrun whose block's step stalls is hung. What
// is lost against ranks the agents start themselves: no stacks (a torchrun is not sent SIGUSR1, its ranks
// have no stack files), the step a node's hang watch reads is whichever of its ranks wrote last, and a rank
// that dies of what restarts the job does not stop the other nodes early (Note [A restart of every rank]):
// over gloo they fail at once; over NCCL the hang watch ends the attempt.

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/runner/model.h"

namespace oomh::exec {

// Note [One torchrun per node]: a job on several nodes whose command starts torchrun.
bool one_torchrun_per_node(const JobSpec& job);

inline constexpr double kNodeSilence = 10;  // seconds without a heartbeat after which a node is gone
inline constexpr const char* kGroupInterrupted = "interrupted";  // what start() and exchange() say when `stop` was set

class NodeGroup {
 public:
  struct Setup {
    int node = 0, nodes = 1, ranks_per_node = 1;
    std::string dir;                 // the folder the nodes share for this job (<slurm job dir>/nodes)
    std::string master_addr;         // rank 0's node's address
    int base_port = 0;               // MASTER_PORT of attempt 0
    std::vector<std::string> hosts;  // node k's host name, for messages
  };
  explicit NodeGroup(Setup s);

  int node() const { return s_.node; }
  int nodes() const { return s_.nodes; }
  int ranks_per_node() const { return s_.ranks_per_node; }
  int first_rank() const { return s_.node * s_.ranks_per_node; }
  int world() const { return s_.nodes * s_.ranks_per_node; }
  const std::string& master_addr() const { return s_.master_addr; }
  int port(bool reference, int attempt) const { return s_.base_port + (reference ? 500 : 0) + attempt; }
  // "oomh-n2 (node 2 of 2, ranks 2-3)".
  std::string describe(int node) const;
  int node_of_rank(int rank) const { return rank / std::max(1, s_.ranks_per_node); }

  // The attempt's key in the shared folder: "attempt-3", "reference-0".
  static std::string key(bool reference, int attempt) { return (reference ? "reference-" : "attempt-") + std::to_string(attempt); }

  // Every node at the start of an attempt: node 0 runs `prepare` and says go; the others wait for it.
  // An error text when a node disappeared meanwhile, or `stop` was set.
  std::optional<std::string> start(const std::string& key, const std::function<void()>& prepare, const std::atomic<bool>& stop);

  // This node's first end (the first of its ranks to exit or raise an OOM); the first other node's.
  void publish_end(const std::string& key, int rank, bool oom);
  struct End {
    int rank = -1;  // -1: a node's torchrun ended (Note [One torchrun per node]), whose rank is not known
    bool oom = false;
    int node = -1;  // the node that said so
  };
  std::optional<End> remote_end(const std::string& key);
  // A hang called on this node; the node that called one elsewhere.
  void publish_hang(const std::string& key, int rank);
  std::optional<int> hang_elsewhere(const std::string& key);

  // The heartbeat: writes this node's (at most once a second) and returns a description of a node that
  // has been silent for kNodeSilence seconds, if any. Cheap to call often.
  std::optional<std::string> beat();

  // The end of an attempt: this node's ranks' attempts and stacks out, every node's in (rank order). An
  // error text naming the node when one disappeared before writing its part, or when `stop` was set.
  struct RankPart {
    int rank = -1;
    Attempt attempt;
    std::string stacks;
  };
  std::optional<std::string> exchange(const std::string& key, const std::vector<RankPart>& mine, std::vector<RankPart>& all,
                                      const std::atomic<bool>& stop);

 private:
  std::string path(const std::string& name) const;
  Setup s_;
  double last_beat_ = 0;
  uint64_t beats_ = 0;
  double last_look_ = 0;
  struct Seen {
    std::string text;
    double since = 0;
  };
  std::map<int, Seen> seen_;
  std::optional<std::string> lost_;
};

}  // namespace oomh::exec
