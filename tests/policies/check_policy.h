#pragma once
// One check of the registry run on a trace, as a suite would run it: its arguments normalised (a bad one
// fails the test), its verdict named after it. Shared by the policies' tests.

#include <gmock/gmock.h>
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
  auto normalised = normalise_args(*p, args);
  EXPECT_TRUE(normalised.ok()) << normalised.error().message;
  if (normalised) args = std::move(normalised).value();
  Verdict v = evaluate(*p, trace, args);
  EXPECT_EQ(v.policy, name);
  return v;
}

}  // namespace oomh::testing

// A verdict's status (a VerdictStatus enumerator) and a phrase its reason must contain.
#define EXPECT_VERDICT(v, want, phrase)                                 \
  do {                                                                  \
    ::oomh::Verdict v_ = (v);                                           \
    EXPECT_EQ(v_.status, ::oomh::VerdictStatus::want) << v_.reason;     \
    EXPECT_THAT(v_.reason, ::testing::HasSubstr(phrase));               \
  } while (0)
