// write_file_atomic: the file appears whole or not at all, errors name the path, no temporary is left.

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "oomharness/reports/writers.h"
#include "support.h"

namespace oomh {
namespace {

namespace fs = std::filesystem;

class WriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("oomh-reports-write-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

TEST_F(WriteTest, WritesAndReplacesLeavingNoTemporary) {
  const std::string path = (dir_ / "report.html").string();
  ASSERT_TRUE(write_file_atomic(path, "first"));
  auto second = write_file_atomic(path, std::string(3 << 20, 'z'));
  ASSERT_TRUE(second) << second.error();
  EXPECT_EQ(test::read_text(path), std::string(3 << 20, 'z'));
  EXPECT_EQ(listing(), std::vector<std::string>{"report.html"});
}

TEST_F(WriteTest, MissingDirectoryIsNamed) {
  const std::string path = (dir_ / "no" / "such" / "results.json").string();
  auto r = write_file_atomic(path, "{}");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find(path), std::string::npos) << r.error();
  EXPECT_TRUE(listing().empty());
}

TEST_F(WriteTest, FailedRenameRemovesTheTemporary) {
  fs::create_directories(dir_ / "taken" / "inside");  // a non-empty directory where the file should go
  const std::string path = (dir_ / "taken").string();
  auto r = write_file_atomic(path, "content");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find(path), std::string::npos) << r.error();
  EXPECT_EQ(listing(), std::vector<std::string>{"taken"});
}

TEST_F(WriteTest, ParentIsAFile) {
  { std::ofstream(dir_ / "file") << "x"; }
  const std::string path = (dir_ / "file" / "report.xml").string();
  auto r = write_file_atomic(path, "content");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("cannot write " + path), std::string::npos) << r.error();
  EXPECT_EQ(listing(), std::vector<std::string>{"file"});
}

TEST(Write, EmptyPathIsAnError) { EXPECT_FALSE(write_file_atomic("", "x")); }

}  // namespace
}  // namespace oomh
