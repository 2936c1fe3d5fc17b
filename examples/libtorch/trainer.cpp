// A LibTorch trainer for oomharness: a small MLP on synthetic data, with the C++ probe
// (include/oomharness/probe.hpp) and the reference recovery code (include/oomharness/recover.hpp).
//
//   oomh_libtorch_trainer --recovery halve    # catches c10::OutOfMemoryError, halves, redoes the batch
//   oomh_libtorch_trainer --recovery retry    # empties the cache and retries the step
//   oomh_libtorch_trainer --recovery none     # no OOM handler: the error ends the program (SIGABRT)
//   oomh_libtorch_trainer --recovery checkpoint --checkpoint ck.pt   # dies of the OOM, resumes on restart
//   oomh_libtorch_trainer --alloc-bytes 6442450944   # no training: one tensor of that many bytes (see alloc_once)
//
// Prints `step N bs=B loss=L` after each step, like examples/python/train.py. Batch k is drawn from its
// own generator seeded with the seed and k, so a resumed run sees the data an uninterrupted one saw.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "oomharness/probe.hpp"
#include "oomharness/recover.hpp"

namespace {

struct Options {
  std::string recovery = "none";
  std::string checkpoint = "checkpoint.pt";
  int64_t steps = 20, batch = 256, features = 512, hidden = 4096, classes = 16, min_batch = 1, save_every = 5;
  int64_t alloc_bytes = 0;
  int max_retries = 3;
  uint64_t seed = 0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "oomh_libtorch_trainer: %s\nusage: oomh_libtorch_trainer [--recovery none|halve|retry|checkpoint] "
               "[--steps N] [--batch B] [--min-batch B] [--hidden H] [--features F] [--max-retries N] "
               "[--checkpoint PATH] [--save-every K] [--seed S] [--alloc-bytes N]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + a).c_str());
    std::string v = argv[++i];
    if (a == "--recovery") o.recovery = v;
    else if (a == "--checkpoint") o.checkpoint = v;
    else if (a == "--steps") o.steps = std::stoll(v);
    else if (a == "--batch") o.batch = std::stoll(v);
    else if (a == "--min-batch") o.min_batch = std::stoll(v);
    else if (a == "--features") o.features = std::stoll(v);
    else if (a == "--hidden") o.hidden = std::stoll(v);
    else if (a == "--save-every") o.save_every = std::stoll(v);
    else if (a == "--max-retries") o.max_retries = std::stoi(v);
    else if (a == "--seed") o.seed = std::stoull(v);
    else if (a == "--alloc-bytes") o.alloc_bytes = std::stoll(v);
    else usage(("unknown option " + a).c_str());
  }
  if (o.recovery != "none" && o.recovery != "halve" && o.recovery != "retry" && o.recovery != "checkpoint")
    usage(("unknown recovery " + o.recovery).c_str());
  return o;
}

struct MLPImpl : torch::nn::Module {
  MLPImpl(int64_t features, int64_t hidden, int64_t classes)
      : fc1(register_module("fc1", torch::nn::Linear(features, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, hidden))),
        fc3(register_module("fc3", torch::nn::Linear(hidden, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(MLP);

struct Data {
  const Options& o;
  torch::Device device;
  torch::Tensor teacher;
  Data(const Options& options, torch::Device d) : o(options), device(d) {
    torch::manual_seed(o.seed + 1);
    teacher = torch::randn({o.features, o.classes});
  }
  // Batch number `index`: the same whenever it is asked for (its own seed; the global generator is kept).
  std::vector<torch::Tensor> batch(int64_t index, int64_t size) const {
    auto gen = at::detail::createCPUGenerator(o.seed * 1000003 + static_cast<uint64_t>(index));
    torch::Tensor x = at::randn({size, o.features}, gen);
    torch::Tensor y = torch::matmul(x, teacher).argmax(1);
    oomh::probe::phase(oomh::Phase::data);
    return {x.to(device), y.to(device)};
  }
};

// --alloc-bytes N: allocates one tensor of N bytes and nothing else, so that LibTorch's own answer to a
// request that cannot fit shows directly (tests/gpu/reservation_checks.sh asks for more than the reservation
// sidecar left free). Prints `allocated N bytes on DEVICE` (exit 0), or the error's type and the first line of
// its message, `c10::OutOfMemoryError: CUDA out of memory. ...` (exit 1).
int alloc_once(int64_t bytes, const torch::Device& device) {
  auto first_line = [](const char* text) {
    std::string s(text ? text : "");
    return s.substr(0, s.find('\n'));
  };
  try {
    torch::Tensor t = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
    std::printf("allocated %lld bytes on %s\n", static_cast<long long>(bytes), device.str().c_str());
    return 0;
  } catch (const c10::OutOfMemoryError& e) {
    std::printf("c10::OutOfMemoryError: %s\n", first_line(e.what_without_backtrace()).c_str());
  } catch (const c10::Error& e) {
    std::printf("c10::Error (not an out-of-memory error): %s\n", first_line(e.what_without_backtrace()).c_str());
  }
  return 1;
}

void report(int64_t step, int64_t bs, double loss) {
  std::printf("step %lld bs=%lld loss=%.8g\n", static_cast<long long>(step), static_cast<long long>(bs), loss);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  if (o.alloc_bytes > 0) return alloc_once(o.alloc_bytes, device);
  oomh::probe::started("libtorch", TORCH_VERSION);
  Data data(o, device);
  torch::manual_seed(o.seed);
  MLP model(o.features, o.hidden, o.classes);
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  auto loss_of = [&](const std::vector<torch::Tensor>& piece) {
    return torch::nn::functional::cross_entropy(model->forward(piece[0]), piece[1]);
  };
  // A plain step with no OOM handling of its own.
  auto train_step = [&](const std::vector<torch::Tensor>& b) {
    optimizer.zero_grad();
    oomh::probe::phase(oomh::Phase::forward);
    torch::Tensor loss = loss_of(b);
    oomh::probe::phase(oomh::Phase::backward);
    loss.backward();
    oomh::probe::phase(oomh::Phase::optimizer);
    optimizer.step();
    return loss.item<double>();
  };
  auto done = [&](int64_t step, int64_t bs, double loss) {
    oomh::probe::samples(o.batch);
    oomh::probe::step(step, bs, loss, oomh::recover::allocated_bytes(), oomh::recover::reserved_bytes());
    report(step, bs, loss);
  };

  if (o.recovery == "halve") {
    oomh::recover::BatchHalving halving(optimizer, loss_of, o.batch, o.min_batch);
    for (int64_t step = 1; step <= o.steps; ++step) {
      double loss = halving.step(data.batch(step - 1, o.batch));
      report(step, halving.micro_batch(), loss);
    }
  } else {
    int64_t start = 0;
    if (o.recovery == "checkpoint") {
      if (auto state = oomh::recover::load_checkpoint(o.checkpoint, *model, optimizer)) {
        start = state->step;
        std::printf("resumed from %s at step %lld\n", o.checkpoint.c_str(), static_cast<long long>(start));
      }
    }
    for (int64_t step = start + 1; step <= o.steps; ++step) {
      oomh::recover::begin_step(step, o.batch);
      auto b = data.batch(step - 1, o.batch);
      double loss = o.recovery == "retry"
                        ? oomh::recover::retry_after_empty_cache([&] { return train_step(b); }, o.max_retries,
                                                                 [&] { optimizer.zero_grad(); })
                        : train_step(b);
      done(step, o.batch, loss);
      if (o.recovery == "checkpoint" && step % o.save_every == 0)
        oomh::recover::save_checkpoint(o.checkpoint, *model, optimizer, step, step);
    }
  }
  std::printf("done: %lld steps\n", static_cast<long long>(o.steps));
  return 0;
}
