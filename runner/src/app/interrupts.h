#pragma once
// Note [Interrupting a run]
// SIGINT and SIGTERM during a run stop it the way Ctrl-C stops pytest: the handler only calls
// Backend::interrupt() (async-signal-safe: it stops the jobs and starts no new one), run() returns the
// outcomes so far, and the results are still judged and written, the stopped jobs marked interrupted; the
// command then exits 2. The handlers are in place only while jobs run. The Slurm agent installs the same
// handlers around its one job: `scancel` sends it SIGTERM, and it stops its job's process group.
// SIGINT or SIGTERM sent by a process in a running job's session is not an interrupt: Note [Signals a job
// may send] in exec/signals.h.

#include <csignal>

#include "oomharness/runner/backend.h"

namespace oomh::app {

class InterruptHandlers {
 public:
  explicit InterruptHandlers(Backend& backend);
  ~InterruptHandlers();
  InterruptHandlers(const InterruptHandlers&) = delete;
  InterruptHandlers& operator=(const InterruptHandlers&) = delete;
  // Whether a signal came while the handlers were in place.
  static bool signalled();

 private:
  struct sigaction old_int_{}, old_term_{};
};

// Note [Interrupting a search].
class SearchInterrupts {
 public:
  SearchInterrupts();
  ~SearchInterrupts();
  SearchInterrupts(const SearchInterrupts&) = delete;
  SearchInterrupts& operator=(const SearchInterrupts&) = delete;
  // Whether SIGINT or SIGTERM came since the search began, during a run or between two.
  static bool signalled();

 private:
  struct sigaction old_int_{}, old_term_{};
};

}  // namespace oomh::app
