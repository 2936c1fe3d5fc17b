// Fuzz target: the one rule engine's parsers (injector/engine/fault_plan.h, Note [One rule schema]): the
// plan the shim reads from OOMH_PLAN, one rule as the runner checks it, and OOMH_CAP. None may throw or
// crash, and what they accept must read back as itself: the runner hands the shim the JSON it normalised.

#include "engine/fault_plan.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto plan = oomh::inject::parse_fault_plan(text)) {
    const std::string once = oomh::inject::fault_plan_json(*plan);
    auto again = oomh::inject::parse_fault_plan(once);
    OOMH_FUZZ_CHECK(again, "a plan's own JSON does not parse back");
    OOMH_FUZZ_CHECK(oomh::inject::fault_plan_json(*again) == once, "a plan's JSON changes when read back");
  } else {
    OOMH_FUZZ_CHECK(!plan.error().empty(), "parse_fault_plan failed without a message");
  }

  auto rule = oomh::inject::check_rule(text);
  if (rule.ok()) {
    auto again = oomh::inject::check_rule(rule.value());
    OOMH_FUZZ_CHECK(again.ok(), "a checked rule's JSON does not check again");
    OOMH_FUZZ_CHECK(again.value() == rule.value(), "a checked rule's JSON changes when checked again");
  }

  (void)oomh::inject::parse_cap_option(text);
  return 0;
}
