// Formatting and reading numbers from any double or JSON value: what a results file or a suite can hold never
// overflows an int or is cast out of range.

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "oomharness/json_number.h"
#include "oomharness/units.h"
#include "text.h"

namespace oomh {
namespace {

TEST(FormatDuration, OrdinaryDurations) {
  EXPECT_EQ(format_duration(0.25), "250ms");
  EXPECT_EQ(format_duration(1.5), "1.5s");
  EXPECT_EQ(format_duration(125), "2m05s");
  EXPECT_EQ(format_duration(3599.9), "59m59s");
}

// 2147483648m (issue 12) overflowed `static_cast<int>(seconds / 60)`: undefined behaviour.
TEST(FormatDuration, HugeAndOddValuesDoNotOverflow) {
  EXPECT_EQ(format_duration(2147483648.0 * 60), "2147483648m00s");
  EXPECT_EQ(format_duration(1e30), "1e+30s");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "infs");
  EXPECT_EQ(format_duration(std::nan("")), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::max()), "1.8e+308s");
}

// A results file's start time is whatever the file says (fuzz_results: 1.8e29 cast to time_t).
TEST(Iso8601, TimesNoCalendarHoldsAreLeftOut) {
  EXPECT_EQ(text::iso8601_utc(1795460228.5), "2026-11-23T18:57:08");
  EXPECT_EQ(text::iso8601_utc(253402300799.0), "9999-12-31T23:59:59");
  for (double bad : {0.0, -5.0, 253402300800.0, 1.8e29, std::numeric_limits<double>::infinity(), std::nan("")})
    EXPECT_EQ(text::iso8601_utc(bad), "") << bad;
}

// Byte figures a job wrote as doubles: below 0 and NaN read 0, past 2^64 read its end, never a cast.
TEST(SaturatingBytes, FiguresOutsideUint64AreClamped) {
  EXPECT_EQ(saturating_bytes(4096.7), 4096u);
  EXPECT_EQ(saturating_bytes(-1e300), 0u);
  EXPECT_EQ(saturating_bytes(std::nan("")), 0u);
  EXPECT_EQ(saturating_bytes(18446744073709551616.0), UINT64_MAX);
  EXPECT_EQ(saturating_bytes(1e300), UINT64_MAX);
  EXPECT_EQ(format_bytes_figure(1.5 * 1024 * 1024), "1.50 MiB");
}

// Note [Whole numbers from JSON]
TEST(WholeNumber, OnlyWholeNumbersWithinTheTypeAreRead) {
  using nlohmann::json;
  EXPECT_EQ(whole_number<int>(json(7)), 7);
  EXPECT_EQ(whole_number<int>(json(-7.0)), -7);
  EXPECT_EQ(whole_number<int>(json(2147483647)), 2147483647);
  EXPECT_EQ(whole_number<int>(json(-2147483648.0)), std::numeric_limits<int>::min());
  EXPECT_EQ(whole_number<int>(json(2147483648LL)), std::nullopt);
  EXPECT_EQ(whole_number<int>(json(2147483648.0)), std::nullopt);
  EXPECT_EQ(whole_number<int>(json(2.5)), std::nullopt);
  EXPECT_EQ(whole_number<int>(json(1e30)), std::nullopt);
  EXPECT_EQ(whole_number<int>(json(std::nan(""))), std::nullopt);
  EXPECT_EQ(whole_number<int>(json("7")), std::nullopt);
  EXPECT_EQ(whole_number<int>(json(true)), std::nullopt);
  EXPECT_EQ(whole_number<uint64_t>(json(UINT64_MAX)), UINT64_MAX);
  EXPECT_EQ(whole_number<uint64_t>(json(-1)), std::nullopt);
  EXPECT_EQ(whole_number<uint64_t>(json(18446744073709551616.0)), std::nullopt);
  EXPECT_EQ(whole_number<int64_t>(json(UINT64_MAX)), std::nullopt);
  EXPECT_EQ(whole_number<int64_t>(json(-9223372036854775808.0)), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(whole_number<int64_t>(json(9223372036854775808.0)), std::nullopt);
  EXPECT_EQ(whole_member_or(json{{"n", 1e30}}, "n", int64_t{-1}), -1);
  EXPECT_EQ(whole_member_or(json(5), "n", int64_t{-1}), -1);
  EXPECT_THROW(whole_member(json{{"n", 2.5}}, "n", 0), std::runtime_error);
  EXPECT_THROW(read_whole<int>(json(1e30)), std::runtime_error);
  EXPECT_EQ(read_whole<int>(json(-3)), -3);
  EXPECT_EQ(whole_member(json{{"n", nullptr}}, "n", 3), 3);
}

}  // namespace
}  // namespace oomh
