// Note [A runner its jobs cannot signal] in job_namespace.h.

#include "exec/job_namespace.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace oomh::exec {

namespace {

// What follows runs in a child of a runner that may have threads: async-signal-safe calls only.

// Closes every descriptor but `keep_a` and `keep_b`: a helper holds no pipe of a job's, nor the terminal.
void close_all_but(int keep_a, int keep_b) {
  for (int fd = 0; fd < 4096; ++fd)
    if (fd != keep_a && fd != keep_b) ::close(fd);
#ifdef SYS_close_range
  ::syscall(SYS_close_range, 4096u, ~0u, 0u);
#endif
}

extern "C" void on_child(int) {}

// The keeper: init of the run's namespace. Reaps whatever is re-parented to it, until the runner is gone
// (EOF on `alive`, or the death signal).
[[noreturn]] void keeper_main(int alive) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::setsid();
  close_all_but(alive, -1);
  struct sigaction sa {};
  sa.sa_handler = on_child;  // a handler, so that SIGCHLD wakes ppoll (pid 1 ignores signals it does not handle)
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGCHLD, &sa, nullptr);
  sigset_t blocked, during;
  ::sigemptyset(&blocked);
  ::sigaddset(&blocked, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &blocked, &during);
  ::sigdelset(&during, SIGCHLD);
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {}
    pollfd p{alive, POLLIN, 0};
    const int n = ::ppoll(&p, 1, nullptr, &during);
    if (n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) ::_exit(0);
  }
}

// 'T' (stopped by a signal) in /proc/<pid>/stat; never 't' (a debugger's stop, which is not ours to end).
bool stopped(pid_t pid) {
  char path[40];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' && close_paren[2] == 'T';
}

// The watchdog: continues the runner when a job stopped it, and says so on `report`.
[[noreturn]] void watchdog_main(pid_t runner, int alive, int report) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::setsid();
  close_all_but(alive, report);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (;;) {
    pollfd p{alive, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) ::_exit(0);  // the runner is gone
    if (stopped(runner) && ::kill(runner, SIGCONT) == 0) {
      const char byte = 1;
      [[maybe_unused]] ssize_t w = ::write(report, &byte, 1);
    }
  }
}

bool make_pipe(int fds[2], int flags) { return ::pipe2(fds, O_CLOEXEC | flags) == 0; }

void close_pipe(int fds[2]) {
  for (int i = 0; i < 2; ++i)
    if (fds[i] >= 0) {
      ::close(fds[i]);
      fds[i] = -1;
    }
}

}  // namespace

bool nvidia_device_present() { return ::access("/dev/nvidiactl", F_OK) == 0; }

JobNamespace::JobNamespace(bool real_driver) {
  own_ns_ = ::open("/proc/thread-self/ns/pid", O_RDONLY | O_CLOEXEC);
  const char* choice = std::getenv("OOMH_PID_NAMESPACE");
  if (choice && std::string_view(choice) == "0") {
    reason_ = "OOMH_PID_NAMESPACE=0";
    start_watchdog();
    return;
  }
  if (real_driver && nvidia_device_present()) {
    reason_ = "the jobs call the real CUDA driver, whose cuInit fails inside a PID namespace (error 304)";
    start_watchdog();
    return;
  }
  enter();
  if (!isolated()) start_watchdog();
}

void JobNamespace::enter() {
  if (own_ns_ < 0) {
    reason_ = std::string("cannot open /proc/thread-self/ns/pid: ") + std::strerror(errno);
    return;
  }
  if (::unshare(CLONE_NEWPID) != 0) {
    reason_ = errno == EPERM ? "unshare(CLONE_NEWPID) needs CAP_SYS_ADMIN (the runner is not root)"
                             : std::string("unshare(CLONE_NEWPID): ") + std::strerror(errno);
    return;
  }
  if (!make_pipe(alive_, 0)) {
    reason_ = std::string("pipe: ") + std::strerror(errno);
    ::setns(own_ns_, CLONE_NEWPID);
    return;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(alive_[1]);
    keeper_main(alive_[0]);
  }
  ::close(alive_[0]);
  alive_[0] = -1;
  if (pid < 0) {
    reason_ = std::string("fork: ") + std::strerror(errno);
    close_pipe(alive_);
    ::setns(own_ns_, CLONE_NEWPID);
    return;
  }
  keeper_ = pid;
  reason_.clear();
}

void JobNamespace::start_watchdog() {
  if (!make_pipe(alive_, 0) || !make_pipe(report_, O_NONBLOCK)) {
    close_pipe(alive_);
    close_pipe(report_);
    return;
  }
  const pid_t runner = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) watchdog_main(runner, alive_[0], report_[1]);
  ::close(alive_[0]);
  alive_[0] = -1;
  ::close(report_[1]);
  report_[1] = -1;
  if (pid < 0) {
    close_pipe(alive_);
    close_pipe(report_);
    return;
  }
  watchdog_ = pid;
}

void JobNamespace::stop_keeper() {
  close_pipe(alive_);
  if (keeper_ > 0) {
    ::kill(keeper_, SIGKILL);
    ::waitpid(keeper_, nullptr, 0);
    keeper_ = -1;
  }
  if (own_ns_ >= 0) ::setns(own_ns_, CLONE_NEWPID);
}

void JobNamespace::ensure() {
  if (keeper_ <= 0) return;
  int status = 0;
  if (::waitpid(keeper_, &status, WNOHANG) != keeper_) return;
  keeper_ = -1;  // reaped: stop_keeper must not wait for it
  stop_keeper();
  enter();
  if (!isolated()) start_watchdog();
}

JobNamespace::~JobNamespace() {
  stop_keeper();
  if (watchdog_ > 0) {
    ::kill(watchdog_, SIGKILL);
    ::waitpid(watchdog_, nullptr, 0);
  }
  close_pipe(report_);
  if (own_ns_ >= 0) ::close(own_ns_);
}

std::vector<pid_t> JobNamespace::orphans() const {
  std::vector<pid_t> out;
  if (keeper_ <= 0) return out;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/task/%d/children", static_cast<int>(keeper_), static_cast<int>(keeper_));
  if (FILE* f = std::fopen(path, "re")) {
    long pid = 0;
    while (std::fscanf(f, "%ld", &pid) == 1) out.push_back(static_cast<pid_t>(pid));
    std::fclose(f);
  }
  return out;
}

void JobNamespace::check_watchdog() const {
  if (watchdog_ > 0 && stopped(watchdog_)) ::kill(watchdog_, SIGCONT);
}

pid_t pid_inside(pid_t pid) {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%d/status", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return pid;
  char line[256];
  pid_t inside = pid;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "NSpid:", 6) != 0) continue;
    char* at = line + 6;
    for (char* end = nullptr;; at = end) {
      const long v = std::strtol(at, &end, 10);
      if (end == at) break;
      inside = static_cast<pid_t>(v);
    }
    break;
  }
  std::fclose(f);
  return inside;
}

}  // namespace oomh::exec
