#pragma once
// Note [Processes outside the shim]
// A cap or a fault holds only in the processes the shim is active in. A launcher that makes a tiny GPU call
// under the shim and then runs its trainer with `env -u LD_PRELOAD` (or clears LD_PRELOAD in os.environ
// before a subprocess, or runs a static or setuid program, which the loader does not preload into) passed
// under `--cap 64MiB` while the trainer held 128 MiB a step (issue 44). Any process of the job that holds
// device memory outside the shim makes the job an error naming it (Note [Green means tested] in
// runner/include/oomharness/runner/untested.h). The runner learns of one in two ways:
//  - From the process itself: the Python probe (python/oomharness/_job.py) asks its own process whether the
//    shim is active there (the shim exports oomh_shim_active; a process it was not preloaded into has no such
//    symbol, and one where it only forwards, OOMH_DISABLE, answers 0). The first time such a process reports
//    device memory (a step's or a memory event's `allocated` or `reserved`, or torch's reserved peak at its
//    exit) it writes an `outside_shim` event with its command. Sealed like every line (Note [Sealed event
//    lines] in include/oomharness/event_seal.h), so the job cannot write one for another process or take one
//    back. This is the way on the virtual device, whose segments the probe's process asks of the driver
//    double: the shim sees them only where it is preloaded. A pid comparison would not do: `env -u
//    LD_PRELOAD python train.py` execs python in the pid whose `env` the shim started in.
//  - From the log, as a cross-check (untested.cpp's unshimmed_pid): every process the shim starts in writes a
//    sealed `shim_start`, so a probe that reports device memory from a pid no shim ever started in was not under
//    it, whatever oomh_shim_active answered there (a job could preload a fake one).
//  - From the driver, on a GPU: the runner asks NVML (loaded with dlopen, so neither the build nor a machine
//    without a GPU needs it) for the processes using each GPU, every kNvmlPollSeconds while attempts run. A
//    process is the attempt's when its session is the attempt's, or its environment names the attempt's
//    control block, or the attempt's process is among its ancestors; the shim is active in it when
//    /proc/<pid>/maps holds the shim's library and a slot of the control block holds its pid (the shim
//    registers every process it starts in, by the pid the runner sees: Note [Pids the runner can see]).
//    One without both is written as an `outside_shim` event of the runner (via "nvml"). This catches a
//    process with neither the shim nor the probe (a C++ program, a static binary).
// What is still possible: a process that lives less than one NVML poll between two polls; one that leaves
// the job's session, clears OOMH_CONTROL from its environment and is orphaned (it is then no process of the
// attempt that the runner can name); on the virtual device, a process with neither the shim nor the probe
// that asks the driver double itself; and where NVML reports pids of another PID namespace (a container
// that does not share the host's), the pids that name no process of the job are not seen at all.

#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

#include "oomharness/control_block.h"

namespace oomh::exec {

inline constexpr double kNvmlPollSeconds = 0.5;

// A process NVML lists on a GPU: its pid as the runner sees it, and the bytes NVML says it uses (0: unknown).
struct GpuProcess {
  int pid = 0;
  uint64_t used = 0;
};

// NVML's running compute processes, through `library` opened with dlopen (OOMH_NVML_LIBRARY, else
// libnvidia-ml.so.1). Where the library or a GPU is missing, available() is false and now() is empty.
class GpuProcessList {
 public:
  explicit GpuProcessList(const std::string& library);
  ~GpuProcessList();
  GpuProcessList(const GpuProcessList&) = delete;
  GpuProcessList& operator=(const GpuProcessList&) = delete;
  bool available() const { return devices_ > 0; }
  std::vector<GpuProcess> now() const;

 private:
  void* library_ = nullptr;
  unsigned devices_ = 0;
  void* handle_by_index_ = nullptr;
  void* processes_ = nullptr;  // nvmlDeviceGetComputeRunningProcesses_v3, _v2 or the first version
  bool info_v2_ = false;       // whether processes_ fills the second layout of nvmlProcessInfo_t
};

// What the runner knows of one attempt to judge a process.
struct AttemptProcesses {
  pid_t leader = -1;            // the attempt's process: its session's id and the root of its tree
  std::string control;          // OOMH_CONTROL as the attempt's processes have it
  const ControlBlock* cb = nullptr;  // the slots of the processes the shim started in
  std::string shim_file;        // the shim library's file name, as /proc/<pid>/maps shows it
};

// Whether `pid` is one of the attempt's processes.
bool belongs_to(pid_t pid, const AttemptProcesses& a);
// Whether the shim is active in `pid`: its library mapped there and its pid in a slot of the block. "" when
// it is; else "absent" (not mapped) or "inactive" (mapped, not registered: OOMH_DISABLE).
std::string shim_state(pid_t pid, const AttemptProcesses& a);
// Its command line, arguments joined by spaces ("" when unreadable).
std::string command_of(pid_t pid);

}  // namespace oomh::exec
