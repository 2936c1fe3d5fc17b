// Fuzz target: the suite loader (oomh::load_suite_text), as `oomharness validate` and `run` call it on a
// user's YAML. It never throws or crashes; it returns a suite or at least one error; and every job of a
// suite it accepts has a fault plan the shim accepts (Note [One rule schema] in injector/engine/fault_plan.h).

#include <oomharness/runner/suite.h>

#include "engine/fault_plan.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_check.h"

namespace {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : 4;
    if (n == 4 || i + n >= s.size()) return false;  // a stray byte, or a sequence cut short
    uint32_t cp = n == 0 ? c : c & (0x3F >> n);
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// OOMH_FUZZ_SUITE_UTF8=1 skips inputs that are not valid UTF-8, so that a run can look past the open
// finding tests/fuzz/crashes/suite/fault-rule-invalid-utf8.yaml. Unset (CI): every input is tried.
const bool kUtf8Only = std::getenv("OOMH_FUZZ_SUITE_UTF8") != nullptr;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (kUtf8Only && !valid_utf8(text)) return 0;
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
