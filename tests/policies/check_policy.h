#pragma once
// One check of the registry run on a trace, as a suite would run it: its arguments normalised (a bad one
// fails the test), its verdict named after it. Shared by the policies' tests.

#include <gtest/gtest.h>

#include <string>

#include "oomharness/policies/registry.h"

namespace oomh::testing {

inline Verdict check(const std::string& name, const Trace& trace, nlohmann::json args = nullptr) {
  const PolicyInfo* p = find_policy(name);
  if (!p) {
    ADD_FAILURE() << "no policy " << name;
    return {};
  }
  auto err = normalise_args(*p, args);
  EXPECT_FALSE(err.has_value()) << (err ? err->message : "");
  Verdict v = evaluate(*p, trace, args);
  EXPECT_EQ(v.policy, name);
  return v;
}

}  // namespace oomh::testing
