// Every suite the project ships under suites/ must load without errors: they are what users copy.

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "oomharness/runner/suite.h"

namespace oomh {
namespace {

namespace fs = std::filesystem;

TEST(ShippedSuites, AllLoadWithoutErrors) {
  const fs::path root = fs::path(OOMH_SOURCE_DIR) / "suites";
  if (!fs::exists(root)) GTEST_SKIP() << "no suites/ folder yet";
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && (e.path().extension() == ".yaml" || e.path().extension() == ".yml")) files.push_back(e.path());
  if (files.empty()) GTEST_SKIP() << "no suites under " << root;
  for (const auto& f : files) {
    const auto load = load_suite(f.string());
    std::string errors;
    for (const auto& e : load.error()) errors += e.str() + "\n";
    EXPECT_TRUE(load.ok()) << errors;
    if (load.ok()) {
      EXPECT_FALSE(load->jobs.empty()) << f;
      for (const auto& job : load->jobs) {
        EXPECT_FALSE(job.argv.empty()) << f << ": " << job.name;
      }
    }
  }
}

TEST(ShippedSuites, ExamplesExist) {
  const fs::path examples = fs::path(OOMH_SOURCE_DIR) / "suites" / "examples";
  size_t n = 0;
  if (fs::exists(examples))
    for (const auto& e : fs::directory_iterator(examples)) n += e.path().extension() == ".yaml";
  EXPECT_GE(n, 2u) << "suites/examples/ should hold the commented example suites";
}

}  // namespace
}  // namespace oomh
