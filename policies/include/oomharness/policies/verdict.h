#pragma once
// A verdict: what one recovery check concluded about one job, in one sentence a user can act on.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace oomh {

enum class VerdictStatus { pass, fail, inconclusive };

inline const char* to_string(VerdictStatus s) {
  switch (s) {
    case VerdictStatus::pass: return "pass";
    case VerdictStatus::fail: return "fail";
    case VerdictStatus::inconclusive: return "inconclusive";
  }
  return "inconclusive";
}

struct Evidence {
  int attempt = 0;
  double t = 0;
  std::string what;           // "OOM at step 5 (batch 64)", "step 6 ran at batch 64"
};

struct Verdict {
  std::string policy;         // registry name: "batch_halving"
  nlohmann::json args = nlohmann::json::object();
  VerdictStatus status = VerdictStatus::inconclusive;
  std::string reason;         // one sentence: "OOM at step 5 (batch 64) was caught, but step 6 ran at batch 64 again: no halving"
  std::vector<Evidence> evidence;
  // The suite says this check must fail (`must_fail: true`): the job is a broken trainer kept to show
  // that the check catches it. A fail is then the expected outcome and a pass is what fails the job.
  bool must_fail = false;
};

// Whether the verdict goes against what the suite expected, and so fails the job: a fail, or, for a check
// marked must_fail, a pass.
inline bool against_expectation(const Verdict& v) {
  return v.status == (v.must_fail ? VerdictStatus::pass : VerdictStatus::fail);
}

void to_json(nlohmann::json& j, const Evidence& e);
void from_json(const nlohmann::json& j, Evidence& e);
void to_json(nlohmann::json& j, const Verdict& v);
void from_json(const nlohmann::json& j, Verdict& v);

}  // namespace oomh
