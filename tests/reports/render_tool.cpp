// oomh_reports_render FORMAT RESULTS.json OUT: renders a results file (json, junit, html, markdown,
// perfetto), or `compare BASE.json NEW.json OUT [RULE...]`. Test support for the Python and Chromium checks;
// the user-facing commands are `oomharness report` and `oomharness compare`.

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "oomharness/reports/writers.h"

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "oomh_reports_render: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace oomh;
  if (argc < 4) return fail("usage: oomh_reports_render FORMAT RESULTS OUT | compare BASE NEW OUT [RULE...]");
  const std::string format = argv[1];
  const auto run = load_results(argv[2]);
  if (!run) return fail(run.error());
  std::string content;
  if (format == "compare") {
    if (argc < 5) return fail("compare needs BASE NEW OUT");
    const auto now = load_results(argv[3]);
    if (!now) return fail(now.error());
    std::vector<CompareRule> rules;
    for (int i = 5; i < argc; ++i) {
      auto rule = parse_fail_on(argv[i]);
      if (!rule) return fail(rule.error());
      rules.push_back(rule.value());
    }
    const Comparison c = compare(run.value(), now.value(), rules);
    auto written = write_file_atomic(argv[4], render_comparison_text(c));
    if (!written) return fail(written.error());
    return c.regressed() ? 2 : 0;
  }
  const std::string out = argv[3];
  if (format == "json") content = render_json(run.value());
  else if (format == "junit") content = render_junit(run.value());
  else if (format == "html") content = render_html(run.value(), {std::filesystem::path(out).parent_path().string()});
  else if (format == "markdown") content = render_markdown(run.value());
  else if (format == "perfetto") content = render_perfetto(run.value());
  else return fail("unknown format '" + format + "' (json, junit, html, markdown, perfetto, compare)");
  auto written = write_file_atomic(out, content);
  if (!written) return fail(written.error());
  return 0;
}
