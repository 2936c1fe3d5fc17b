// Note [Sealed event lines] in include/oomharness/event_seal.h: the seal is Python's
// hashlib.blake2b(key=..., digest_size=16), a line sealed here is checked here, and one changed, unsealed or
// sealed under another key is told apart.

#include "oomharness/event_seal.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using namespace oomh::events;

struct Key {
  unsigned char bytes[kSealKeyBytes];
  explicit Key(unsigned char first) {
    for (size_t i = 0; i < kSealKeyBytes; ++i) bytes[i] = static_cast<unsigned char>(first + i);
  }
};

std::string hex_of(const Key& key, const std::string& text) {
  char hex[2 * kSealBytes];
  seal_hex(key.bytes, text, hex);
  return std::string(hex, sizeof hex);
}

// Computed by Python 3's hashlib.blake2b(text, key=bytes(range(1, 33)), digest_size=16).hexdigest(): empty,
// one block, around the 128-byte block boundary and over two blocks.
TEST(EventsSeal, IsPythonsKeyedBlake2b) {
  const Key key(1);
  EXPECT_EQ(hex_of(key, ""), "e2b54039ff142696133962440acfb945");
  EXPECT_EQ(hex_of(key, "abc"), "463d1373fbee2ab6b33c16b31b5f4889");
  EXPECT_EQ(hex_of(key, std::string(127, 'x')), "ce63b3467e7e9d3f22ea53db870308fb");
  EXPECT_EQ(hex_of(key, std::string(128, 'y')), "1dc60449e9cc6d3faec54280ecd581ce");
  EXPECT_EQ(hex_of(key, std::string(129, 'z')), "56a609e4457f9f500576de47dfe612a9");
  EXPECT_EQ(hex_of(key, std::string(300, 'q')), "467558b17604935adc9473c5a97f4180");
}

std::string sealed(const Key& key, EventLine& line) {
  char out[EventLine::kCapacity + kSealSuffixBytes];
  const size_t n = seal_line(key.bytes, line.data(), line.size(), out, sizeof out);
  return std::string(out, n);
}

SealCheck check(const Key& key, std::string line, std::string* text = nullptr) {
  if (!line.empty() && line.back() == '\n') line.pop_back();
  std::string buf(line.size(), '\0');
  size_t size = 0;
  const SealCheck c = check_seal(key.bytes, line, buf.data(), &size);
  if (text && c == SealCheck::sealed) *text = buf.substr(0, size);
  return c;
}

TEST(EventsSeal, ASealedLineChecksAndReadsAsTheLineItWas) {
  const Key key(7);
  EventLine line(kSrcProbe, kStep);
  line.add("step", 5).add("batch_size", 64);
  const std::string plain(line.data(), line.size());
  const std::string s = sealed(key, line);
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.back(), '\n');
  EXPECT_NE(s.find(",\"seal\":\""), std::string::npos);
  std::string text;
  EXPECT_EQ(check(key, s, &text), SealCheck::sealed);
  EXPECT_EQ(text + "\n", plain);
  auto j = nlohmann::json::parse(s);  // still one JSON object, the seal a key beside the others
  EXPECT_EQ(j["fields"]["step"], 5);
  EXPECT_EQ(j["seal"].get<std::string>().size(), 2 * kSealBytes);
}

TEST(EventsSeal, AChangedUnsealedOrForeignLineIsToldApart) {
  const Key key(7), other(9);
  EventLine line(kSrcProbe, kStep);
  line.add("step", 5).add("batch_size", 64);
  const std::string s = sealed(key, line);
  EXPECT_EQ(check(other, s), SealCheck::wrong);
  std::string changed = s;
  changed.replace(changed.find("\"step\":5"), 8, "\"step\":6");
  EXPECT_EQ(check(key, changed), SealCheck::wrong);
  EXPECT_EQ(check(key, std::string(line.data(), line.size())), SealCheck::unsealed);
  EXPECT_EQ(check(key, "{\"seal\":\"0123\"}"), SealCheck::unsealed);
  EXPECT_EQ(check(key, ""), SealCheck::unsealed);
  std::string bad_hex = s;
  bad_hex[bad_hex.size() - 4] = 'z';
  EXPECT_EQ(check(key, bad_hex), SealCheck::wrong);
}

TEST(EventsSeal, TheLongestLineStillSealsInOneWrite) {
  const Key key(3);
  EventLine line(kSrcProbe, kOom);
  const std::string big(900, 'x');
  for (int i = 0; i < 10; ++i) line.add(("k" + std::to_string(i)).c_str(), big.c_str());
  char path[] = "/tmp/oomh-seal-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(write_sealed(line, fd, key.bytes));
  const unsigned char zero[kSealKeyBytes] = {};
  EventLine plain(kSrcShim, kWarning);
  EXPECT_TRUE(write_sealed(plain.add("message", "no key"), fd, zero));  // an all-zero key seals nothing
  close(fd);
  std::ifstream in(path);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  unlink(path);
  EXPECT_EQ(check(key, first), SealCheck::sealed);
  EXPECT_EQ(nlohmann::json::parse(first)["fields"]["truncated"], true);
  EXPECT_EQ(check(key, second), SealCheck::unsealed);
  EXPECT_FALSE(seal_key_set(zero));
  EXPECT_TRUE(seal_key_set(key.bytes));
}

}  // namespace
