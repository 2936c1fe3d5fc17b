#pragma once
// Whether a job's command starts torchrun, and what it asks torchrun for.
//
// Note [A command that starts torchrun]
// On one machine the runner never needs to know: a job without `ranks` is one process whatever it starts,
// and torchrun's ranks are found afterwards in the events (split_ranks_from_events, Note [Ranks seen in
// events] in python/oomharness/_job.py). A job on several nodes must be told before it starts: its node
// agents either start ranks_per_node ranks each (Note [Ranks on several nodes] in
// runner/src/exec/node_group.h), or, when the command starts torchrun (`srun torchrun --nnodes N ...` on a
// cluster), one process per node, the node's torchrun, which starts the node's ranks itself (Note [One
// torchrun per node] in runner/src/exec/node_group.h). Starting ranks_per_node torchruns on each node
// would start ranks_per_node x ranks_per_node processes there. This file is the one place that reads a
// command for torchrun; the loader (to refuse a contradiction) and the node agents (to start one process)
// both ask it.
//
// A command starts torchrun when one of its simple commands runs `torchrun` (any folder) or a Python
// (`python`, `python3`, `python3.11`, any folder) with `-m torch.distributed.run`, after any `exec`, `env`
// and NAME=value words. A `shell: true` command (`/bin/sh -c TEXT`) is read through TEXT's simple commands
// (split at `;`, `&&`, `||`, `|`, `&` and newlines outside quotes and `$(...)`), since `--node_rank
// $SLURM_NODEID` needs a shell. torchrun's own options are the words before its script; `--nnodes` and
// `--nproc_per_node` (or `--nproc-per-node`) are kept as written, and `--standalone` is noted. What is not
// read: argparse's abbreviations (`--nproc`), options that torchrun takes from PET_* variables, and a
// script that runs torchrun itself (that job is one process per rank as before).

#include <optional>
#include <string>
#include <vector>

namespace oomh::suite {

struct TorchrunCommand {
  std::optional<std::string> nnodes;          // --nnodes as written ("2", "1:4", "$SLURM_NNODES")
  std::optional<std::string> nproc_per_node;  // --nproc_per_node / --nproc-per-node as written
  bool standalone = false;                    // --standalone: one node by definition
};

// Note [A command that starts torchrun]: nullopt when the command does not start torchrun.
std::optional<TorchrunCommand> torchrun_command(const std::vector<std::string>& argv);

// A job on `nodes` nodes with `ranks_per_node` ranks each whose command is `tr`: an error text when what
// torchrun is asked for contradicts them ("torchrun --nnodes 3, and the job has nodes: 2 ..."), else nullopt.
// A value that cannot be read (a shell variable, "gpu", "auto") is no contradiction: the runner assumes it
// is the job's. An option left out is torchrun's default (--nnodes 1, --nproc_per_node 1) unless the job's
// env gives it torchrun's way (PET_NNODES, PET_NPROC_PER_NODE: `*_from_env`).
std::optional<std::string> torchrun_contradiction(const TorchrunCommand& tr, int nodes, int ranks_per_node, bool nnodes_from_env,
                                                  bool nproc_from_env);

}  // namespace oomh::suite
