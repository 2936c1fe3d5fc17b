// The HTML report with hostile job names and output (Note [HTML safety] in reports/src/html.cpp): every
// tag in the page is one the renderer writes, no attribute is an event handler, and the only script is ours.

#include <cctype>
#include <set>

#include <gtest/gtest.h>

#include "oomharness/reports/terminal_text.h"
#include "oomharness/reports/writers.h"
#include "sha256.h"
#include "support.h"

namespace oomh {
namespace {

struct Tag {
  std::string name;
  std::vector<std::string> attributes;
};

// A small tag scanner: enough to list what a browser would see as elements and attribute names.
std::vector<Tag> scan_tags(const std::string& html) {
  std::vector<Tag> tags;
  size_t i = 0;
  while ((i = html.find('<', i)) != std::string::npos) {
    ++i;
    if (i < html.size() && (html[i] == '/' || html[i] == '!')) continue;
    Tag tag;
    while (i < html.size() && (std::isalnum(static_cast<unsigned char>(html[i])) || html[i] == '-'))
      tag.name += static_cast<char>(std::tolower(static_cast<unsigned char>(html[i++])));
    if (tag.name.empty()) continue;  // "< " is text
    const bool raw_text = tag.name == "script" || tag.name == "style";
    while (i < html.size() && html[i] != '>') {
      while (i < html.size() && (std::isspace(static_cast<unsigned char>(html[i])) || html[i] == '/')) ++i;
      std::string attr;
      while (i < html.size() && !std::isspace(static_cast<unsigned char>(html[i])) && html[i] != '=' && html[i] != '>' &&
             html[i] != '/')
        attr += static_cast<char>(std::tolower(static_cast<unsigned char>(html[i++])));
      if (!attr.empty()) tag.attributes.push_back(attr);
      if (i < html.size() && html[i] == '=') {
        ++i;
        if (i < html.size() && (html[i] == '"' || html[i] == '\'')) {
          const char q = html[i];
          i = html.find(q, i + 1);
          if (i == std::string::npos) return tags;
          ++i;
        } else {
          while (i < html.size() && !std::isspace(static_cast<unsigned char>(html[i])) && html[i] != '>') ++i;
        }
      }
    }
    tags.push_back(tag);
    if (raw_text) i = html.find("</" + tag.name, i);  // script and style bodies are not markup
    if (i == std::string::npos) break;
  }
  return tags;
}

TEST(HtmlSafety, HostileStringsNeverBecomeMarkup) {
  const std::string html = render_html(test::load_fixture("hostile.json"));
  const std::set<std::string> ours = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "span",
                                      "div", "table", "thead", "tbody", "tr", "th", "td", "a", "code", "dl", "dt",
                                      "dd", "section", "details", "summary", "pre", "br", "i", "b", "ul", "li", "svg", "line",
                                      "text", "path", "circle", "rect", "script"};
  int scripts = 0;
  for (const Tag& tag : scan_tags(html)) {
    EXPECT_TRUE(ours.count(tag.name)) << "unexpected element <" << tag.name << ">";
    if (tag.name == "script") ++scripts;
    for (const std::string& attr : tag.attributes)
      EXPECT_FALSE(attr.rfind("on", 0) == 0) << "event handler attribute " << attr << " on <" << tag.name << ">";
  }
  EXPECT_EQ(scripts, 1);
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"), std::string::npos);
  EXPECT_EQ(html.find("href=\"javascript:"), std::string::npos);
}

TEST(HtmlSafety, ContentSecurityPolicyForbidsLoadsAndPinsOurScript) {
  const std::string html = render_html(test::load_fixture("run.json"));
  EXPECT_NE(html.find("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"), std::string::npos);
  const size_t open = html.find("<script>") + 8;
  const std::string script = html.substr(open, html.find("</script>", open) - open);
  const auto digest = detail::sha256(script);
  EXPECT_NE(html.find("script-src 'sha256-" + detail::base64(digest.data(), digest.size()) + "'"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // the SVG namespace is not a load
  EXPECT_EQ(html.find("src="), std::string::npos);
}

TEST(HtmlSafety, Sha256KnownDigests) {
  const auto hex = [](const std::array<uint8_t, 32>& d) {
    std::string s;
    for (uint8_t b : d) { char buf[3]; std::snprintf(buf, sizeof buf, "%02x", b); s += buf; }
    return s;
  };
  EXPECT_EQ(hex(detail::sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(detail::sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(detail::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(detail::sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const uint8_t man[] = {'M', 'a', 'n', 'M', 'a'};
  EXPECT_EQ(detail::base64(man, 5), "TWFuTWE=");
}

TEST(Html, SimulatedBannerSnapshotLinkAndChart) {
  const std::string html = render_html(test::load_fixture("run.json"), {"out"});
  EXPECT_NE(html.find("device simulated (CPU driver double)"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"jobs/resume-broken/oom_snapshot.pickle\">"), std::string::npos);
  EXPECT_NE(html.find("pytorch.org/memory_viz"), std::string::npos);
  EXPECT_NE(html.find("<svg class=\"chart\""), std::string::npos);
  EXPECT_NE(html.find("restart: attempt 2 started"), std::string::npos);  // attempts are named from 1
  EXPECT_NE(html.find("injected fault (visible)"), std::string::npos);
  EXPECT_NE(html.find("injected fault (absorbed)"), std::string::npos);
  RunResult real = test::load_fixture("run.json");
  real.environment.simulated_device = false;
  EXPECT_EQ(render_html(real).find("device simulated"), std::string::npos);
}

TEST(Html, AttemptsAreNumberedFromOne) {
  const std::string html = render_html(test::load_fixture("run.json"), {"out"});
  EXPECT_NE(html.find("<summary>output of attempt 2 (ok)"), std::string::npos);
  EXPECT_NE(html.find("attempt 2, 6.90s: loaded checkpoint step 0"), std::string::npos);
  EXPECT_NE(html.find("<tr><td class=\"num\">2</td><td>ok</td>"), std::string::npos);
  EXPECT_EQ(html.find("attempt 0"), std::string::npos);
}

TEST(Html, ExpectedFailuresHaveTheirOwnBadges) {
  const std::string html = render_html(test::load_fixture("run.json"), {"out"});
  EXPECT_NE(html.find("leak-caught <span class=\"badge s-xfail\">XFAIL</span></h3>"), std::string::npos);
  EXPECT_NE(html.find("leak-missed <span class=\"badge s-xpass\">XPASS</span></h3>"), std::string::npos);
  EXPECT_NE(html.find("<p class=\"message\">Expected failure: memory_stable failed as expected (must_fail): "),
            std::string::npos);
  EXPECT_NE(html.find("<span class=\"badge v-xfail\">xfail</span> <span class=\"muted\">(must fail)</span>"),
            std::string::npos);
  EXPECT_NE(html.find("<span>1 xfailed</span><span>1 xpassed</span>"), std::string::npos);
}

TEST(Html, HeadlineSaysNothingWasTestedAndIsNeverGreenThen) {
  RunResult run;
  run.suites.push_back({"s", "s.yaml", 0, 1, {}});
  JobResult job;
  job.name = "absorbed";
  job.status = JobStatus::inconclusive;
  run.suites[0].jobs = {job};
  const std::string html = render_html(run);
  EXPECT_NE(html.find("<title>oomharness: nothing was tested: 1 inconclusive</title>"), std::string::npos);
  EXPECT_NE(html.find("<p class=\"headline h-none\">nothing was tested: 1 inconclusive</p>"), std::string::npos);
  EXPECT_NE(html.find("<div class=\"banner\">Nothing was tested"), std::string::npos);
  EXPECT_EQ(html.find("h-ok"), html.find(".h-ok{") + 1);  // only the style sheet names the green headline
  EXPECT_EQ(html.find("h-ok", html.find(".h-ok{") + 2), std::string::npos);
  run.suites[0].jobs[0].status = JobStatus::passed;
  const std::string unchecked = render_html(run);  // Note [A pass that did not check completion]
  EXPECT_NE(unchecked.find("<p class=\"headline h-ok\">1 passed (no target step: completion not checked)</p>"),
            std::string::npos);
  run.suites[0].jobs[0].target_step = 10;
  const std::string green = render_html(run);
  EXPECT_NE(green.find("<p class=\"headline h-ok\">1 passed</p>"), std::string::npos);
  EXPECT_EQ(green.find("Nothing was tested"), std::string::npos);
  EXPECT_NE(render_html(test::load_fixture("run.json")).find("<p class=\"headline h-fail\">"), std::string::npos);
}

// Issue 15: a job with ranks gets one memory line per rank (rank_timeline), not the per-device timeline in
// which the ranks' figures mix; results.json keeps both, and reads rank_timeline back.
TEST(Html, OneMemoryLinePerRank) {
  RunResult run;
  run.suites.push_back({"s", "s.yaml", 0, 1, {}});
  JobResult job;
  job.name = "ddp";
  job.status = JobStatus::passed;
  job.duration = 3;
  job.timeline[0] = {{0.5, 100, 0, 1}, {1.0, 300, 0, 1}, {1.5, 120, 0, 2}};  // ranks 0 and 1 interleaved
  job.rank_timeline[0] = {{0.5, 100, 1000, 1}, {1.5, 120, 1000, 2}};
  job.rank_timeline[1] = {{1.0, 300, 1000, 1}, {2.0, 320, 1000, 2}};
  run.suites[0].jobs = {job};
  const std::string html = render_html(run);
  EXPECT_NE(html.find("<title>held, rank 0</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>held, rank 1</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>cap, rank 1</title>"), std::string::npos);
  EXPECT_NE(html.find("</i>held, rank 1</span>"), std::string::npos);
  EXPECT_EQ(html.find("held, GPU"), std::string::npos) << "the mixed per-device line must not be drawn";
  auto back = parse_results(render_json(run), "results.json");
  ASSERT_TRUE(back) << back.error();
  ASSERT_EQ(back.value().suites.at(0).jobs.at(0).rank_timeline.size(), 2u);
  EXPECT_EQ(back.value().suites[0].jobs[0].rank_timeline.at(1).at(1).held, 320u);
  run.suites[0].jobs[0].rank_timeline.clear();  // a job without ranks: per device, as before
  EXPECT_NE(render_html(run).find("<title>held, GPU 0</title>"), std::string::npos);
}

// Note [Text for a terminal]: printable text passes, and whatever could steer a terminal is shown, not sent.
TEST(TerminalText, ShowsControlsEscapesC1AndBidiVisibly) {
  EXPECT_EQ(terminal_text("plain text, tabs\tand\nnewlines, caf\xC3\xA9"), "plain text, tabs\tand\nnewlines, caf\xC3\xA9");
  EXPECT_EQ(terminal_text("a\x1B]0;title\x07" "b"), "a\\x1B]0;title\\x07b");
  EXPECT_EQ(terminal_text("\x1B[2J\r\x7F"), "\\x1B[2J\\x0D\\x7F");
  EXPECT_EQ(terminal_text("c1\xC2\x9B" "2J"), "c1\\u{009B}2J");
  EXPECT_EQ(terminal_text("bidi\xE2\x80\xAE" "txet"), "bidi\\u{202E}txet");
  EXPECT_EQ(terminal_text("bad\xFF\xC3"), "bad\\xFF\\xC3");
  EXPECT_EQ(terminal_text(std::string("nul\0byte", 8)), "nul\\x00byte");
}

}  // namespace
}  // namespace oomh
