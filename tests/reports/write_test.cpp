// write_file_atomic: the file appears whole or not at all, errors name the path, no temporary is left.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

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

// Note [Where a report goes] in reports/src/write.cpp: a symlink stays a symlink, a FIFO or a device is
// written to, `-` is standard output.
TEST_F(WriteTest, SymlinkToAFileStaysALink) {
  { std::ofstream(dir_ / "real.md") << "old"; }
  fs::create_symlink("real.md", dir_ / "link.md");
  auto r = write_file_atomic((dir_ / "link.md").string(), "new");
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.md"));
  EXPECT_EQ(test::read_text((dir_ / "real.md").string()), "new");
  EXPECT_EQ(listing(), (std::vector<std::string>{"link.md", "real.md"}));
}

TEST_F(WriteTest, DanglingSymlinkCreatesItsTarget) {
  fs::create_directories(dir_ / "sub");
  fs::create_symlink("sub/later.json", dir_ / "link.json");
  auto r = write_file_atomic((dir_ / "link.json").string(), "{}");
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.json"));
  EXPECT_EQ(test::read_text((dir_ / "sub" / "later.json").string()), "{}");
}

TEST_F(WriteTest, SymlinkLoopIsAnError) {
  fs::create_symlink("b", dir_ / "a");
  fs::create_symlink("a", dir_ / "b");
  auto r = write_file_atomic((dir_ / "a").string(), "x");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find((dir_ / "a").string()), std::string::npos) << r.error();
}

TEST_F(WriteTest, FifoIsWrittenNotReplaced) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = test::read_text(fifo.string()); });
  auto r = write_file_atomic(fifo.string(), "through the pipe");
  reader.join();
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));
  // ... and through a symlink to it.
  fs::create_symlink("pipe", dir_ / "to-pipe");
  std::thread reader2([&] { got = test::read_text(fifo.string()); });
  auto r2 = write_file_atomic((dir_ / "to-pipe").string(), "again");
  reader2.join();
  ASSERT_TRUE(r2) << r2.error();
  EXPECT_EQ(got, "again");
  EXPECT_TRUE(fs::is_symlink(dir_ / "to-pipe"));
}

TEST_F(WriteTest, CharacterDeviceIsWrittenNotReplaced) {
  ASSERT_TRUE(write_file_atomic("/dev/null", "discarded"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  fs::create_symlink("/dev/null", dir_ / "null");
  ASSERT_TRUE(write_file_atomic((dir_ / "null").string(), "discarded"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "null"));
  EXPECT_EQ(listing(), std::vector<std::string>{"null"});
}

// `-`, /dev/stdout and /dev/fd/N write to the runner's own descriptors: here standard output is pointed
// at a file for the duration of the test.
TEST_F(WriteTest, DashAndDevStdoutAreStandardOutput) {
  const fs::path out = dir_ / "captured";
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ::dup2(fd, STDOUT_FILENO);
  auto a = write_file_atomic("-", "one\n");
  auto b = write_file_atomic("/dev/stdout", "two\n");
  auto c = write_file_atomic("/dev/fd/" + std::to_string(fd), "three\n");
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(fd);
  ASSERT_TRUE(a) << a.error();
  ASSERT_TRUE(b) << b.error();
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(test::read_text(out.string()), "one\ntwo\nthree\n");
  EXPECT_FALSE(fs::exists("-"));
  EXPECT_EQ(listing(), std::vector<std::string>{"captured"});
}

TEST(Write, EmptyPathIsAnError) { EXPECT_FALSE(write_file_atomic("", "x")); }

}  // namespace
}  // namespace oomh
