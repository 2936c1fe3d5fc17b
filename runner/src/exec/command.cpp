// A child process with a time limit: command.h.

#include "oomharness/runner/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <set>

extern char** environ;

namespace oomh {

namespace {
std::mutex g_children_mutex;
std::set<int> g_children;  // spawned here and not reaped yet
}  // namespace

bool is_command_child(int pid) {
  std::lock_guard<std::mutex> lock(g_children_mutex);
  return g_children.count(pid) != 0;
}

CommandOutput run_command(const std::vector<std::string>& argv, double timeout_seconds) {
  CommandOutput result;
  if (argv.empty()) return result;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = 0;
  {
    // Registered before anyone can see it: is_command_child waits for the spawn.
    std::lock_guard<std::mutex> lock(g_children_mutex);
    rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    if (rc == 0) g_children.insert(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return result;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = read(pipe_fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (result.out.size() < (1u << 20)) result.out.append(buf, static_cast<size_t>(got));
  }
  close(pipe_fds[0]);
  if (result.timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  {
    std::lock_guard<std::mutex> lock(g_children_mutex);
    g_children.erase(pid);
  }
  if (!result.timed_out && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace oomh
