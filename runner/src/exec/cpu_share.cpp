// How many CPU threads each job may start: Note [CPU share of packed jobs] in cpu_share.h.

#include "exec/cpu_share.h"

#include <algorithm>
#include <charconv>

#include <sched.h>

namespace oomh::exec {

std::optional<ThreadsPerJob> parse_threads_per_job(const std::string& text) {
  if (text == "auto") return ThreadsPerJob{ThreadsPerJob::Mode::automatic, 0};
  if (text == "off") return ThreadsPerJob{ThreadsPerJob::Mode::off, 0};
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1) return std::nullopt;
  return ThreadsPerJob{ThreadsPerJob::Mode::fixed, n};
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

std::optional<int> threads_for_each_job(const ThreadsPerJob& setting, int concurrency, int cpus) {
  switch (setting.mode) {
    case ThreadsPerJob::Mode::off: return std::nullopt;
    case ThreadsPerJob::Mode::fixed: return setting.threads;
    case ThreadsPerJob::Mode::automatic:
      if (concurrency <= 1) return std::nullopt;  // one job at a time: it may have every core
      return std::max(1, cpus / concurrency);
  }
  return std::nullopt;
}

}  // namespace oomh::exec
