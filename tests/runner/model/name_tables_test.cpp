// Note [Name tables] in include/oomharness/name_table.h: the copies of each table that cannot include a C++
// header and are written by hand, checked against it: the man page, the bash completion and the docs. Each
// file is read as text, so that no Python is needed; a failure names the copy and the name it lacks or adds.
// The Python package's copies are not checked here: they are generated from the tables (Note [Generated, not
// checked] in runner/src/app/python_abi.cpp; the ctest python_abi_fresh).

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "oomharness/control_block.h"
#include "oomharness/events.h"
#include "oomharness/runner/name_tables.h"

namespace oomh {
namespace {

std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(OOMH_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first capture of `pattern` in the file (the test fails when there is none).
std::string captured(const std::string& relative, const std::string& pattern) {
  const std::string text = read_source(relative);
  EXPECT_FALSE(text.empty()) << relative << " could not be read";
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) {
    ADD_FAILURE() << relative << " no longer matches " << pattern;
    return {};
  }
  return m[1].str();
}

// "auto gpu virtual", "oom, nonzero", "`a`, `b`", "a|b", "(\"a\", \"b\")": the words, in order.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::regex word(R"([a-z_]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), word); it != std::sregex_iterator(); ++it)
    out.push_back(it->str());
  return out;
}

template <class T, size_t N>
void expect_names(const NameTable<T, N>& table, const std::vector<std::string>& copy, const std::string& where) {
  EXPECT_EQ(copy, names_of(table)) << where << " spells the list otherwise than the C++ table";
}

TEST(NameTables, TheLookupsReadTheTable) {
  EXPECT_EQ(value_named(kBackends, "slurm"), BackendKind::slurm);
  EXPECT_FALSE(value_named(kBackends, "Slurm"));
  EXPECT_EQ(name_of(kDevices, DeviceChoice::virtual_device), "virtual");
  EXPECT_EQ(names_text(kBackends, ", ", " or "), "local or slurm");
  EXPECT_EQ(names_text(kRestartReasons), "oom, nonzero, signal, any");
  EXPECT_EQ(suggest_name(kRestartReasons, "nonzeor"), "nonzero");
  EXPECT_EQ(suggest_name(kRestartReasons, "zzzzzz"), "");
  EXPECT_STREQ(phase_name(Phase::checkpoint), "checkpoint");
  for (const auto& e : kPhases) {
    Phase p{};
    ASSERT_TRUE(phase_from_name(std::string(e.name).c_str(), p)) << e.name;
    EXPECT_EQ(p, e.value);
  }
  // Every value once, every name once.
  std::set<std::string_view> kinds;
  for (const auto& e : events::kEventKinds) EXPECT_TRUE(kinds.insert(e.name).second) << e.name << " twice";
  for (size_t i = 0; i < kExitCodes.size(); ++i) EXPECT_EQ(to_int(kExitCodes[i].value), static_cast<int>(i));
}

TEST(NameTables, DevicesEverywhere) {
  expect_names(kDevices, words(captured("scripts/completion/oomharness.bash", R"re(--device\) COMPREPLY=\(\$\(compgen -W "([^"]*)")re")),
               "the bash completion's --device");
  expect_names(kDevices, words(captured("docs/oomharness.1", R"re(\\-\\-device " ([a-z|]+)")re")), "the man page's --device");
}

TEST(NameTables, RestartReasonsEverywhere) {
  expect_names(kRestartReasons,
               words(captured("scripts/completion/oomharness.bash", R"re(--restart-on\) COMPREPLY=\(\$\(compgen -W "([^"]*)")re")),
               "the bash completion's --restart-on");
  expect_names(kRestartReasons, words(captured("docs/oomharness.1", R"(says what restarts it \(([a-z, ]+)\))")),
               "the man page's --restart-on");
  expect_names(kRestartReasons, words(captured("docs/suite-format.md", R"(`on` \(list of ([`a-z, ]+);)")),
               "docs/suite-format.md's restart.on");
}

TEST(NameTables, BackendsEverywhere) {
  expect_names(kBackends, words(captured("docs/oomharness.1", R"re(\\-\\-backend " ([a-z|]+)")re")), "the man page's --backend");
  // The completion asks the command it completes (`oomharness dev backends`, which prints kBackends) rather
  // than keeping a copy; tests/install runs it against the installed command.
  EXPECT_FALSE(captured("scripts/completion/oomharness.bash",
                        R"re((--backend\) COMPREPLY=\(\$\(compgen -W "\$\("\$\{COMP_WORDS\[0\]\}" dev backends))re")
                   .empty())
      << "the bash completion's --backend does not ask `oomharness dev backends`";
}

TEST(NameTables, PhasesEverywhere) {
  // A fault's `when: {phase: ...}` names a phase the probe reports, never `none`.
  std::vector<std::string> reported;
  for (const auto& e : kPhases)
    if (e.value != Phase::none) reported.emplace_back(e.name);
  EXPECT_EQ(words(captured("docs/fault-plan.md", R"(\| `phase` \| the current phase: ([`a-z, ]+) \|)")), reported)
      << "docs/fault-plan.md's phase";
  expect_names(kPhases, words(captured("docs/probe.md", R"re(probe\.phase\("eval"\) +# ([a-z, ]+))re")), "docs/probe.md's probe.phase");
}

TEST(NameTables, ExitCodesEverywhere) {
  // The man page says what each status means in the table's words, in its order: "0 the jobs passed; 1 ...;
  // 5 nothing was tested (...)." (lines joined).
  const std::string status =
      std::regex_replace(captured("docs/oomharness.1", R"(\.SH EXIT STATUS\n([\s\S]*?)\n\.SH )"), std::regex(R"(\s+)"), " ");
  size_t from = 0;
  for (const auto& e : kExitCodes) {
    const std::string said = std::to_string(to_int(e.value)) + " " + std::string(e.help);
    const size_t at = status.find(said, from);
    if (at == std::string::npos) {
      ADD_FAILURE() << "the man page's EXIT STATUS does not say '" << said << "' (" << e.name << ", kExitCodes), after the codes before it";
      continue;
    }
    const char next = at + said.size() < status.size() ? status[at + said.size()] : '.';
    EXPECT_TRUE(next == ';' || next == '.') << "the man page says more about " << e.name << " than kExitCodes: "
                                            << status.substr(at, 120);
    from = at + said.size();
  }
}

TEST(NameTables, EventKindsEverywhere) {
  // Note [Event fields] in events.h: every kind has its fields, once each.
  for (const auto& k : events::kEventFields) {
    std::set<std::string> fields;
    std::istringstream words(std::string(k.fields));
    for (std::string w; words >> w;) EXPECT_TRUE(fields.insert(w).second) << k.kind << " lists the field " << w << " twice";
  }
  // docs/events.md has a row for every kind: `| src | `kind` ... |`.
  const std::string doc = read_source("docs/events.md");
  for (const auto& e : events::kEventKinds) {
    std::regex row("\\n\\| [a-z, ]+ \\| [^|]*`" + std::string(e.name) + "`");
    EXPECT_TRUE(std::regex_search(doc, row)) << "docs/events.md has no row for the kind '" << e.name << "'";
  }
}

// The checks can fail: a copy with a name missing is caught.
TEST(NameTables, AMissingNameIsCaught) {
  std::vector<std::string> copy = names_of(kDevices);
  copy.pop_back();
  EXPECT_NE(copy, names_of(kDevices));
  EXPECT_EQ(words("`oom`, `nonzero`"), (std::vector<std::string>{"oom", "nonzero"}));
  EXPECT_EQ(words(R"(("auto", "gpu"))"), (std::vector<std::string>{"auto", "gpu"}));
}

}  // namespace
}  // namespace oomh
