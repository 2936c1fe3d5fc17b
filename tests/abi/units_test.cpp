#include "oomharness/units.h"

#include <gtest/gtest.h>

namespace {

uint64_t bytes(const char* s) {
  auto r = oomh::parse_bytes(s);
  EXPECT_TRUE(r) << s << ": " << r.error().str();
  return r ? static_cast<uint64_t>(*r) : 0;
}

TEST(ParseBytes, BinaryAndDecimalUnits) {
  EXPECT_EQ(bytes("8GiB"), 8ull << 30);
  EXPECT_EQ(bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(bytes("1.5GB"), 1500000000ull);
  EXPECT_EQ(bytes("0"), 0ull);
  EXPECT_EQ(bytes("4096"), 4096ull);
  EXPECT_EQ(bytes("64 KiB"), 65536ull);
  EXPECT_EQ(bytes("1TiB"), 1ull << 40);
  EXPECT_EQ(bytes("10B"), 10ull);
  EXPECT_EQ(bytes("2kB"), 2000ull);
  EXPECT_EQ(bytes(" 1MiB "), 1ull << 20);
  EXPECT_EQ(bytes("1.5KiB"), 1536ull);
}

TEST(ParseBytes, BadValuesQuoteTheInput) {
  for (const char* s : {"", "GiB", "-1GiB", "12XB", "1.5", "eight", "1..5GiB", "1e3"}) {
    auto r = oomh::parse_bytes(s);
    EXPECT_FALSE(r) << s;
    EXPECT_NE(r.error().str().find(std::string("'") + s + "'"), std::string::npos) << r.error().str();
  }
  EXPECT_NE(oomh::parse_bytes("12XB").error().str().find("unknown unit 'XB'"), std::string::npos);
  EXPECT_FALSE(oomh::parse_bytes("99999999TiB"));
}

TEST(ParseDuration, Units) {
  EXPECT_DOUBLE_EQ(*oomh::parse_duration("30s"), 30.0);
  EXPECT_DOUBLE_EQ(*oomh::parse_duration("5m"), 300.0);
  EXPECT_DOUBLE_EQ(*oomh::parse_duration("1h"), 3600.0);
  EXPECT_DOUBLE_EQ(*oomh::parse_duration("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(*oomh::parse_duration("1.5s"), 1.5);
  EXPECT_DOUBLE_EQ(*oomh::parse_duration("0"), 0.0);
  EXPECT_DOUBLE_EQ(*oomh::parse_duration("10"), 10.0);
}

TEST(ParseDuration, BadValues) {
  for (const char* s : {"", "s", "-3s", "3 days", "fast"}) {
    auto r = oomh::parse_duration(s);
    EXPECT_FALSE(r) << s;
    EXPECT_NE(r.error().str().find(std::string("'") + s + "'"), std::string::npos) << r.error().str();
  }
}

TEST(Format, BytesAndDurations) {
  EXPECT_EQ(oomh::format_bytes(17), "17 B");
  EXPECT_EQ(oomh::format_bytes(8ull << 30), "8.00 GiB");
  EXPECT_EQ(oomh::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(oomh::format_duration(0.25), "250ms");
  EXPECT_EQ(oomh::format_duration(1.5), "1.5s");
  EXPECT_EQ(oomh::format_duration(125), "2m05s");
}

}  // namespace
