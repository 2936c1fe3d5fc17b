#pragma once
// Note [Pids the runner can see]
// The runner starts its jobs in a PID namespace of their own (Note [A runner its jobs cannot signal] in
// runner/src/exec/job_namespace.h): there getpid() counts from 2, while the runner, the driver (NVML's
// per-process figures) and /proc, which the job shares with the runner, name each process by its pid in the
// runner's namespace. What the shim writes for the runner to read (its ProcessSlot's pid, which the runner
// checks with kill(pid, 0) to give back the bytes of a dead process) and what it compares with NVML's
// figures must be that pid: the first number of /proc/self/status's NSpid line, the pid in the namespace of
// the /proc the process sees. Event lines keep getpid(): the shim's and the probe's agree on it, and the
// trace pairs them by it. Without a namespace both are the same number.
//
// Async-signal-safe (open, read, close; no allocation): the shim calls it at start-up and in a fork child.

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

namespace oomh {

struct ProcessIds {
  int32_t pid = 0;   // this process, as /proc names it
  int32_t ppid = 0;  // its parent, likewise (0: outside the namespace /proc shows)
};

inline ProcessIds process_ids() noexcept {
  ProcessIds ids{static_cast<int32_t>(getpid()), static_cast<int32_t>(getppid())};
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ids;
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return ids;
  buf[n] = '\0';
  const auto field = [&](const char* name, int32_t& out) {
    const char* at = std::strstr(buf, name);
    if (!at) return;
    at += std::strlen(name);
    char* end = nullptr;
    const long v = std::strtol(at, &end, 10);
    if (end != at && v >= 0) out = static_cast<int32_t>(v);
  };
  field("\nPPid:", ids.ppid);
  field("\nNSpid:", ids.pid);
  return ids;
}

}  // namespace oomh
