// format_duration on any double: what a results file or a suite can hold never overflows an int.

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "oomharness/units.h"

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

}  // namespace
}  // namespace oomh
