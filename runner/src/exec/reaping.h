#pragma once
// The runner's view of processes, for Note [Nothing left behind] in job_runner_reaping.cpp: its children
// (it is a child subreaper), a process group waited for, an orphan killed and reaped, a process's
// environment read, and the control blocks of dead runners removed.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace oomh::exec {

// Waits (briefly) until no process of group `pgid` is left, reaping those that are our children.
void wait_group_gone(pid_t pgid);

// The value of `name` in the environment process `pid` started with; nullopt when unreadable or unset.
std::optional<std::string> environment_value(pid_t pid, std::string_view name);

// The runner's children, from /proc/self/task/*/children (each thread's), else a scan of /proc.
std::vector<pid_t> runner_children();

// Kills `pid` (and its process group when it leads one) and reaps it.
void kill_and_reap(pid_t pid);

// Removes /dev/shm/oomh-<pid>-... and /dev/shm/oomh-solo-<pid> blocks whose process is gone (a runner or a
// shim killed before it could unlink them).
void remove_stale_blocks();

}  // namespace oomh::exec
