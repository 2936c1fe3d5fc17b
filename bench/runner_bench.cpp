// The runner's own cost: what JobRunner adds per job over a bare fork/exec, and how fast it ingests event
// logs. A plain timed program (no Google Benchmark): each figure is the median of --repeat runs.
//
//   runner_bench [--jobs N] [--lines N] [--repeat R]
//
// Per job, JobRunner creates the job's directories, a control block (shm_open + mmap), an event log and
// an output log, builds the environment, launches through Boost.Process v2 with two pipes, waits on a
// pidfd, samples, reads the event log back and unlinks the block. The baseline is fork + execve +
// waitpid of the same program with nothing else.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/output.h"
#include "oomharness/events.h"
#include "oomharness/runner/job_runner.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU seconds (user + system) this process has used: on a shared, loaded machine the wall clock mostly
// measures waiting for a core; the runner's CPU time is what it costs by itself.
double cpu_self() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double run_plain(int jobs, const char* program) {
  auto t0 = Clock::now();
  for (int i = 0; i < jobs; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      char* argv[] = {const_cast<char*>(program), nullptr};
      execv(program, argv);
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
  return since(t0);
}

double run_runner(int jobs, const char* program, const std::string& out_dir) {
  std::vector<oomh::JobSpec> specs;
  for (int i = 0; i < jobs; ++i) {
    oomh::JobSpec j;
    j.name = "true-" + std::to_string(i);
    j.argv = {program};
    j.probe = oomh::ProbeMode::none;
    specs.push_back(j);
  }
  oomh::RunOptions o;
  o.jobs = 1;
  o.out_dir = out_dir;
  o.gpu_inventory = std::vector<oomh::GpuInfo>{};
  oomh::JobRunner runner(o);
  auto t0 = Clock::now();
  auto out = runner.run(specs);
  double t = since(t0);
  for (const auto& r : out)
    if (r.trace.attempts.empty() || r.trace.attempts[0].exit_code != 0) {
      std::fprintf(stderr, "runner_bench: job %s did not exit 0: %s\n", r.trace.job.c_str(), r.error.c_str());
      std::exit(1);
    }
  return t;
}

std::string write_event_log(int lines, const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  for (int i = 0; i < lines; ++i) {
    if (i % 10 == 0)
      oomh::events::EventLine("shim", "inject").add("entry", "cuMemAlloc_v2").add("size", uint64_t{1} << 20).add("device", 0)
          .add("rule", "oom-at-5").add("reason", "rule").add("step", i).add("phase", "forward").write_to(fd);
    else
      oomh::events::EventLine("probe", "step").add("step", i).add("batch_size", 64).add("loss", 0.25).add("allocated", uint64_t{1} << 30)
          .write_to(fd);
  }
  close(fd);
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 50, lines = 100000, repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--jobs") jobs = std::atoi(argv[i + 1]);
    else if (a == "--lines") lines = std::atoi(argv[i + 1]);
    else if (a == "--repeat") repeat = std::atoi(argv[i + 1]);
  }
  const char* program = "/bin/true";
  std::string dir = std::filesystem::temp_directory_path() / ("oomh-runner-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);

  std::vector<double> plain, runner, plain_cpu, runner_cpu;
  for (int r = 0; r < repeat; ++r) {
    double c0 = cpu_self();
    plain.push_back(run_plain(jobs, program));
    double c1 = cpu_self();
    runner.push_back(run_runner(jobs, program, dir + "/out"));
    double c2 = cpu_self();
    plain_cpu.push_back(c1 - c0);
    runner_cpu.push_back(c2 - c1);
  }
  double p = median(plain) / jobs * 1e3, q = median(runner) / jobs * 1e3;
  double pc = median(plain_cpu) / jobs * 1e3, qc = median(runner_cpu) / jobs * 1e3;
  std::printf("jobs of /bin/true, jobs=1, %d jobs, median of %d\n", jobs, repeat);
  std::printf("                     wall ms/job   parent CPU ms/job\n");
  std::printf("  fork/exec/wait     %8.3f      %8.3f\n", p, pc);
  std::printf("  JobRunner          %8.3f      %8.3f\n", q, qc);
  std::printf("  added by runner    %8.3f      %8.3f   (wall ratio %.2fx; target <= 5 ms/job added)\n", q - p, qc - pc, q / p);

  std::string log = write_event_log(lines, dir + "/events.jsonl");
  // Note [What the ingestion check expects]
  // The log has one shim `inject` in ten lines and probe `step`s in between. Past kMaxRoutineEvents routine
  // events the reader thins them by design (Note [Thinned event logs] in policies/src/event_log_reader.cpp): every
  // inject is kept (up to kMaxInjectEvents), the steps around each and one in a stride of the others, and
  // every step is counted in the attempt's LogFold. So the check is not "every line comes back as an event"
  // (that expectation predates thinning and failed with "read 65001 events, expected 100000") but: no line
  // is bad or lost, each inject is kept, and kept plus dropped steps are every step written.
  const size_t injects_written = static_cast<size_t>((lines + 9) / 10);
  const size_t steps_written = static_cast<size_t>(lines) - injects_written;
  std::vector<double> ingest;
  size_t kept_steps = 0;
  uint64_t dropped = 0;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    size_t bad = 0;
    std::optional<oomh::LogFold> thinned;
    auto ev = oomh::exec::read_event_log(log, &bad, &thinned);
    ingest.push_back(since(t0));
    size_t injects = 0, steps = 0, warnings = 0, other = 0;
    for (const auto& e : ev) {
      if (e.kind == "inject") ++injects;
      else if (e.kind == "step") ++steps;
      else if (e.kind == "warning") ++warnings;  // the reader says that it thinned, never silently
      else ++other;
    }
    kept_steps = steps;
    dropped = thinned ? thinned->steps_dropped : 0;
    const bool steps_counted = thinned ? thinned->steps == steps_written : steps == steps_written;
    if (bad != 0 || injects != std::min(injects_written, oomh::kMaxInjectEvents) || steps + dropped != steps_written ||
        !steps_counted || other != 0 || warnings != (thinned ? 1u : 0u)) {
      std::fprintf(stderr,
                   "runner_bench: read %zu events (%zu inject, %zu step, %zu other), %zu bad, %llu steps dropped by "
                   "thinning; wrote %zu inject and %zu step lines\n",
                   ev.size(), injects, steps, other, bad, static_cast<unsigned long long>(dropped), injects_written,
                   steps_written);
      return 1;
    }
  }
  double t = median(ingest);
  std::printf("event ingestion: %d lines in %.3f s = %.0f lines/s (%zu steps kept, %llu thinned, every inject kept)\n", lines, t,
              lines / t, kept_steps, static_cast<unsigned long long>(dropped));
  std::filesystem::remove_all(dir);
  return 0;
}
