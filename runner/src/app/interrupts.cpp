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
volatile sig_atomic_t g_search_signalled = 0;  // Note [Interrupting a search]: reset only when a search begins

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
  g_search_signalled = 1;
  if (Backend* b = g_backend.load()) b->interrupt();
}

void install(struct sigaction& old_int, struct sigaction& old_term) {
  struct sigaction sa{};
  sa.sa_sigaction = on_interrupt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
}
}  // namespace

InterruptHandlers::InterruptHandlers(Backend& backend) {
  g_signalled = 0;
  g_backend.store(&backend);
  install(old_int_, old_term_);
}

InterruptHandlers::~InterruptHandlers() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_backend.store(nullptr);
}

bool InterruptHandlers::signalled() { return g_signalled != 0; }

SearchInterrupts::SearchInterrupts() {
  g_search_signalled = 0;
  install(old_int_, old_term_);
}

SearchInterrupts::~SearchInterrupts() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

bool SearchInterrupts::signalled() { return g_search_signalled != 0; }

}  // namespace oomh::app
