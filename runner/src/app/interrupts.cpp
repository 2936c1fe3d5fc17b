// Note [Interrupting a run] in interrupts.h.

#include "app/interrupts.h"

#include <atomic>
#include <cerrno>

#include <unistd.h>

#include "exec/signals.h"

namespace oomh::app {

namespace {
std::atomic<Backend*> g_backend{nullptr};
volatile sig_atomic_t g_signalled = 0;

extern "C" void on_interrupt_signal(int signo, siginfo_t* info, void*) {
  // Note [Signals a job may send] in exec/signals.h: a job's `kill -TERM $PPID` does not stop the run.
  if (info && info->si_code <= 0 && info->si_pid > 0 && info->si_pid != getpid()) {
    const int saved = errno;
    const pid_t sid = getsid(info->si_pid);
    if (exec::is_job_session(sid)) {
      exec::record_stray_signal(signo, info->si_pid, sid);
      errno = saved;
      return;
    }
    errno = saved;
  }
  g_signalled = 1;
  if (Backend* b = g_backend.load()) b->interrupt();
}
}  // namespace

InterruptHandlers::InterruptHandlers(Backend& backend) {
  g_signalled = 0;
  g_backend.store(&backend);
  struct sigaction sa{};
  sa.sa_sigaction = on_interrupt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

InterruptHandlers::~InterruptHandlers() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_backend.store(nullptr);
}

bool InterruptHandlers::signalled() { return g_signalled != 0; }

}  // namespace oomh::app
