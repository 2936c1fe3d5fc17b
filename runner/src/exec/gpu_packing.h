#pragma once
// Packing jobs onto GPUs.
//
// Note [GPU packing]
// A job with a virtual cap (`memory.limit`) can share a GPU: it never holds more than its cap (the shim
// fails what would pass it), plus what its reservation sidecar holds, plus, when its cap counts only
// allocations, what no allocation shows: its CUDA context and the driver's own memory (610-742 MiB for a
// PyTorch job on an H100, Note [Counting the footprint] in injector/engine/engine.h), for which the packer
// sets aside kContextAllowance per job. A cap that counts the footprint already includes it. So capped jobs
// are packed onto one GPU while the sum of their needs fits the GPU's free memory (total − used at the
// start of the run) minus the margin; among the GPUs a job fits, it goes to the one running the fewest
// jobs, so that 8 capped jobs on 4 GPUs run 2 to a GPU rather than 8 on the first (each job then gets more
// of a GPU's compute; measured on 4 H200s, issue 33: first-fit put all 8 on GPU 0). A job without a cap may take all the memory there is, so it gets a
// GPU to itself; so does a job whose sidecar holds all but `memory.leave` of it, and a capped job whose
// need does not fit any GPU even when empty (otherwise it would wait forever). Jobs are placed in suite
// order (first come, first served): a job that does not fit waits until running jobs give their memory
// back, and no later job overtakes it, so a big job is never starved by a stream of small ones. Without GPUs every job runs without CUDA_VISIBLE_DEVICES.
//
// Note [One GPU per rank]
// A job with `ranks: N` on GPUs gets N distinct GPUs, placed together or not at all (it waits until N fit),
// each with the job's need: a cap is per rank (each rank's shim counts its own bytes), so rank k's GPU must
// hold one rank's cap, not the job's. Every rank sees all N (CUDA_VISIBLE_DEVICES=a,b in rank order) and
// LOCAL_RANK=k, as under torchrun, where scripts call torch.cuda.set_device(LOCAL_RANK): rank k's device k
// is the k-th GPU placed. (A CUDA_VISIBLE_DEVICES of one GPU per rank would break those scripts: device 1
// would not exist for rank 1.) A script that leaves every rank on cuda:0 puts N caps on the first GPU, which
// the packer did not count: docs/distributed.md says so. A job with more ranks than the run has GPUs is an
// error (NCCL refuses two ranks on one GPU), not a wait. Jobs on the virtual device need no GPU per rank.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "oomharness/runner/job_runner.h"

namespace oomh::exec {

// What a job's context and driver memory take beside an allocations cap (Note [GPU packing]).
inline constexpr uint64_t kContextAllowance = uint64_t{1} << 30;

// What a job needs on a GPU: its bytes, or the whole GPU (exclusive).
struct GpuNeed {
  bool exclusive = true;
  uint64_t bytes = 0;
};
GpuNeed gpu_need(const JobSpec& job);

struct Placement {
  std::optional<int> gpu;  // nullopt: no GPU (the machine has none)
  uint64_t bytes = 0;
  bool exclusive = false;
};

class GpuPacker {
 public:
  GpuPacker(std::vector<GpuInfo> gpus, uint64_t margin);
  bool has_gpus() const { return !slots_.empty(); }
  size_t gpu_count() const { return slots_.size(); }
  // A place for `need` now, on none of the GPUs `taken`, or nullopt when it has to wait.
  std::optional<Placement> place(const GpuNeed& need, const std::vector<int>& taken = {});
  // `count` places on distinct GPUs, all now or none (Note [One GPU per rank]); without GPUs one place
  // without a GPU. nullopt when they have to wait, and always when count exceeds gpu_count().
  std::optional<std::vector<Placement>> place_each(const GpuNeed& need, size_t count);
  void release(const Placement& p);

 private:
  struct Slot {
    GpuInfo info;
    uint64_t capacity = 0;   // free − margin
    uint64_t committed = 0;  // sum of the needs of capped jobs on it
    int jobs = 0;
    bool exclusive = false;
  };
  std::vector<Slot> slots_;
};

// The machine's GPUs as nvidia-smi reports them, asked once per command (a run, the demo): what the
// packer packs onto and what the results' environment names. Each nvidia-smi call has a time limit.
struct GpuSurvey {
  std::vector<GpuInfo> gpus;
  std::string name, driver_version, cuda_version;  // of the first GPU ("13.0": the driver's CUDA)
};
// nullopt when there is no nvidia-smi, it fails or times out, or it lists no GPU.
std::optional<GpuSurvey> survey_gpus(double timeout_seconds = 10);
// Parses `nvidia-smi --query-gpu=index,memory.total,memory.used,name,driver_version --format=csv,noheader,nounits`
// (MiB); lines that do not parse are skipped. The name and driver are the first GPU's.
GpuSurvey parse_gpu_query(const std::string& text);
// "13.0" from nvidia-smi's banner ("| ... CUDA Version: 13.0 |").
std::optional<std::string> parse_smi_cuda_version(const std::string& text);
// Keeps the GPUs whose index is in `wanted` (all when `wanted` is empty).
std::vector<GpuInfo> select_gpus(std::vector<GpuInfo> gpus, const std::vector<int>& wanted);

}  // namespace oomh::exec
