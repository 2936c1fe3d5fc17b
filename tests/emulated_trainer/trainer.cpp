// The emulated trainer: a training job over the CUDA driver API (the driver double in CI, a real GPU
// elsewhere) whose OOM recovery is chosen by a flag, so that the harness's recovery checks can be tested
// against recovery that works and recovery that is broken in the ways real training code is.
//
// Note [Emulated training step]
// Step s (numbered from 1) at batch B, with b = --bytes-per-sample:
//   forward    activations: B*b bytes
//   backward   gradients:   B*b bytes (activations still held)
//   optimizer  a temporary of b bytes; then --leak-per-step bytes that are never freed
//   eval       every --eval-every steps: activations for 2*B samples, then freed
// Parameters (b bytes) are allocated once at start. Freed blocks go to the allocator's cache
// (device_memory.h). With --like-pytorch the allocator retries a failed allocation once after emptying its
// cache, and a step listed in OOMH_FLUSH_AT_STEPS begins with the cache emptied (without an empty_cache
// event: the code did not ask for it), as the probes do for PyTorch, so its allocations reach the driver.
// The loss is a pure function of the step and the samples seen so far, so a run resumed
// from a checkpoint prints the same losses as one that was never interrupted, and a run that drops samples
// does not.
//
// Output: "step S batch B loss L" on stdout per completed step; the probe (oomharness/probe.hpp) reports
// steps, phases, OOMs, empty_cache, samples and checkpoints to the harness.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "device_memory.h"
#include "driver_api.h"
#include "options.h"
#include "oomharness/probe.hpp"

namespace trainer {
namespace {

constexpr int kExitOom = 1;
constexpr int kExitUsage = 2;
constexpr int kExitDriver = 3;

double loss_at(int64_t step, int64_t samples_seen) {
  return 2.0 / (1.0 + static_cast<double>(samples_seen) / 64.0) + 0.001 * static_cast<double>(step % 7);
}

// --- checkpoints ------------------------------------------------------------------------------------------

struct Progress {
  int64_t step = 0;     // last completed step
  int64_t samples = 0;  // samples seen up to it
  int64_t batch = 0;    // batch size in use
};

constexpr const char* kCheckpointHeader = "oomharness emulated_trainer checkpoint 1";

// Written to PATH.tmp.PID, flushed to disk, then renamed: a reader sees the old file or the new one.
bool save_checkpoint(const std::string& path, const Progress& p, std::string& error) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::string text = std::string(kCheckpointHeader) + "\nstep " + std::to_string(p.step) + "\nsamples " +
                     std::to_string(p.samples) + "\nbatch " + std::to_string(p.batch) + "\n";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) { error = tmp + ": " + std::strerror(errno); return false; }
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  int e = errno;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    error = path + ": " + std::strerror(ok ? errno : e);
    unlink(tmp.c_str());
    return false;
  }
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  if (int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return true;
}

// Returns false with `error` as "PATH:LINE: field 'F': ..." when the file is not a checkpoint.
bool load_checkpoint(const std::string& path, Progress& p, std::string& error) {
  std::ifstream in(path);
  std::string line;
  int number = 1;
  if (!std::getline(in, line) || line != kCheckpointHeader) {
    error = path + ":1: not an emulated_trainer checkpoint (expected '" + kCheckpointHeader + "')";
    return false;
  }
  const char* fields[] = {"step", "samples", "batch"};
  int64_t* values[] = {&p.step, &p.samples, &p.batch};
  for (int i = 0; i < 3; ++i) {
    ++number;
    std::string want = std::string(fields[i]) + " ";
    auto where = path + ":" + std::to_string(number) + ": field '" + fields[i] + "': ";
    if (!std::getline(in, line) || !line.starts_with(want)) { error = where + "missing"; return false; }
    char* end = nullptr;
    long long v = std::strtoll(line.c_str() + want.size(), &end, 10);
    if (*end != '\0' || line.size() == want.size() || v < 0) {
      error = where + "expected a whole number, got '" + line.substr(want.size()) + "'";
      return false;
    }
    *values[i] = v;
  }
  if (p.batch < 1) { error = path + ":4: field 'batch': must be at least 1"; return false; }
  return true;
}

// --- the training loop ------------------------------------------------------------------------------------

enum class Outcome { done, again, skip };

class Trainer {
 public:
  Trainer(const Options& o, DeviceMemory& memory) : o_(o), memory_(memory) {
    progress_.batch = o.batch_size;
  }

  int run();

 private:
  bool run_step(int64_t s);
  template <class F>
  Outcome guarded(int64_t s, F&& work);
  [[noreturn]] void give_up(int64_t s);
  void forward_backward(int64_t samples);
  void optimizer();
  void eval();
  Block hold(size_t bytes);
  void release_step_blocks();
  void maybe_checkpoint(int64_t s);

  const Options& o_;
  DeviceMemory& memory_;
  Progress progress_;
  std::vector<Block> params_;
  std::vector<Block> step_blocks_;   // held during a step, released to the cache after it
  std::vector<Block> leaked_;        // --leak-per-step, and what --retry-without-freeing forgets
  std::vector<Block> held_;          // --retry-in-except: the first failed attempt's blocks, until a retry works
  int retries_ = 0;
};

Block Trainer::hold(size_t bytes) {
  Block b = memory_.allocate(bytes);
  step_blocks_.push_back(b);
  return b;
}

void Trainer::release_step_blocks() {
  for (const Block& b : step_blocks_) memory_.release(b);
  step_blocks_.clear();
}

void Trainer::forward_backward(int64_t samples) {
  size_t bytes = static_cast<size_t>(samples) * o_.bytes_per_sample;
  oomh::probe::phase(oomh::Phase::forward);
  hold(bytes);
  oomh::probe::phase(oomh::Phase::backward);
  hold(bytes);
  release_step_blocks();
}

void Trainer::optimizer() {
  oomh::probe::phase(oomh::Phase::optimizer);
  hold(o_.bytes_per_sample);
  if (o_.leak_per_step > 0) {
    leaked_.push_back(memory_.allocate(o_.leak_per_step));
  }
  release_step_blocks();
}

void Trainer::eval() {
  oomh::probe::phase(oomh::Phase::eval);
  hold(2 * static_cast<size_t>(progress_.batch) * o_.bytes_per_sample);
  release_step_blocks();
}

void Trainer::give_up(int64_t s) {
  char message[160];
  std::snprintf(message, sizeof message, "CUDA out of memory (emulated): CUDA_ERROR_OUT_OF_MEMORY at step %lld",
                static_cast<long long>(s));
  oomh::probe::oom(s, progress_.batch, message, /*caught=*/false);
  std::fflush(stdout);
  std::fprintf(stderr, "RuntimeError: %s\n", message);
  std::fflush(stderr);
  std::_Exit(kExitOom);
}

// Runs one piece of a step; on CUDA_ERROR_OUT_OF_MEMORY applies --recovery. `again` means: run the piece
// again (with the batch now in progress_.batch); `skip` means: abandon the step.
template <class F>
Outcome Trainer::guarded(int64_t s, F&& work) {
  try {
    work();
    // A retry inside the except block that worked leaves the block: the failed attempt's blocks go free.
    for (const Block& b : held_) memory_.release(b);
    held_.clear();
    return Outcome::done;
  } catch (const OutOfMemory& oom) {
    int64_t batch = progress_.batch;
    char message[160];
    std::snprintf(message, sizeof message, "CUDA out of memory (emulated): CUDA_ERROR_OUT_OF_MEMORY at step %lld",
                  static_cast<long long>(s));
    switch (o_.recovery) {
      case Recovery::none:
      case Recovery::checkpoint:
        give_up(s);
      case Recovery::halve: {
        if (batch <= o_.min_batch) give_up(s);
        oomh::probe::oom(s, batch, message, /*caught=*/true);
        release_step_blocks();
        memory_.empty_cache();
        progress_.batch = std::max(batch / 2, o_.min_batch);
        std::printf("oom at step %lld batch %lld: halving to %lld%s\n", static_cast<long long>(s),
                    static_cast<long long>(batch), static_cast<long long>(progress_.batch),
                    o_.skip_failed_batch ? " (skipping the failed batch)" : "");
        return o_.skip_failed_batch ? Outcome::skip : Outcome::again;
      }
      case Recovery::retry: {
        if (retries_ >= o_.max_retries) give_up(s);
        ++retries_;
        oomh::probe::oom(s, batch, message, /*caught=*/true);
        if (o_.retry_without_freeing) {
          // The broken variant keeps references to what the failed attempt allocated.
          leaked_.insert(leaked_.end(), step_blocks_.begin(), step_blocks_.end());
          step_blocks_.clear();
        } else {
          if (o_.retry_in_except && retries_ == 1) {
            // Broken: the retries run inside the except block of the step's first OOM, whose exception
            // keeps that attempt's tensors referenced; a failed retry's exception ends with its inner block.
            held_.swap(step_blocks_);
          }
          release_step_blocks();
          int64_t before = memory_.reserved(), allocated = memory_.allocated(), freeable = memory_.cached();
          memory_.empty_cache();
          oomh::probe::empty_cache(before, memory_.reserved(), allocated, freeable);
        }
        std::printf("oom at step %lld batch %lld: retry %d of %d%s\n", static_cast<long long>(s),
                    static_cast<long long>(batch), retries_, o_.max_retries,
                    o_.retry_in_except ? " (inside the except block)" : "");
        oomh::probe::begin_step(s, batch);
        return Outcome::again;
      }
    }
    (void)oom;
    give_up(s);
  }
}

bool Trainer::run_step(int64_t s) {
  oomh::probe::begin_step(s, progress_.batch);
  if (o_.like_pytorch && oomh::probe::flush_due(s)) memory_.empty_cache();
  retries_ = 0;
  if (s == o_.hang_at_step)
    for (;;) pause();
  if (s == o_.crash_at_step) std::raise(SIGSEGV);

  // Every sample of the step is processed, in pieces of the current batch: after a halving the failed
  // batch is redone as smaller pieces (gradient accumulation) and no sample is lost.
  int64_t remaining = progress_.batch;
  while (remaining > 0) {
    int64_t piece = std::min(progress_.batch, remaining);
    Outcome r = guarded(s, [&] { forward_backward(piece); });
    if (r == Outcome::skip) return false;
    if (r == Outcome::done) {
      remaining -= piece;
      progress_.samples += piece;
      oomh::probe::samples(piece);
    }
  }
  for (Outcome r = Outcome::again; r != Outcome::done;) {
    r = guarded(s, [&] { optimizer(); });
    if (r == Outcome::skip) return false;
  }
  if (o_.eval_every > 0 && s % o_.eval_every == 0) {
    for (Outcome r = Outcome::again; r != Outcome::done;) {
      r = guarded(s, [&] { eval(); });
      if (r == Outcome::skip) return false;
    }
  }
  progress_.step = s;
  double loss = loss_at(s, progress_.samples);
  std::printf("step %lld batch %lld loss %.6f\n", static_cast<long long>(s), static_cast<long long>(progress_.batch),
              loss);
  std::fflush(stdout);
  oomh::probe::step(s, progress_.batch, loss, memory_.allocated(), memory_.reserved());
  oomh::probe::phase(oomh::Phase::none);
  return true;
}

void Trainer::maybe_checkpoint(int64_t s) {
  if (o_.checkpoint.empty() || o_.checkpoint_every == 0 || s % o_.checkpoint_every != 0) return;
  oomh::probe::phase(oomh::Phase::checkpoint);
  std::string error;
  if (!save_checkpoint(o_.checkpoint, progress_, error)) {
    std::fprintf(stderr, "emulated_trainer: cannot save checkpoint: %s\n", error.c_str());
    std::exit(kExitUsage);
  }
  oomh::probe::checkpoint_saved(o_.checkpoint.c_str(), s);
  oomh::probe::phase(oomh::Phase::none);
}

int Trainer::run() {
  if (!o_.checkpoint.empty() && !o_.resume_from_zero && access(o_.checkpoint.c_str(), F_OK) == 0) {
    std::string error;
    if (!load_checkpoint(o_.checkpoint, progress_, error)) {
      std::fprintf(stderr, "emulated_trainer: %s\n", error.c_str());
      return kExitUsage;
    }
    oomh::probe::checkpoint_loaded(o_.checkpoint.c_str(), progress_.step);
    std::printf("resumed from %s at step %lld\n", o_.checkpoint.c_str(), static_cast<long long>(progress_.step));
  }
  try {
    params_.push_back(memory_.allocate(o_.bytes_per_sample));
  } catch (const OutOfMemory&) {
    give_up(progress_.step + 1);
  }
  for (int64_t s = progress_.step + 1; s <= o_.steps; ++s) {
    if (run_step(s)) maybe_checkpoint(s);
    if (o_.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o_.step_ms));
  }
  return 0;
}

// --- the driver -------------------------------------------------------------------------------------------

int fail(const DriverApi& api, const char* what, CUresult r) {
  std::fprintf(stderr, "emulated_trainer: %s: %s\n", what, error_name(api, r).c_str());
  return kExitDriver;
}

int train(const Options& o) {
  DriverApi api;
  if (std::string error = resolve_driver(o.resolve, api); !error.empty()) {
    std::fprintf(stderr, "emulated_trainer: %s\n", error.c_str());
    return kExitDriver;
  }
  if (CUresult r = api.init(0); r != CUDA_SUCCESS) return fail(api, "cuInit", r);
  CUdevice dev = 0;
  if (CUresult r = api.device_get(&dev, o.device); r != CUDA_SUCCESS) return fail(api, "cuDeviceGet", r);
  CUcontext ctx = nullptr;
  if (CUresult r = api.primary_retain(&ctx, dev); r != CUDA_SUCCESS) return fail(api, "cuDevicePrimaryCtxRetain", r);
  if (CUresult r = api.ctx_set_current(ctx); r != CUDA_SUCCESS) return fail(api, "cuCtxSetCurrent", r);
  oomh::probe::started("emulated_trainer", "1");
  int rc = 0;
  try {
    DeviceMemory memory(api, o.entry, dev, o.like_pytorch);
    Trainer t(o, memory);
    rc = t.run();
  } catch (const OutOfMemory&) {
    std::fprintf(stderr, "RuntimeError: CUDA out of memory (emulated): CUDA_ERROR_OUT_OF_MEMORY at set-up\n");
    return kExitOom;
  } catch (const DriverError& e) {
    std::fprintf(stderr, "emulated_trainer: %s\n", e.what());
    return kExitDriver;
  }
  api.primary_release(dev);
  return rc;
}

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) {
  std::string error;
  auto options = trainer::parse_options(argc, argv, error);
  if (!options) {
    if (error == "help") {
      std::fputs(trainer::kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "emulated_trainer: %s\n%s", error.c_str(), trainer::kUsage);
    return trainer::kExitUsage;
  }
  return trainer::train(*options);
}
