// Note [Signals a job may send] in signals.h.

#include "exec/signals.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <unistd.h>

namespace oomh::exec {

namespace {

constexpr size_t kKept = 4096;      // signals recorded with their sender per process; later ones are counted
constexpr size_t kSessions = 4096;  // running jobs' sessions (more jobs at once than this: not attributed)

// Append-only slots written from handlers (any thread): a slot is claimed with fetch_add and published
// with `ready`; the taker reads them in order and stops at the first not yet published. Nothing is ever
// reused, so no handler and taker can meet on one slot.
struct Slot {
  std::atomic<int> signo{0};
  std::atomic<pid_t> pid{0};
  std::atomic<pid_t> sid{-1};
  std::atomic<bool> ready{false};
};
Slot g_slots[kKept];
std::atomic<size_t> g_head{0};  // next slot to claim
size_t g_tail = 0;              // next slot to take (the taker's only)
std::atomic<size_t> g_dropped{0};
std::atomic<pid_t> g_sessions[kSessions];
std::atomic<bool> g_installed{false};
// What each signal did before the guards: a real fault goes back to it (a sanitizer's or a crash reporter's
// handler, or the default), so the guards change nothing for the runner's own crashes.
struct sigaction g_before[NSIG];

extern "C" void on_stray_signal(int signo, siginfo_t* info, void*) {
  const int saved = errno;
  const pid_t self = getpid();
  const bool sent = info && info->si_code <= 0;  // SI_USER, SI_QUEUE, SI_TKILL: another process's kill()
  const bool from_kernel = info && info->si_code == SI_KERNEL;
  if (!sent && !from_kernel && signo != SIGPIPE) {
    // A real fault of the runner itself (SEGV, BUS, ...): what was there before the guards, when the
    // handler returns and the instruction runs again.
    sigaction(signo, &g_before[signo], nullptr);
    errno = saved;
    return;
  }
  if (sent && info->si_pid == self) {
    // The runner's own raise()/abort(): not a job's doing.
    if (signo == SIGABRT) {
      sigaction(SIGABRT, &g_before[SIGABRT], nullptr);
      raise(SIGABRT);
    }
    errno = saved;
    return;
  }
  if (signo == SIGPIPE && !sent) {  // a write to a closed pipe: EPIPE says it
    errno = saved;
    return;
  }
  const pid_t pid = sent ? info->si_pid : 0;
  // getsid is one system call (glibc adds nothing around it), safe here in practice though POSIX does not
  // list it.
  record_stray_signal(signo, pid, pid > 0 ? getsid(pid) : -1);
  errno = saved;
}

}  // namespace

void install_signal_guards() {
  if (g_installed.exchange(true)) return;
  struct sigaction sa{};
  sa.sa_sigaction = on_stray_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  for (int sig : {SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGPIPE, SIGQUIT, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO,
                  SIGPWR, SIGSTKFLT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT})
    sigaction(sig, &sa, &g_before[sig]);
}

void record_stray_signal(int signo, pid_t pid, pid_t sid) noexcept {
  const size_t n = g_head.fetch_add(1, std::memory_order_acq_rel);
  if (n >= kKept) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Slot& s = g_slots[n];
  s.signo.store(signo, std::memory_order_relaxed);
  s.pid.store(pid, std::memory_order_relaxed);
  s.sid.store(sid, std::memory_order_relaxed);
  s.ready.store(true, std::memory_order_release);
}

std::vector<StraySignal> take_stray_signals() {
  std::vector<StraySignal> out;
  const size_t head = std::min(g_head.load(std::memory_order_acquire), kKept);
  // A slot claimed but not yet published (its handler was interrupted mid-write) waits for the next take.
  for (; g_tail < head && g_slots[g_tail].ready.load(std::memory_order_acquire); ++g_tail) {
    const Slot& s = g_slots[g_tail];
    out.push_back({s.signo.load(std::memory_order_relaxed), s.pid.load(std::memory_order_relaxed),
                   s.sid.load(std::memory_order_relaxed)});
  }
  return out;
}

size_t stray_signals_dropped() { return g_dropped.load(std::memory_order_relaxed); }

namespace {
std::vector<StraySignal> g_set_aside;  // the runner's thread only
}

void set_aside(std::vector<StraySignal> signals) {
  g_set_aside.insert(g_set_aside.end(), signals.begin(), signals.end());
}

std::vector<StraySignal> take_set_aside() {
  std::vector<StraySignal> out;
  out.swap(g_set_aside);
  return out;
}

void register_job_session(pid_t sid) {
  if (sid <= 0) return;
  for (auto& slot : g_sessions) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, sid)) return;
  }
}

void forget_job_session(pid_t sid) {
  if (sid <= 0) return;
  for (auto& slot : g_sessions) {
    pid_t expected = sid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

bool is_job_session(pid_t sid) noexcept {
  if (sid <= 0) return false;
  for (const auto& slot : g_sessions)
    if (slot.load(std::memory_order_relaxed) == sid) return true;
  return false;
}

std::string signal_name(int signo) {
  static const std::pair<int, const char*> names[] = {
      {SIGHUP, "SIGHUP"},     {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"},   {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"},   {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},     {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"},   {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"},   {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},   {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"},   {SIGSTKFLT, "SIGSTKFLT"},
      {SIGCHLD, "SIGCHLD"},   {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"},   {SIGTSTP, "SIGTSTP"},
      {SIGTTIN, "SIGTTIN"},   {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},     {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"},   {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"},   {SIGWINCH, "SIGWINCH"},
      {SIGIO, "SIGIO"},       {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"}};
  for (const auto& [n, name] : names)
    if (n == signo) return name;
  return "signal " + std::to_string(signo);
}

std::string stray_signal_text(const StraySignal& s) {
  const std::string from = s.pid > 0 ? " (from pid " + std::to_string(s.pid) + ")" : " (from the kernel)";
  return "the job sent " + signal_name(s.signo) + " to the runner" + from +
         "; the runner ignored it and went on (a job cannot stop a run by signalling the runner)";
}

}  // namespace oomh::exec
