#include "support.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "oomharness/reports/writers.h"

namespace oomh::test {

std::string data_path(const std::string& name) { return std::string(OOMH_REPORTS_TEST_DIR) + "/data/" + name; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

RunResult load_fixture(const std::string& name) {
  auto loaded = load_results(data_path(name));
  if (!loaded) {
    ADD_FAILURE() << loaded.error();
    throw std::runtime_error(loaded.error());
  }
  return loaded.value();
}

void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(OOMH_REPORTS_TEST_DIR) + "/golden/" + name;
  const char* update = std::getenv("OOMH_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    auto written = write_file_atomic(path, actual);
    ASSERT_TRUE(written) << written.error();
    return;
  }
  std::string expected;
  try {
    expected = read_text(path);
  } catch (const std::exception& e) {
    FAIL() << e.what() << " (run with OOMH_UPDATE_GOLDEN=1 to create it)";
  }
  if (expected == actual) return;
  // Name the first line that differs: a whole-file diff of an HTML report is unreadable.
  std::istringstream a(expected), b(actual);
  std::string la, lb;
  int line = 1;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) break;
    if (!ga || !gb || la != lb) {
      ADD_FAILURE() << path << ":" << line << ": differs from the rendered report (OOMH_UPDATE_GOLDEN=1 updates it)\n"
                    << "  golden:   " << (ga ? la.substr(0, 300) : "<end of file>") << "\n"
                    << "  rendered: " << (gb ? lb.substr(0, 300) : "<end of file>");
      return;
    }
    ++line;
  }
  ADD_FAILURE() << path << ": differs (line endings?)";
}

}  // namespace oomh::test
