// Giving back what the job's dead processes held: Note [Bytes of dead processes] in dead_processes.h.

#include "exec/dead_processes.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

namespace oomh::exec {

bool process_gone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  // Alive or a zombie: /proc/PID/stat's third field is its state ("Z" for a zombie). The command name
  // in parentheses may hold spaces or parentheses of its own: the state follows the last ')'.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (!f) return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  return close && close[1] == ' ' && close[2] == 'Z';
}

std::vector<Reclaimed> reclaim_dead_processes(ControlBlock& cb) {
  std::vector<Reclaimed> out;
  for (ProcessSlot& slot : cb.processes) {
    int pid = slot.pid.load(std::memory_order_relaxed);
    if (pid <= 0) continue;
    bool holds = false;
    for (const auto& h : slot.held) holds = holds || h.load(std::memory_order_relaxed) != 0;
    if (!holds || !process_gone(pid)) continue;
    for (int d = 0; d < kMaxDevices; ++d) {
      uint64_t bytes = slot.held[d].exchange(0, std::memory_order_relaxed);
      if (bytes == 0) continue;
      std::atomic<uint64_t>& held = cb.devices[d].held;
      uint64_t before = held.fetch_sub(bytes, std::memory_order_relaxed);
      if (before < bytes) held.fetch_add(bytes - before, std::memory_order_relaxed);  // never below zero
      out.push_back({pid, d, bytes});
    }
  }
  return out;
}

}  // namespace oomh::exec
