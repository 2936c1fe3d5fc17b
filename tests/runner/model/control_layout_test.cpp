// The control block's layout as the Python probe spells it (python/oomharness/_control.py, which
// tests/python/harness.py reads too) against the C++ layout (include/oomharness/control_block.h): every
// `_OFF_NAME = N` must be offsetof(ControlBlock, name), CONTROL_BYTES sizeof(ControlBlock), and the phase
// numbers oomh::Phase's. The Python file is read as text, so that no Python is needed to check it.

#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "oomharness/control_block.h"

namespace oomh {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kControlPy = std::string(OOMH_SOURCE_DIR) + "/python/oomharness/_control.py";

// Every field the probe names, with its C++ offset. A new _OFF_ name in the Python file must be added here.
const std::map<std::string, size_t>& cxx_offsets() {
  static const std::map<std::string, size_t> m = {
      {"MAGIC", offsetof(ControlBlock, magic)},
      {"VERSION", offsetof(ControlBlock, version)},
      {"SIZE", offsetof(ControlBlock, size)},
      {"STEP", offsetof(ControlBlock, step)},
      {"PHASE", offsetof(ControlBlock, phase)},
      {"BATCH_SIZE", offsetof(ControlBlock, batch_size)},
      {"EVENTS_WRITTEN", offsetof(ControlBlock, events_written)},
      {"OOMS_SEEN", offsetof(ControlBlock, ooms_seen)},
      {"OOMS_CAUGHT", offsetof(ControlBlock, ooms_caught)},
      {"EMPTY_CACHE_CALLS", offsetof(ControlBlock, empty_cache_calls)},
      {"PROBE_EVENTS_WRITTEN", offsetof(ControlBlock, probe_events_written)},
  };
  return m;
}

// `NAME = <python integer expression of + * and numbers>`: evaluated here (only what _control.py uses).
long long eval_sum_of_products(const std::string& expr) {
  long long total = 0;
  std::string e;
  for (char c : expr)
    if (c != ' ') e += c;
  // Parenthesised groups first: "256*(16+8*16)".
  std::regex group(R"(\(([0-9+*]+)\))");
  std::smatch m;
  while (std::regex_search(e, m, group)) e = m.prefix().str() + std::to_string(eval_sum_of_products(m[1].str())) + m.suffix().str();
  std::stringstream terms(e);
  std::string term;
  while (std::getline(terms, term, '+')) {
    long long product = 1;
    std::stringstream factors(term);
    std::string f;
    while (std::getline(factors, f, '*')) product *= std::stoll(f);
    total += product;
  }
  return total;
}

TEST(ControlLayout, PythonOffsetsAreTheCxxOffsets) {
  const std::string text = read_text(kControlPy);
  ASSERT_FALSE(text.empty()) << kControlPy;
  std::regex off(R"(^_OFF_([A-Z_]+) = (\d+)$)", std::regex::multiline);
  size_t seen = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), off); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1].str();
    const size_t value = std::stoul((*it)[2].str());
    auto known = cxx_offsets().find(name);
    ASSERT_NE(known, cxx_offsets().end()) << "_control.py names _OFF_" << name << ": add it to this test's table";
    EXPECT_EQ(value, known->second) << "_OFF_" << name;
    ++seen;
  }
  EXPECT_EQ(seen, cxx_offsets().size()) << "a field of the table is no longer named in _control.py";
}

TEST(ControlLayout, PythonSizesAndConstantsAreTheCxxOnes) {
  const std::string text = read_text(kControlPy);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\nCONTROL_BYTES = ([0-9 +*()]+)\n)")));
  EXPECT_EQ(eval_sum_of_products(m[1].str()), static_cast<long long>(sizeof(ControlBlock)));
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\n_HEADER_BYTES = (\d+)\n)")));
  EXPECT_EQ(std::stoul(m[1].str()), offsetof(ControlBlock, devices));
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\nMAGIC = 0x([0-9A-Fa-f]+)\n)")));
  EXPECT_EQ(std::stoul(m[1].str(), nullptr, 16), kControlMagic);
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\nVERSION = (\d+)\n)")));
  EXPECT_EQ(std::stoul(m[1].str()), kControlVersion);
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\nUNKNOWN_STEP = (-?\d+)\n)")));
  EXPECT_EQ(std::stoll(m[1].str()), kUnknownStep);
}

TEST(ControlLayout, PythonPhasesAreTheCxxPhases) {
  const std::string text = read_text(kControlPy);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\nPHASES = \{([^}]*)\})")));
  const std::string body = m[1].str();
  std::regex entry(R"xx("([a-z_]+)": (\d+))xx");
  size_t n = 0;
  for (auto it = std::sregex_iterator(body.begin(), body.end(), entry); it != std::sregex_iterator(); ++it) {
    Phase p{};
    ASSERT_TRUE(phase_from_name((*it)[1].str().c_str(), p)) << "phase '" << (*it)[1] << "' is not a C++ phase";
    EXPECT_EQ(static_cast<uint32_t>(p), std::stoul((*it)[2].str())) << (*it)[1];
    ++n;
  }
  EXPECT_EQ(n, kPhases.size()) << "the Python probe must know every oomh::Phase (kPhases)";
}

// The checker itself must be able to fail: a wrong offset in a copy of the text is caught.
TEST(ControlLayout, AWrongOffsetIsCaught) {
  std::string text = read_text(kControlPy);
  const std::string right = "_OFF_BATCH_SIZE = 40";
  size_t at = text.find(right);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, right.size(), "_OFF_BATCH_SIZE = 48");
  std::regex off(R"(^_OFF_BATCH_SIZE = (\d+)$)", std::regex::multiline);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, off));
  EXPECT_NE(std::stoul(m[1].str()), offsetof(ControlBlock, batch_size));
  EXPECT_EQ(eval_sum_of_products("128 + 64 * 16 + 256 * (16 + 8 * 16) + 8 + 64 * 1024"), 103560);
}

}  // namespace
}  // namespace oomh
