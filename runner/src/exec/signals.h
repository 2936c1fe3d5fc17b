#pragma once
// Note [Signals a job may send]
// A job is code the user runs, under the user's own uid: it can send the runner any signal by pid
// (`kill -HUP $PPID`). Each job runs in its own session (setsid, Note [Nothing left behind] in
// job_runner_reaping.cpp), so it cannot address the runner by group or through the terminal; what it can still do
// by pid is handled here, once for the whole process (install_signal_guards, called by app_main):
//   - HUP, USR1, USR2, ALRM, PIPE, QUIT, XCPU, XFSZ, VTALRM, PROF, IO, PWR, STKFLT, and SEGV, BUS, FPE,
//     ILL, TRAP, SYS, ABRT when sent by another process (si_code <= 0): recorded and ignored. A real fault
//     of the runner (si_code > 0) or its own abort() goes to whatever handled it before the guards (a
//     sanitizer's handler, or the default action), as if they were not there.
//   - PIPE from the kernel (a write to a closed pipe, `oomharness run ... | head -1`) is the runner's own:
//     the write fails with EPIPE, printing ends and the run goes on (Note [A closed pipe] in cli.cpp).
//   - INT and TERM (Note [Interrupting a run] in app/interrupts.h) interrupt the run, unless the sender is
//     in a running job's session: then they are recorded and ignored like the others.
// What was recorded is taken by the job runner (take_stray_signals) on each sample and when an attempt
// ends, and put in the attempt whose session sent it as a warning event, so the job's result says what it
// tried; one sent from outside every job's session is left for the caller to say on stderr.
// Not fixable here: SIGKILL and SIGSTOP cannot be caught. A job that sends them by pid ends or stops the
// runner (a runner killed leaves no process behind, Note [Nothing left behind]); only another uid or a
// PID namespace keeps a job from signalling the runner at all (docs/cli.md says so).

#include <sys/types.h>

#include <string>
#include <vector>

namespace oomh::exec {

struct StraySignal {
  int signo = 0;
  pid_t pid = 0;   // the sender (0: the kernel, e.g. a terminal's hangup)
  pid_t sid = -1;  // the sender's session when the signal came (-1: unknown, it was gone)
};

// Installs the recording handlers above (idempotent). INT and TERM are left to InterruptHandlers.
void install_signal_guards();

// The signals recorded since the last call, oldest first. The first 4096 of the process are kept with their
// sender; later ones are only counted (stray_signals_dropped, since the process started).
std::vector<StraySignal> take_stray_signals();
size_t stray_signals_dropped();

// Signals the job runner could not put in a running attempt (sent from outside every job's session, or
// after the job had ended): set aside for the caller, who says them on stderr. Runner's thread only.
void set_aside(std::vector<StraySignal> signals);
std::vector<StraySignal> take_set_aside();

// Sessions of running jobs, for the INT/TERM handlers: a session leader's pid (a job's leader, which
// called setsid). Async-signal-safe to query; register/forget from the runner's thread.
void register_job_session(pid_t sid);
void forget_job_session(pid_t sid);
// Whether `sid` is a registered job session (async-signal-safe).
bool is_job_session(pid_t sid) noexcept;
// Records a signal as stray (async-signal-safe): for the INT/TERM handlers.
void record_stray_signal(int signo, pid_t pid, pid_t sid) noexcept;

// "SIGHUP" for SIGHUP, "signal 42" for others without a name.
std::string signal_name(int signo);
// The sentence a job's result carries: "the job sent SIGHUP to the runner (from pid 123); the runner
// ignored it and went on".
std::string stray_signal_text(const StraySignal& s);

}  // namespace oomh::exec
