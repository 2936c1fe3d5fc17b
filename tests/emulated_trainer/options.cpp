// The emulated trainer's command line (see options.h).
#include "options.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>

#include "oomharness/units.h"

namespace trainer {

const char* const kUsage =
    "usage: emulated_trainer [flags]\n"
    "  A training job over the CUDA driver API, for testing oomharness. Steps are numbered from 1.\n"
    "  --steps N                target step (default 10)\n"
    "  --batch-size B           samples per step (default 8)\n"
    "  --min-batch B            halving floor (default 1)\n"
    "  --bytes-per-sample SIZE  activation and gradient bytes per sample (default 1MiB)\n"
    "  --step-ms MS             sleep per step (default 0)\n"
    "  --leak-per-step SIZE     bytes kept for ever after each step (default 0)\n"
    "  --eval-every K           eval pass at twice the batch after every K-th step (default 0: none)\n"
    "  --entry alloc|async|vmm|managed|pitch   allocation entry point (default alloc)\n"
    "  --resolve procaddress|dlsym|link        how driver functions are found (default procaddress)\n"
    "  --recovery none|halve|retry|checkpoint  what to do on CUDA_ERROR_OUT_OF_MEMORY (default none)\n"
    "  --max-retries N          retry: attempts per step after the first (default 3)\n"
    "  --skip-failed-batch      halve, broken: drop the failed batch instead of redoing it\n"
    "  --retry-without-freeing  retry, broken: retry without freeing or emptying the cache\n"
    "  --retry-in-except        retry, broken: empty the cache and retry while the failed attempt's blocks\n"
    "                           are still held (a retry inside the except block)\n"
    "  --like-pytorch           the allocator empties its cache and tries a failed allocation once more\n"
    "                           before it raises, and empties it as a step in OOMH_FLUSH_AT_STEPS begins\n"
    "                           (what PyTorch's caching allocator and the probe do)\n"
    "  --checkpoint PATH        checkpoint file (needed by --recovery checkpoint)\n"
    "  --checkpoint-every K     save after every K-th step (default 0: never)\n"
    "  --resume-from-zero       checkpoint, broken: ignore the checkpoint at start\n"
    "  --hang-at-step S         sleep for ever at the start of step S\n"
    "  --crash-at-step S        raise SIGSEGV at the start of step S\n"
    "  --device D               device ordinal (default 0)\n"
    "exit: 0 target reached, 1 out of memory not recovered, 2 usage or checkpoint error, 3 other driver error\n";

namespace {

bool parse_int(std::string_view text, int64_t min, int64_t& out) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < min) return false;
  out = v;
  return true;
}

template <class E>
bool parse_choice(std::string_view text, std::initializer_list<std::pair<const char*, E>> choices, E& out) {
  for (const auto& [name, value] : choices)
    if (text == name) { out = value; return true; }
  return false;
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv, std::string& error) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto flag = [&](const char* name) { return arg == name; };
    auto need = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) { error = std::string(arg) + " needs a value"; return false; }
      value = argv[++i];
      return true;
    };
    auto bad = [&](const char* what) {
      error = std::string(arg) + ": bad value '" + std::string(value) + "' (" + what + ")";
      return std::nullopt;
    };
    int64_t n = 0;
    if (flag("--skip-failed-batch")) o.skip_failed_batch = true;
    else if (flag("--retry-without-freeing")) o.retry_without_freeing = true;
    else if (flag("--retry-in-except")) o.retry_in_except = true;
    else if (flag("--like-pytorch")) o.like_pytorch = true;
    else if (flag("--resume-from-zero")) o.resume_from_zero = true;
    else if (flag("--help") || flag("-h")) { error = "help"; return std::nullopt; }
    else if (flag("--steps") || flag("--batch-size") || flag("--min-batch") || flag("--step-ms") ||
             flag("--eval-every") || flag("--hang-at-step") || flag("--crash-at-step") || flag("--device") ||
             flag("--max-retries") || flag("--checkpoint-every")) {
      if (!need()) return std::nullopt;
      int64_t min = (flag("--steps") || flag("--batch-size") || flag("--min-batch")) ? 1 : 0;
      if (!parse_int(value, min, n)) return bad(min ? "a whole number from 1" : "a whole number from 0");
      if (flag("--steps")) o.steps = n;
      else if (flag("--batch-size")) o.batch_size = n;
      else if (flag("--min-batch")) o.min_batch = n;
      else if (flag("--step-ms")) o.step_ms = n;
      else if (flag("--eval-every")) o.eval_every = n;
      else if (flag("--hang-at-step")) o.hang_at_step = n;
      else if (flag("--crash-at-step")) o.crash_at_step = n;
      else if (flag("--device")) o.device = static_cast<int>(n);
      else if (flag("--max-retries")) o.max_retries = static_cast<int>(n);
      else o.checkpoint_every = n;
    } else if (flag("--bytes-per-sample") || flag("--leak-per-step")) {
      if (!need()) return std::nullopt;
      oomh::Expected<double> r = oomh::parse_bytes(value);
      if (!r) { error = std::string(arg) + ": " + r.error().str(); return std::nullopt; }
      if (flag("--bytes-per-sample")) {
        if (*r < 1) return bad("at least one byte");
        o.bytes_per_sample = static_cast<uint64_t>(*r);
      } else {
        o.leak_per_step = static_cast<uint64_t>(*r);
      }
    } else if (flag("--entry")) {
      if (!need()) return std::nullopt;
      if (!parse_choice<Entry>(value, {{"alloc", Entry::alloc}, {"async", Entry::async}, {"vmm", Entry::vmm},
                                       {"managed", Entry::managed}, {"pitch", Entry::pitch}}, o.entry))
        return bad("alloc, async, vmm, managed or pitch");
    } else if (flag("--resolve")) {
      if (!need()) return std::nullopt;
      if (!parse_choice<Resolve>(value, {{"procaddress", Resolve::procaddress}, {"dlsym", Resolve::dlsym},
                                         {"link", Resolve::link}}, o.resolve))
        return bad("procaddress, dlsym or link");
    } else if (flag("--recovery")) {
      if (!need()) return std::nullopt;
      if (!parse_choice<Recovery>(value, {{"none", Recovery::none}, {"halve", Recovery::halve},
                                          {"retry", Recovery::retry}, {"checkpoint", Recovery::checkpoint}},
                                  o.recovery))
        return bad("none, halve, retry or checkpoint");
    } else if (flag("--checkpoint")) {
      if (!need()) return std::nullopt;
      if (value.empty()) return bad("a file path");
      o.checkpoint = std::string(value);
    } else {
      error = "unknown flag '" + std::string(argv[i]) + "'";
      return std::nullopt;
    }
  }
  if (o.recovery == Recovery::checkpoint && o.checkpoint.empty()) {
    error = "--recovery checkpoint needs --checkpoint PATH";
    return std::nullopt;
  }
  if (o.min_batch > o.batch_size) {
    error = "--min-batch " + std::to_string(o.min_batch) + " is larger than --batch-size " + std::to_string(o.batch_size);
    return std::nullopt;
  }
  return o;
}

}  // namespace trainer
