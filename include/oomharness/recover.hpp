#pragma once
// Reference recovery code for LibTorch programs: what the usual advice for CUDA out-of-memory errors says
// to do, done right (the Python twin is python/oomharness/recover.py). Header-only; it needs
// LibTorch, so only code built with LibTorch includes it (examples/libtorch/).
//
//   oomh::recover::BatchHalving halving(model_params_optimizer, loss_fn, /*micro_batch=*/64);
//   double loss = halving.step({inputs, targets});   // one optimizer step over the whole batch
//
//   oomh::recover::retry_after_empty_cache([&] { return train_step(x, y); }, /*max_retries=*/3);
//
//   oomh::recover::save_checkpoint(path, *model, optimizer, step, data_position);   // atomic
//   auto state = oomh::recover::load_checkpoint(path, *model, optimizer);            // nullopt: start afresh
//
// Note [Halving in C++]
// The failed attempt's tensors die with the stack frames the exception unwinds, so by the time the catch
// block runs only the exception itself is held; it is kept as an exception_ptr (to rethrow when even the
// smallest micro-batch does not fit) and the retry runs after the catch block, after the gradients of the
// failed attempt are zeroed and PyTorch's cache is emptied. The failed batch is redone from zeroed
// gradients as micro-batches of the new size, each loss weighted by its share, so the accumulated gradient
// is the whole batch's and no sample is dropped (the Python module's Note [Halving without losing samples]).

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#if __has_include(<c10/cuda/CUDACachingAllocator.h>) && __has_include(<ATen/cuda/CUDAGeneratorImpl.h>)
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#define OOMH_RECOVER_CUDA 1
#else
#define OOMH_RECOVER_CUDA 0
#endif

#include "oomharness/probe.hpp"

namespace oomh::recover {

// Bytes PyTorch's CUDA caching allocator holds from the driver on the current device (0 without CUDA).
inline int64_t reserved_bytes() {
#if OOMH_RECOVER_CUDA
  if (!torch::cuda::is_available()) return 0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return stats.reserved_bytes[0].current;  // [0]: the aggregate over pool types
#else
  return 0;
#endif
}

inline int64_t allocated_bytes() {
#if OOMH_RECOVER_CUDA
  if (!torch::cuda::is_available()) return 0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return stats.allocated_bytes[0].current;
#else
  return 0;
#endif
}

// Bytes of free cached blocks that emptyCache can give back: a free block that is a whole segment. Free
// blocks split off a segment that a live tensor still uses (inactive_split_bytes) stay, and so do blocks
// in use (active_bytes).
inline int64_t freeable_bytes() {
#if OOMH_RECOVER_CUDA
  if (!torch::cuda::is_available()) return 0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  int64_t n = stats.reserved_bytes[0].current - stats.active_bytes[0].current - stats.inactive_split_bytes[0].current;
  return n > 0 ? n : 0;
#else
  return 0;
#endif
}

// Gives PyTorch's cached device memory back to the driver, and tells the probe what the cache held.
inline void release_memory() {
#if OOMH_RECOVER_CUDA
  if (!torch::cuda::is_available()) return;
  int64_t before = reserved_bytes(), allocated = allocated_bytes(), freeable = freeable_bytes();
  c10::cuda::CUDACachingAllocator::emptyCache();
  oomh::probe::empty_cache(before, reserved_bytes(), allocated, freeable);
#endif
}

// Marks the start of `step` for the probe and, when a fault targets this step, empties the cache first so
// that the step's allocations reach the driver (oomh::probe::flush_due).
inline void begin_step(int64_t step, int64_t batch_size) {
  oomh::probe::begin_step(step, batch_size);
#if OOMH_RECOVER_CUDA
  if (oomh::probe::flush_due(step) && torch::cuda::is_available()) {
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#endif
}

// Runs one optimizer step over a batch as micro-batches with gradient accumulation, halving the
// micro-batch on c10::OutOfMemoryError (Note [Halving in C++]).
//   loss_fn(piece) returns the mean loss over `piece` (the batch's tensors, sliced alike).
class BatchHalving {
 public:
  using LossFn = std::function<torch::Tensor(const std::vector<torch::Tensor>& piece)>;

  BatchHalving(torch::optim::Optimizer& optimizer, LossFn loss_fn, int64_t micro_batch, int64_t min_batch = 1,
               double factor = 0.5, int64_t step_count = 0)
      : optimizer_(optimizer), loss_fn_(std::move(loss_fn)), micro_(micro_batch), min_(min_batch),
        factor_(factor), step_count_(step_count) {
    if (micro_ < 1 || min_ < 1 || !(factor_ > 0 && factor_ < 1))
      throw std::invalid_argument("BatchHalving: micro_batch and min_batch must be >= 1 and 0 < factor < 1");
  }

  int64_t micro_batch() const { return micro_; }
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }

  // One optimizer step over `batch`; returns the batch's mean loss. Rethrows the out-of-memory error when
  // even min_batch does not fit.
  double step(const std::vector<torch::Tensor>& batch) {
    const int64_t n = batch.at(0).size(0);
    begin_step(step_count_ + 1, std::min(n, micro_));
    double loss = 0;
    for (;;) {
      std::exception_ptr failed;
      std::string message;
      try {
        loss = accumulate(batch, n);
      } catch (const c10::OutOfMemoryError& e) {
        failed = std::current_exception();
        message = e.what_without_backtrace();
      }
      if (!failed) break;
      // Outside the catch block: the failed attempt's tensors are gone with its stack frames.
      oomh::probe::oom(step_count_ + 1, micro_, message.c_str(), /*caught=*/true);
      optimizer_.zero_grad();
      release_memory();
      if (micro_ <= min_) std::rethrow_exception(failed);
      micro_ = std::max(min_, static_cast<int64_t>(static_cast<double>(micro_) * factor_));
      oomh::probe::begin_step(step_count_ + 1, micro_);
    }
    oomh::probe::phase(Phase::optimizer);
    optimizer_.step();
    ++step_count_;
    oomh::probe::samples(n);
    oomh::probe::step(step_count_, std::min(n, micro_), loss, allocated_bytes(), reserved_bytes());
    oomh::probe::phase(Phase::data);
    return loss;
  }

 private:
  double accumulate(const std::vector<torch::Tensor>& batch, int64_t n) {
    optimizer_.zero_grad();
    double total = 0;
    for (int64_t start = 0; start < n; start += micro_) {
      const int64_t stop = std::min(n, start + micro_);
      std::vector<torch::Tensor> piece;
      piece.reserve(batch.size());
      for (const auto& t : batch) piece.push_back(t.slice(0, start, stop));
      oomh::probe::phase(Phase::forward);
      torch::Tensor loss = loss_fn_(piece) * (static_cast<double>(stop - start) / static_cast<double>(n));
      oomh::probe::phase(Phase::backward);
      loss.backward();
      total += loss.item<double>();
    }
    return total;
  }

  torch::optim::Optimizer& optimizer_;
  LossFn loss_fn_;
  int64_t micro_;
  int64_t min_;
  double factor_;
  int64_t step_count_;
};

// Calls fn(); on c10::OutOfMemoryError releases memory and calls it again, at most max_retries times.
// before_retry (zero the failed attempt's gradients there) runs before each retry.
template <class Fn>
auto retry_after_empty_cache(Fn&& fn, int max_retries, const std::function<void()>& before_retry = {}) -> decltype(fn()) {
  for (int attempt = 0;; ++attempt) {
    std::exception_ptr failed;
    std::string message;
    try {
      return fn();
    } catch (const c10::OutOfMemoryError& e) {
      if (attempt >= max_retries) throw;
      failed = std::current_exception();
      message = e.what_without_backtrace();
    }
    oomh::probe::oom(-1, -1, message.c_str(), /*caught=*/true);
    if (before_retry) before_retry();
    release_memory();
  }
}

// ---- checkpoints ----------------------------------------------------------------------------------------

struct CheckpointState {
  int64_t step = 0;           // completed steps
  int64_t data_position = 0;  // whatever the loop needs to find its place in the data
};

namespace detail {
inline void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw std::runtime_error("oomh::recover: cannot open " + path + " to sync it");
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("oomh::recover: fsync of " + path + " failed");
}
inline std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace detail

// Saves model, optimizer, step, data position and the CPU and CUDA generators so that a crash at any
// moment leaves the old checkpoint or the new one, whole: write a temporary file in the same directory,
// fsync it, rename it over `path`, fsync the directory.
inline void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                            const torch::optim::Optimizer& optimizer, int64_t step, int64_t data_position = 0) {
  oomh::probe::phase(Phase::checkpoint);
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive, optimizer_archive;
  model.save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("step", torch::tensor(step));
  archive.write("data_position", torch::tensor(data_position));
  archive.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
#if OOMH_RECOVER_CUDA
  if (torch::cuda::is_available()) {
    for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i)
      archive.write("rng_cuda_" + std::to_string(i),
                    at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(i)).get_state());
  }
#endif
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    archive.save_to(tmp);
    detail::fsync_path(tmp, false);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw std::runtime_error("oomh::recover: cannot rename " + tmp + " to " + path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  detail::fsync_path(detail::dir_of(path), true);
  oomh::probe::checkpoint_saved(path.c_str(), step);
  oomh::probe::phase(Phase::data);
}

// Restores a checkpoint written by save_checkpoint; nullopt when there is none (start afresh). A damaged
// file throws: resuming from it silently would be worse.
inline std::optional<CheckpointState> load_checkpoint(const std::string& path, torch::nn::Module& model,
                                                      torch::optim::Optimizer& optimizer) {
  if (::access(path.c_str(), F_OK) != 0) return std::nullopt;
  oomh::probe::phase(Phase::checkpoint);
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::serialize::InputArchive model_archive, optimizer_archive;
  archive.read("model", model_archive);
  archive.read("optimizer", optimizer_archive);
  model.load(model_archive);
  optimizer.load(optimizer_archive);
  torch::Tensor step, position, rng;
  archive.read("step", step);
  archive.read("data_position", position);
  archive.read("rng_cpu", rng);
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default generator
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
#if OOMH_RECOVER_CUDA
  if (torch::cuda::is_available()) {
    for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i) {
      torch::Tensor state;
      if (!archive.try_read("rng_cuda_" + std::to_string(i), state)) continue;
      at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(i));
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
  }
#endif
  CheckpointState out{step.item<int64_t>(), position.item<int64_t>()};
  oomh::probe::checkpoint_loaded(path.c_str(), out.step);
  oomh::probe::phase(Phase::data);
  return out;
}

}  // namespace oomh::recover
