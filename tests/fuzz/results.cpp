// Fuzz target: a results file (results.json or a job stream, jobs.jsonl) as `oomharness report`, `explain`
// and `compare` read it (Note [Bounded results files] in reports/include/oomharness/reports/writers.h):
// oomh::load_results through a memfd (the regular-file and size checks included), then, for a file that
// loads, every report writer, explain_job for each job, compare of the run with itself under every kind of
// rule, and the terminal text of what explain and compare print.
//
// Input: the file's bytes. A first line "#rule TEXT" is given to parse_fail_on as a --fail-on rule (and
// is not part of the file).
//
// Checks: what terminal_text returns holds no control character but newline and tab (Note [Text for a
// terminal]); a run that loads is written by render_json and reads back.

#include <oomharness/reports/compare.h>
#include <oomharness/reports/explain.h>
#include <oomharness/reports/terminal_text.h>
#include <oomharness/reports/writers.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"

namespace {

bool terminal_safe(const std::string& s) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<oomh::CompareRule> rules;
  if (input.rfind("#rule ", 0) == 0) {
    const size_t nl = input.find('\n');
    const std::string text = input.substr(6, nl == std::string::npos ? std::string::npos : nl - 6);
    if (auto r = oomh::parse_fail_on(text)) rules.push_back(r.value());
    input.erase(0, nl == std::string::npos ? input.size() : nl + 1);
  }
  for (const char* text : {"verdict", "removed", "peak:+5%", "recovery:+2s", "faults_visible:-0"})
    if (auto r = oomh::parse_fail_on(text)) rules.push_back(r.value());

  const int fd = memfd_create("results", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (!input.empty() && write(fd, input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
    close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto run = oomh::load_results(path, 1 << 20);
  close(fd);
  OOMH_FUZZ_CHECK(terminal_safe(oomh::terminal_text(run ? std::string() : run.error())), "an error is not terminal text");
  if (!run) return 0;
  const oomh::RunResult& r = run.value();

  (void)oomh::render_html(r, oomh::HtmlOptions{"."});
  (void)oomh::render_junit(r);
  (void)oomh::render_markdown(r);
  (void)oomh::render_perfetto(r);
  for (const oomh::SuiteResult& suite : r.suites)
    for (const oomh::JobResult& job : suite.jobs)
      OOMH_FUZZ_CHECK(terminal_safe(oomh::terminal_text(oomh::explain_job(suite.name, job))), "explain is not terminal text");
  (void)oomh::job_listed_twice(r);
  const oomh::Comparison c = oomh::compare(r, r, rules);
  OOMH_FUZZ_CHECK(terminal_safe(oomh::terminal_text(oomh::render_comparison_text(c))), "compare is not terminal text");
  (void)oomh::render_comparison_markdown(c);

  const std::string json = oomh::render_json(r);
  auto back = oomh::parse_results(json, "render_json");
  if (!back) std::fprintf(stderr, "%s\n", back.error().c_str());
  OOMH_FUZZ_CHECK(back.ok(), "a run that loaded does not read back from its own results.json");
  return 0;
}
