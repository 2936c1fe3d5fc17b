// The malformed-suite corpus: each malformed/NAME.yaml must be refused, and its first error must read
// exactly as malformed/NAME.expected says ("NAME.yaml:L:C: message").

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "corpus.h"
#include "oomharness/runner/suite.h"

namespace oomh {
namespace {

namespace fs = std::filesystem;

const fs::path corpus_dir = fs::path(OOMH_SUITE_TEST_DIR) / "malformed";

std::vector<std::string> corpus() { return test::corpus_names(corpus_dir); }
using test::read_first_line;

class MalformedSuite : public ::testing::TestWithParam<std::string> {};

TEST_P(MalformedSuite, IsRefusedWithTheExpectedMessage) {
  const std::string name = GetParam();
  const fs::path expected_file = corpus_dir / (name + ".expected");
  ASSERT_TRUE(fs::exists(expected_file)) << name << ".yaml has no " << name << ".expected";
  const std::string expected = read_first_line(expected_file);
  ASSERT_FALSE(expected.empty()) << expected_file << " is empty";

  const std::string path = (corpus_dir / (name + ".yaml")).string();
  const auto load = load_suite(path);
  EXPECT_FALSE(load.ok());
  ASSERT_FALSE(load.error().empty());
  // Messages name the file as given; the corpus states them by the file's base name.
  std::string first = load.error().front().str();
  const std::string prefix = corpus_dir.string() + "/";
  ASSERT_EQ(first.rfind(prefix, 0), 0u) << first;
  first.erase(0, prefix.size());
  EXPECT_EQ(first, expected);
}

INSTANTIATE_TEST_SUITE_P(Corpus, MalformedSuite, ::testing::ValuesIn(corpus()),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

TEST(MalformedCorpus, IsLargeAndEveryExpectationHasItsSuite) {
  EXPECT_GE(corpus().size(), 30u);
  for (const auto& e : fs::directory_iterator(corpus_dir))
    if (e.path().extension() == ".expected") {
      EXPECT_TRUE(fs::exists(fs::path(e.path()).replace_extension(".yaml"))) << e.path() << " has no suite";
    }
}

}  // namespace
}  // namespace oomh
