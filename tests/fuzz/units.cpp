// Fuzz target: byte sizes and durations (include/oomharness/units.h), as suites, `--fault`, OOMH_CAP and
// policy arguments write them. Parsing never throws; what it accepts formats without undefined behaviour.

#include <oomharness/units.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto b = oomh::parse_bytes(text)) {
    const double v = *b;
    OOMH_FUZZ_CHECK(v >= 0 && v < 18446744073709551616.0, "parse_bytes accepted a size outside uint64");
    (void)oomh::format_bytes(static_cast<uint64_t>(v));
  } else {
    OOMH_FUZZ_CHECK(!b.error().str().empty(), "parse_bytes failed without a message");
  }

  if (auto d = oomh::parse_duration(text)) {
    const double s = *d;
    OOMH_FUZZ_CHECK(s >= 0 && s <= oomh::kMaxDurationSeconds, "parse_duration accepted a duration outside [0, 1e9] s");
    (void)oomh::format_duration(s);
  } else {
    OOMH_FUZZ_CHECK(!d.error().str().empty(), "parse_duration failed without a message");
  }

  // The formatters on any value a measurement can produce: the leading bytes as a raw uint64 and double.
  if (size >= 8) {
    uint64_t raw;
    std::memcpy(&raw, data, sizeof raw);
    (void)oomh::format_bytes(raw);
    double seconds;
    std::memcpy(&seconds, data, sizeof seconds);
    // format_duration takes measured seconds, but must survive any double (its int overflow above 2^31
    // minutes, tests/fuzz/crashes/units/, is fixed).
    (void)oomh::format_duration(seconds);
  }
  return 0;
}
