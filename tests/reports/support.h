#pragma once
// Shared by the report tests: fixture loading and golden-file comparison.

#include <string>

#include "oomharness/reports/result.h"

namespace oomh::test {

std::string data_path(const std::string& name);  // tests/reports/data/NAME
std::string read_text(const std::string& path);
RunResult load_fixture(const std::string& name);  // fails the test (and throws) when it does not load

// Compares `actual` with tests/reports/golden/NAME; OOMH_UPDATE_GOLDEN=1 rewrites the golden instead.
void expect_golden(const std::string& name, const std::string& actual);

}  // namespace oomh::test
