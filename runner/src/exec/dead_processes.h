#pragma once
// Giving back what the job's dead processes held.
//
// Note [Bytes of dead processes]
// A process of the job gives its bytes back to the job's counters when it exits (the shim's destructor:
// Engine::finish). One that is killed (SIGKILL, a crash) cannot: its share stays in its ProcessSlot and
// in the job's DeviceCounters::held, so a cap would stay used by memory that the driver took back when
// the process died. The runner's sampler therefore looks, at every sample, at each slot that still holds
// bytes and whose process is gone (no such pid, or a zombie waiting to be reaped: its memory is already
// freed), and gives those bytes back: the slot's share is taken with one exchange, so a process that
// exits normally at the same moment and the runner never both give the same bytes back.

#include <cstdint>
#include <vector>

#include "oomharness/control_block.h"

namespace oomh::exec {

struct Reclaimed {
  int pid = 0;
  int device = 0;
  uint64_t bytes = 0;
};

// Gives back the bytes of every slot whose process is gone; returns what it gave back.
std::vector<Reclaimed> reclaim_dead_processes(ControlBlock& cb);

// True when `pid` no longer runs: no such process, or a zombie.
bool process_gone(int pid);

}  // namespace oomh::exec
