// Fuzz target: the suite loader (oomh::load_suite_text), as `oomharness validate` and `run` call it on a
// user's YAML. It never throws or crashes; it returns a suite or at least one error; and every job of a
// suite it accepts has a fault plan the shim accepts (Note [One rule schema] in injector/engine/fault_plan.h).

#include <oomharness/runner/suite.h>

#include "engine/fault_plan.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // A directory that does not exist: the loader must not need the files a suite names to check it.
  auto load = oomh::load_suite_text(text, "fuzz.yaml", "/nonexistent/oomh-fuzz");
  if (!load) {
    OOMH_FUZZ_CHECK(!load.error().empty(), "load_suite_text returned neither a suite nor an error");
    return 0;
  }
  for (const oomh::JobSpec& job : load->jobs) {
    for (bool with_faults : {true, false}) {
      const std::string plan = job.plan(with_faults).dump();
      auto parsed = oomh::inject::parse_fault_plan(plan);
      if (!parsed) std::fprintf(stderr, "job '%s': plan %s: %s\n", job.name.c_str(), plan.c_str(), parsed.error().c_str());
      OOMH_FUZZ_CHECK(parsed, "a suite that loads has a job whose fault plan the shim rejects");
      (void)job.flush_steps(with_faults);
    }
  }
  return 0;
}
