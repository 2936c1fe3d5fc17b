// The cost of a seal per event line (Note [Sealed event lines] in include/oomharness/event_seal.h): a typical
// shim line (`inject`) and a probe `step` line formatted and written to /dev/null, without and with a seal,
// and the runner's check of one sealed line. A plain timed program: bench/RESULTS.md has the command and figures.
//
//   build/bench/event_seal_bench [LINES]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "oomharness/event_seal.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace oomh::events;

double per_line_ns(Clock::time_point start, long n) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(n);
}

void fill(EventLine& e, long i) {
  e.add("entry", "cuMemAlloc_v2").add("size", uint64_t{134217728}).add("device", 0).add("rule", "cap")
      .add("reason", "cap").add("step", static_cast<int64_t>(i)).add("phase", "backward").add("tid", 4242)
      .add("call", static_cast<uint64_t>(i)).add("memory", "device").add("layer", "driver");
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 200000;
  const int fd = ::open("/dev/null", O_WRONLY);
  unsigned char key[kSealKeyBytes];
  for (size_t i = 0; i < sizeof key; ++i) key[i] = static_cast<unsigned char>(i * 7 + 1);
  const unsigned char zero[kSealKeyBytes] = {};
  size_t bytes = 0;
  for (int round = 0; round < 2; ++round) {  // the first round warms up
    auto t = Clock::now();
    for (long i = 0; i < n; ++i) {
      EventLine e(kSrcShim, kInject);
      fill(e, i);
      write_sealed(e, fd, zero);
    }
    const double plain = per_line_ns(t, n);
    t = Clock::now();
    for (long i = 0; i < n; ++i) {
      EventLine e(kSrcShim, kInject);
      fill(e, i);
      write_sealed(e, fd, key);
    }
    const double sealed = per_line_ns(t, n);
    EventLine e(kSrcShim, kInject);
    fill(e, 1);
    char out[EventLine::kCapacity + kSealSuffixBytes];
    const size_t len = seal_line(key, e.data(), e.size(), out, sizeof out);
    bytes = len;
    std::string line(out, len - 1), text(len, '\0');
    t = Clock::now();
    size_t size = 0, ok = 0;
    for (long i = 0; i < n; ++i) ok += check_seal(key, line, text.data(), &size) == SealCheck::sealed;
    const double check = per_line_ns(t, n);
    if (round == 1)
      std::printf("inject line of %zu bytes sealed: write %.0f ns plain, %.0f ns sealed (+%.0f ns); runner's check %.0f ns (%zu ok)\n",
                  bytes, plain, sealed, sealed - plain, check, ok);
  }
  ::close(fd);
  return 0;
}
