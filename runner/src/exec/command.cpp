// A child process with a time limit: command.h.

#include "oomharness/runner/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
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

SpawnResult spawn_and_wait(const std::vector<std::string>& argv, double timeout_seconds, const SpawnOptions& options) {
  SpawnResult r;
  if (argv.empty()) {
    r.start_error = "no command";
    return r;
  }
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0 || (options.keep_stderr && pipe2(err, O_CLOEXEC) != 0)) {
    r.start_error = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) close(fd);
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  if (options.keep_stderr) posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  else posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (options.own_process_group) {
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  }
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  if (options.env) {
    for (const auto& e : *options.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  pid_t pid = -1;
  int rc = 0;
  {
    // Registered before anyone can see it: is_command_child waits for the spawn.
    std::lock_guard<std::mutex> lock(g_children_mutex);
    // posix_spawnp looks argv[0] up in the caller's PATH (the PATH of `env` too, where it is this one's).
    rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), options.env ? envp.data() : environ);
    if (rc == 0) g_children.insert(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  if (err[1] >= 0) close(err[1]);
  if (rc != 0) {
    r.start_error = "cannot run " + argv[0] + ": " + std::strerror(rc);
    close(out[0]);
    if (err[0] >= 0) close(err[0]);
    return r;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = err[0] >= 0 ? 2 : 1;
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        std::string& to = i == 0 ? r.out : r.err;
        if (to.size() < options.max_output) to.append(buf, std::min(static_cast<size_t>(got), options.max_output - to.size()));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  {
    std::lock_guard<std::mutex> lock(g_children_mutex);
    g_children.erase(pid);
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

CommandOutput run_command(const std::vector<std::string>& argv, double timeout_seconds) {
  SpawnOptions o;
  o.max_output = 1u << 20;
  SpawnResult s = spawn_and_wait(argv, timeout_seconds, o);
  CommandOutput result;
  result.timed_out = s.timed_out;
  result.out = std::move(s.out);
  if (!s.timed_out && s.exit_code) result.exit_code = *s.exit_code;
  return result;
}

}  // namespace oomh
