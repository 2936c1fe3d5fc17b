#pragma once
// How many CPU threads each job may start when several run at once.
//
// Note [CPU share of packed jobs]
// PyTorch (through OpenMP) starts one intra-op thread per core in every process, and idle OpenMP threads
// spin before they sleep. Eight such jobs on a 16-core host run 128 busy threads on 16 cores: measured on
// the H100 host (16 cores, PyTorch 2.11), a small MLP job's training step took 4.4 ms alone and 53–102 ms
// with eight jobs at once; with OMP_NUM_THREADS=2 in each job, 4.2–4.9 ms. The GPU was not the bottleneck:
// eight processes time-sliced on it at no visible cost. So when the runner runs several jobs at once it
// gives each its share of the cores the runner may use, as torchrun does for its ranks, by setting
// OMP_NUM_THREADS in the job's environment. A job whose own `env` sets OMP_NUM_THREADS, or a runner whose
// environment already has it, keeps that value: the person who set it knows the job.

#include <optional>
#include <string>

#include "oomharness/runner/job_runner.h"

namespace oomh::exec {

// Parses "auto", "off" or a positive number; nullopt for anything else.
std::optional<ThreadsPerJob> parse_threads_per_job(const std::string& text);

// The CPUs this process may run on (sched_getaffinity; at least 1).
int usable_cpus();

// OMP_NUM_THREADS for each job when at most `concurrency` jobs run at once on `cpus` CPUs; nullopt: leave
// the job's thread count alone.
std::optional<int> threads_for_each_job(const ThreadsPerJob& setting, int concurrency, int cpus);

}  // namespace oomh::exec
