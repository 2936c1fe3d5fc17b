#pragma once
// Note [A runner its jobs cannot signal]
// A job that sends its runner SIGSTOP (`kill -STOP $PPID`) stops it until something sends SIGCONT: no signal
// handler runs for SIGSTOP, and a stopped runner's timeouts never fire (issue 44). Catching signals
// (Note [Signals a job may send] in signals.h) cannot help, so the jobs are kept from addressing the runner
// at all:
//  - Where the kernel allows it (CAP_SYS_ADMIN: a runner started as root, as CI runs it), every process the
//    runner starts during a run lives in a PID namespace of the run's own. The thread that runs the jobs
//    calls unshare(CLONE_NEWPID), which puts the children it forks from then on into a new namespace, and
//    forks the namespace's init first: the keeper, a process of the runner's that does nothing but reap the
//    orphans the jobs leave (they are re-parented to it, not to the runner) and hold the namespace open.
//    Inside, the runner has no pid: a job's $PPID is 0, kill() by any number reaches only processes of the
//    namespace (kill -1 too), pidfd_send_signal on /proc/<runner pid> is refused (the namespace is not an
//    ancestor of the runner's), and the keeper, pid 1 there, takes no signal from inside it that it does not
//    handle (SIGKILL and SIGSTOP included). The jobs of a run share the namespace (the ranks of a job find
//    each other's pids, as NCCL's shared-memory transport wants); they could always signal one another.
//    When the run ends the keeper goes, and the kernel kills whatever is left in the namespace: a process
//    that left its job's group and outlived a runner killed by SIGKILL included (the keeper has
//    PR_SET_PDEATHSIG, and sees the runner's end on a pipe). /proc stays the machine's: a job's getpid()
//    counts from 2 while /proc/self and /proc/<pid> speak the runner's numbers (Note [Pids the runner can
//    see] in include/oomharness/process_ids.h says what the shim does about it).
//  - Not where the jobs call the real CUDA driver (a run without the driver double on a machine with an NVIDIA
//    device, /dev/nvidiactl): inside such a namespace the driver's cuInit fails with CUDA_ERROR_OPERATING_SYSTEM
//    (304, "OS call failed or operation not supported on this OS"), as every job of tests/public/corpus.yaml
//    showed on an H200 (2026-11-28, tests/gpu/run_all.sh public): the driver's view of the process through
//    /proc, which stays the machine's, and getpid() disagree. A GPU run gets the watchdog below, and the
//    report's reason says why. (A mount namespace with the namespace's own /proc would lift this; not done.)
//  - Where it does not (a runner that is not root; or OOMH_PID_NAMESPACE=0), a watchdog: a small process
//    of the runner's, in a session of its own, that looks at the runner every 50 ms and sends it SIGCONT
//    when it finds it stopped, telling the runner, which warns each running attempt. The runner in turn
//    continues a stopped watchdog at each sample. A job can find the watchdog's pid (/proc lists it) and
//    stop both within 50 ms: the watchdog is out of the way of a job's mistake, not out of reach of one
//    that hunts for it. The signals a runner can catch are handled as before (signals.h).

#include <string>
#include <vector>

#include <sys/types.h>

namespace oomh::exec {

class JobNamespace {
 public:
  // Enters the run's namespace on this thread (its later children are born there) and starts the keeper, or
  // starts the watchdog where the namespace cannot be had. `real_driver`: the jobs may call the machine's CUDA
  // driver (no driver double), which does not work inside the namespace where an NVIDIA device is present.
  explicit JobNamespace(bool real_driver);
  // Ends the keeper (the kernel then ends whatever is left in the namespace) or the watchdog, and puts this
  // thread's later children back in the runner's own namespace.
  ~JobNamespace();
  JobNamespace(const JobNamespace&) = delete;
  JobNamespace& operator=(const JobNamespace&) = delete;

  // True when the jobs run in the namespace; else why not (`reason()`), and the watchdog stands in.
  bool isolated() const { return keeper_ > 0; }
  const std::string& reason() const { return reason_; }
  // Before a launch: a keeper that died (killed from outside) takes its namespace with it, and nothing can be
  // born there any more; a new one is made.
  void ensure();
  // The runner's own helpers, which kill_orphans must leave alone.
  bool is_helper(pid_t pid) const { return pid > 0 && (pid == keeper_ || pid == watchdog_); }
  // The keeper's children: the orphans of the jobs (Note [Nothing left behind] in job_runner_reaping.cpp).
  std::vector<pid_t> orphans() const;
  // The watchdog's report pipe (a byte per SIGCONT it sent the runner), -1 without a watchdog.
  int stopped_fd() const { return report_[0]; }
  // Continues a stopped watchdog (called at each sample).
  void check_watchdog() const;

 private:
  void enter();
  void start_watchdog();
  void stop_keeper();

  int own_ns_ = -1;           // this thread's own PID namespace, to come back to
  int alive_[2] = {-1, -1};   // the keeper's and the watchdog's: EOF on [0] when the runner is gone
  int report_[2] = {-1, -1};  // the watchdog's reports
  pid_t keeper_ = -1;
  pid_t watchdog_ = -1;
  std::string reason_;
};

// Whether this machine has an NVIDIA device whose driver a job could call (/dev/nvidiactl exists).
bool nvidia_device_present();

// The pid `pid` (as the runner names it) has in its own, innermost namespace: what a job calls it. `pid`
// itself when unknown.
pid_t pid_inside(pid_t pid);

}  // namespace oomh::exec
