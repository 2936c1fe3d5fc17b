// Note [Interrupting a run] in interrupts.h.

#include "app/interrupts.h"

#include <atomic>

namespace oomh::app {

namespace {
std::atomic<Backend*> g_backend{nullptr};
volatile sig_atomic_t g_signalled = 0;

extern "C" void on_interrupt_signal(int) {
  g_signalled = 1;
  if (Backend* b = g_backend.load()) b->interrupt();
}
}  // namespace

InterruptHandlers::InterruptHandlers(Backend& backend) {
  g_signalled = 0;
  g_backend.store(&backend);
  struct sigaction sa{};
  sa.sa_handler = on_interrupt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
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
