// Fuzz target: `-k` expressions (JobFilter, runner/include/oomharness/runner/cli_specs.h). Parsing never
// throws; a parsed filter matches any name without crashing. The input is "EXPR\nSUITE\nJOB": the
// expression, then a suite and a job name to match (defaults when the lines are missing).

#include <oomharness/runner/cli_specs.h>

#include <cstdint>
#include <string>

#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string parts[3] = {{}, "self-test", "batch_halving[bs=64]"};
  size_t from = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t nl = i < 2 ? input.find('\n', from) : std::string::npos;
    parts[i] = input.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
    if (nl == std::string::npos) break;
    from = nl + 1;
  }

  auto filter = oomh::JobFilter::parse(parts[0]);
  if (filter) {
    (void)filter->matches(parts[1], parts[2]);
    (void)filter->matches(parts[2], parts[1]);
    (void)filter->matches({}, {});
  } else {
    OOMH_FUZZ_CHECK(!filter.error().empty(), "JobFilter::parse failed without a message");
  }
  return 0;
}
