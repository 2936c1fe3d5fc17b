// Golden files: each format rendered from fixed results files (data/) must match golden/ byte for byte.
// The renderers read everything (times included) from the RunResult, so the goldens never vary.
// OOMH_UPDATE_GOLDEN=1 rewrites them; review the diff before committing.

#include <gtest/gtest.h>

#include "oomharness/reports/writers.h"
#include "support.h"

namespace oomh {
namespace {

TEST(Golden, Json) { test::expect_golden("run.json", render_json(test::load_fixture("run.json"))); }
TEST(Golden, JUnit) { test::expect_golden("run.junit.xml", render_junit(test::load_fixture("run.json"))); }
TEST(Golden, Html) { test::expect_golden("run.html", render_html(test::load_fixture("run.json"), {"out"})); }
TEST(Golden, Markdown) { test::expect_golden("run.md", render_markdown(test::load_fixture("run.json"))); }
TEST(Golden, MarkdownTruncated) {
  test::expect_golden("run.truncated.md", render_markdown(test::load_fixture("run.json"), 1500));
}
TEST(Golden, Perfetto) { test::expect_golden("run.perfetto.json", render_perfetto(test::load_fixture("run.json"))); }
TEST(Golden, HostileHtml) { test::expect_golden("hostile.html", render_html(test::load_fixture("hostile.json"))); }
TEST(Golden, HostileJUnit) { test::expect_golden("hostile.junit.xml", render_junit(test::load_fixture("hostile.json"))); }
TEST(Golden, HostileMarkdown) { test::expect_golden("hostile.md", render_markdown(test::load_fixture("hostile.json"))); }

Comparison fixture_comparison() {
  std::vector<CompareRule> rules;
  for (const char* text : {"verdict", "removed", "peak:+5%", "recovery:+20%", "faults_visible"}) {
    auto rule = parse_fail_on(text);
    EXPECT_TRUE(rule) << rule.error();
    rules.push_back(rule.value());
  }
  return compare(test::load_fixture("base.json"), test::load_fixture("new.json"), rules);
}

TEST(Golden, CompareText) { test::expect_golden("compare.txt", render_comparison_text(fixture_comparison())); }
TEST(Golden, CompareMarkdown) { test::expect_golden("compare.md", render_comparison_markdown(fixture_comparison())); }

}  // namespace
}  // namespace oomh
