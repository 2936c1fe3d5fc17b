// A job for the runner's tests: plays the part of the shim and the probe on the attempt's control block
// (OOMH_CONTROL), so that sampling can be tested without either.
//
//   exec_test_child control BYTES_PER_STEP STEPS STEP_MS   writes step, held, peak on device 0 each step
//   exec_test_child events                                  appends two probe events and one bad line to OOMH_EVENTS
//                                                           (sealed as the probe seals them: Note [Sealed event lines])
//   exec_test_child forge                                   the same, then a step line not sealed and one sealed wrongly
//   exec_test_child emit                                    appends each line of its stdin (an event line) sealed, as
//                                                           the probe would write it: the tests' scripted jobs

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <unistd.h>

#include "oomharness/control_block.h"
#include "oomharness/event_seal.h"
#include "oomharness/events.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  if (mode == "control" && argc == 5) {
    const char* name = std::getenv("OOMH_CONTROL");
    oomh::ControlBlock* cb = name ? oomh::control_block_open(name) : nullptr;
    if (!cb) {
      std::fprintf(stderr, "no control block\n");
      return 3;
    }
    uint64_t per_step = std::strtoull(argv[2], nullptr, 10);
    int steps = std::atoi(argv[3]);
    int ms = std::atoi(argv[4]);
    cb->device_count.store(1);
    for (int s = 0; s < steps; ++s) {
      cb->step.store(s);
      uint64_t held = per_step * static_cast<uint64_t>(s + 1);
      cb->devices[0].held.store(held);
      oomh::raise_peak(cb->devices[0].peak, held);
      cb->devices[0].alloc_calls.fetch_add(1);
      std::printf("step %d held %llu\n", s, static_cast<unsigned long long>(held));
      std::fflush(stdout);
      usleep(static_cast<useconds_t>(ms) * 1000);
    }
    cb->devices[0].held.store(0);
    oomh::control_block_close(cb);
    return 0;
  }
  if (mode == "events" || mode == "forge") {
    int fd = oomh::events::open_event_log(std::getenv("OOMH_EVENTS"));
    if (fd < 0) return 3;
    const char* name = std::getenv("OOMH_CONTROL");
    oomh::ControlBlock* cb = name ? oomh::control_block_open(name) : nullptr;
    unsigned char key[oomh::events::kSealKeyBytes] = {};
    if (cb) std::memcpy(key, cb->seal_key, sizeof key);
    oomh::events::EventLine one(oomh::events::kSrcProbe, oomh::events::kStep);
    oomh::events::write_sealed(one.add("step", 1).add("batch_size", 32), fd, key);
    const char bad[] = "this is not json\n";
    if (write(fd, bad, sizeof bad - 1) < 0) return 4;
    oomh::events::EventLine two(oomh::events::kSrcProbe, oomh::events::kStep);
    oomh::events::write_sealed(two.add("step", 2).add("batch_size", 16), fd, key);
    if (mode == "forge") {
      oomh::events::EventLine("probe", "step").add("step", 3).add("batch_size", 8).write_to(fd);
      unsigned char other[oomh::events::kSealKeyBytes];
      for (size_t i = 0; i < sizeof other; ++i) other[i] = static_cast<unsigned char>(key[i] ^ 0x5a);
      oomh::events::EventLine four("probe", "step");
      oomh::events::write_sealed(four.add("step", 4).add("batch_size", 4), fd, other);
    }
    close(fd);
    return 0;
  }
  if (mode == "emit") {
    int fd = oomh::events::open_event_log(std::getenv("OOMH_EVENTS"));
    if (fd < 0) return 3;
    const char* name = std::getenv("OOMH_CONTROL");
    oomh::ControlBlock* cb = name ? oomh::control_block_open(name) : nullptr;
    unsigned char key[oomh::events::kSealKeyBytes] = {};
    if (cb) std::memcpy(key, cb->seal_key, sizeof key);
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      line += '\n';
      std::string out(line.size() + oomh::events::kSealSuffixBytes, '\0');
      size_t n = oomh::events::seal_key_set(key) ? oomh::events::seal_line(key, line.data(), line.size(), out.data(), out.size()) : 0;
      if (n == 0) out = line, n = line.size();
      if (write(fd, out.data(), n) != static_cast<ssize_t>(n)) return 4;
    }
    close(fd);
    return 0;
  }
  return 2;
}
