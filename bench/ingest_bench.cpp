// Event-log ingestion at scale (issue 12; figures in bench/RESULTS.md): writes an event log of N lines
// (a long training with the probe: step and phase events, an injected fault every 100 lines), reads it
// with the runner's reader, and classifies M injected faults (Attempt::injected_faults).
//
//   ingest_bench [lines=1000000] [faults=100000] [dir=/tmp] [shape=compact|spaced]
// `spaced` writes the lines as Python's json.dumps does by default (", " and ": "), which the reader's
// fast path does not take (Note [Fast event lines] in policies/src/trace.cpp): the JSON parser's cost.
// Prints CPU seconds and the process's peak RSS after each part. Run it once per size: peak RSS is the
// process's high-water mark.

#include <sys/resource.h>

#include <chrono>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "exec/output.h"
#include "oomharness/policies/trace.h"

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

long peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

}  // namespace

int main(int argc, char** argv) {
  const long lines = argc > 1 ? std::atol(argv[1]) : 1000000;
  const long faults = argc > 2 ? std::atol(argv[2]) : 100000;
  const std::string dir = argc > 3 ? argv[3] : "/tmp";
  const bool spaced = argc > 4 && std::string(argv[4]) == "spaced";
  const std::string path = dir + "/oomh-ingest-bench-" + std::to_string(::getpid()) + ".jsonl";

  {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return 2;
    static const char* phases[] = {"forward", "backward", "optimizer"};
    for (long i = 0; i < lines; ++i) {
      const double t = 1763780000.0 + static_cast<double>(i) * 1e-3;
      const long step = i / 4;
      if (i % 100 == 99)
        std::fprintf(f, "{\"t\":%.6f,\"pid\":4242,\"src\":\"shim\",\"kind\":\"inject\",\"fields\":{\"entry\":\"cuMemAlloc_v2\","
                        "\"size\":1048576,\"device\":0,\"rule\":\"r\",\"reason\":\"rule\",\"step\":%ld,\"phase\":\"forward\"}}\n", t, step);
      else if (i % 4 == 3)
        std::fprintf(f, "{\"t\":%.6f,\"pid\":4242,\"src\":\"probe\",\"kind\":\"step\",\"fields\":{\"step\":%ld,\"batch_size\":64,"
                        "\"loss\":%.4f,\"allocated\":%ld}}\n", t, step, 1.0 / static_cast<double>(step + 1), 1073741824L + step);
      else
        std::fprintf(f, "{\"t\":%.6f,\"pid\":4242,\"src\":\"probe\",\"kind\":\"phase\",\"fields\":{\"phase\":\"%s\",\"step\":%ld}}\n",
                     t, phases[i % 4], step);
    }
    std::fclose(f);
  }
  if (spaced) {
    // Rewrite the log with a blank after each ',' and ':' (none of its strings holds either).
    const std::string out = path + ".spaced";
    FILE* in = std::fopen(path.c_str(), "r");
    FILE* f = std::fopen(out.c_str(), "w");
    if (!in || !f) return 2;
    for (int c; (c = std::fgetc(in)) != EOF;) {
      std::fputc(c, f);
      if (c == ',' || c == ':') std::fputc(' ', f);
    }
    std::fclose(in);
    std::fclose(f);
    std::rename(out.c_str(), path.c_str());
  }
  std::printf("log: %ld lines written to %s; peak RSS so far %ld MB\n", lines, path.c_str(), peak_rss_mb());

  double cpu0 = cpu_seconds();
  auto wall0 = std::chrono::steady_clock::now();
  size_t bad = 0;
  size_t kept = 0;
  std::optional<oomh::LogFold> thinned;
  {
    std::vector<oomh::Event> events = oomh::exec::read_event_log(path, &bad, &thinned);
    kept = events.size();
  }
  double cpu1 = cpu_seconds();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  std::printf("ingest: %ld lines, %zu events kept, %zu bad: %.2f s CPU, %.2f s wall, peak RSS %ld MB\n", lines, kept, bad,
              cpu1 - cpu0, wall, peak_rss_mb());
  if (thinned)
    std::printf("thinned (Note [Thinned event logs]): %llu of %llu routine events dropped, %llu of %llu steps\n",
                static_cast<unsigned long long>(thinned->routine_dropped), static_cast<unsigned long long>(thinned->routine),
                static_cast<unsigned long long>(thinned->steps_dropped), static_cast<unsigned long long>(thinned->steps));
  std::remove(path.c_str());

  oomh::Attempt a;
  a.end_kind = oomh::AttemptEnd::exited;
  a.exit_code = 0;
  for (long i = 0; i < faults; ++i) {
    oomh::Event e;
    e.t = static_cast<double>(i);
    e.src = i % 50 == 49 ? "probe" : "shim";
    e.kind = i % 50 == 49 ? (i % 100 == 99 ? "oom" : "step") : "inject";
    if (e.kind == "step") e.fields = {{"step", i}};
    a.events.push_back(std::move(e));
  }
  cpu0 = cpu_seconds();
  const auto classified = a.injected_faults();
  cpu1 = cpu_seconds();
  size_t visible = 0;
  for (const auto& f : classified) visible += f.visible;
  std::printf("classify: %zu injected faults (%zu visible): %.3f s CPU\n", classified.size(), visible, cpu1 - cpu0);
  return 0;
}
