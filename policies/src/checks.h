#pragma once
// The recovery checks, one function each (registry.cpp lists them with their arguments). Each is a pure
// function of the trace and its normalised arguments; the registry adds the policy name and arguments to
// the verdict and applies the absorption rule to the recovery checks (Note [Absorbed faults]).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "oomharness/policies/trace.h"
#include "oomharness/policies/verdict.h"

namespace oomh::checks {

Verdict exit_code(const Trace& trace, const nlohmann::json& args);
Verdict completes(const Trace& trace, const nlohmann::json& args);
Verdict oom_visible(const Trace& trace, const nlohmann::json& args);
Verdict batch_halving(const Trace& trace, const nlohmann::json& args);
Verdict empty_cache_retry(const Trace& trace, const nlohmann::json& args);
Verdict checkpoint_resume(const Trace& trace, const nlohmann::json& args);
Verdict graceful_exit(const Trace& trace, const nlohmann::json& args);
Verdict memory_stable(const Trace& trace, const nlohmann::json& args);
Verdict peak_below(const Trace& trace, const nlohmann::json& args);
Verdict no_hang(const Trace& trace, const nlohmann::json& args);
Verdict ranks_recover_together(const Trace& trace, const nlohmann::json& args);
Verdict zero_grad(const Trace& trace, const nlohmann::json& args);
Verdict eval_no_grad(const Trace& trace, const nlohmann::json& args);
Verdict effective_batch(const Trace& trace, const nlohmann::json& args);

// Shared by the checks.
inline Verdict verdict(VerdictStatus status, std::string reason, std::vector<Evidence> evidence = {}) {
  Verdict v;
  v.status = status;
  v.reason = std::move(reason);
  v.evidence = std::move(evidence);
  return v;
}
// Whether training reached its target: the last attempt's highest step against Trace::target_step, or,
// without a target, the last attempt exiting 0. Returns the clause that says how it fell short
// ("training stopped at step 9 of 20"), nullopt when it reached it.
std::optional<std::string> target_missed(const Trace& trace);
// "reached step 20" / "exited with code 0": what reaching the target looked like, for pass reasons.
std::string target_reached(const Trace& trace);
// "%g" of a number.
std::string number_text(double v);

}  // namespace oomh::checks
