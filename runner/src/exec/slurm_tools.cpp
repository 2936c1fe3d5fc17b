// Slurm's command-line tools (slurm_tools.h).

#include "exec/slurm_tools.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

extern char** environ;

namespace oomh::exec {

std::string ToolResult::why() const {
  if (!start_error.empty()) return start_error;
  if (timed_out) return "did not answer in time";
  std::string text = err.empty() ? out : err;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return "exited with code " + std::to_string(exit_code);
  return text;
}

std::vector<std::string> tool_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0) continue;
    env.emplace_back(*e);
  }
  return env;
}

ToolResult run_tool(const std::vector<std::string>& argv, const std::vector<std::string>& env, double timeout_seconds) {
  ToolResult r;
  if (argv.empty()) {
    r.start_error = "no command";
    return r;
  }
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    r.start_error = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) close(fd);
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // posix_spawnp looks argv[0] up in the caller's PATH, which is the PATH of `env` too (tool_environment).
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    r.start_error = "cannot run " + argv[0] + ": " + std::strerror(rc);
    close(out[0]);
    close(err[0]);
    return r;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
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
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
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
  if (!r.timed_out) r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::map<std::string, QueueEntry> parse_squeue(const std::string& text) {
  std::map<std::string, QueueEntry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find('|');
    if (a == std::string::npos) continue;
    size_t b = line.find('|', a + 1);
    std::string id = line.substr(0, a);
    QueueEntry e;
    e.state = line.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
    if (b != std::string::npos) e.reason = line.substr(b + 1);
    // `CANCELLED by 0` in scontrol; squeue's %T is one word, but be tolerant.
    if (size_t sp = e.state.find(' '); sp != std::string::npos) e.state.resize(sp);
    out[id] = e;
  }
  return out;
}

bool slurm_state_ended(const std::string& state) {
  static const char* const ended[] = {"COMPLETED", "FAILED",    "CANCELLED", "TIMEOUT",  "NODE_FAIL", "OUT_OF_MEMORY",
                                      "PREEMPTED", "BOOT_FAIL", "DEADLINE",  "REVOKED", "SPECIAL_EXIT"};
  for (const char* s : ended)
    if (state == s) return true;
  return false;
}

std::map<std::string, std::string> parse_scontrol_job(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    out.emplace(word.substr(0, eq), word.substr(eq + 1));
  }
  return out;
}

std::string slurm_state_text(const std::string& state) {
  if (state == "CANCELLED") return "Slurm cancelled it (CANCELLED)";
  if (state == "TIMEOUT") return "Slurm's time limit stopped it (TIMEOUT)";
  if (state == "NODE_FAIL") return "its node failed (NODE_FAIL)";
  if (state == "BOOT_FAIL") return "its node failed to boot (BOOT_FAIL)";
  if (state == "OUT_OF_MEMORY") return "Slurm stopped it for using more host memory than it asked for (OUT_OF_MEMORY)";
  if (state == "PREEMPTED") return "Slurm preempted it (PREEMPTED)";
  if (state == "DEADLINE") return "it missed its deadline (DEADLINE)";
  if (state == "FAILED") return "its batch script failed (FAILED)";
  if (state == "COMPLETED") return "its batch script exited 0 (COMPLETED)";
  if (state.empty()) return "Slurm no longer knows it";
  return "it ended in state " + state;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

}  // namespace oomh::exec
