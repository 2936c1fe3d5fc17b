// JobSpec::plan: a job's faults and memory caps as the fault plan the shim reads (docs/fault-plan.md).

#include "oomharness/runner/suite.h"

#include <set>

#include "oomharness/evidence.h"
#include "oomharness/policies/findings.h"
#include "oomharness/policies/registry.h"

namespace oomh {

nlohmann::json JobSpec::plan(bool with_faults) const {
  nlohmann::json rules = nlohmann::json::array();
  if (with_faults)
    for (const auto& f : faults) rules.push_back(f.rule);
  // Caps stay without faults: a reference run, or an attempt after `clear_faults`, still runs on the
  // smaller GPU the suite describes; only the injected failures go.
  nlohmann::json caps = nlohmann::json::array();
  if (memory.limit) caps.push_back({{"limit", *memory.limit}});
  for (const auto& change : memory.schedule) {
    nlohmann::json cap = {{"limit", change.limit}};
    if (change.at_step) cap["at"] = {{"step", *change.at_step}};
    else if (change.at_seconds) cap["at"] = {{"after", *change.at_seconds}};
    caps.push_back(std::move(cap));
  }
  nlohmann::json plan = {{"version", 1}, {"seed", 0}, {"rules", std::move(rules)}, {"caps", std::move(caps)}};
  if (memory.counts_footprint) plan["cap_counts"] = "footprint";
  return plan;
}

std::vector<int64_t> JobSpec::flush_steps(bool with_faults) const {
  std::set<int64_t> steps;
  if (with_faults)
    for (const auto& f : faults) {
      const nlohmann::json& when = f.rule.value("when", nlohmann::json::object());
      if (when.contains("step") && when["step"].is_number_integer()) steps.insert(when["step"].get<int64_t>());
      if (when.contains("steps") && when["steps"].is_object() && when["steps"].contains("from") &&
          when["steps"]["from"].is_number_integer())
        steps.insert(when["steps"]["from"].get<int64_t>());
    }
  for (const auto& change : memory.schedule)
    if (change.at_step) steps.insert(*change.at_step);
  return {steps.begin(), steps.end()};
}

std::string JobSpec::evidence() const {
  // Note [Findings on every job] (policies/findings.h)
  std::set<EvidenceKind> wanted(std::begin(kFindingsEvidence), std::end(kFindingsEvidence));
  for (const ExpectSpec& e : expect)
    if (const PolicyInfo* p = find_policy(e.policy)) wanted.insert(p->evidence.begin(), p->evidence.end());
  // A fault that waits for a step or a phase needs the probe to write the phase (a step fault fires in the
  // step's training work: Note [Where a step fault fires] in injector/engine/fault_plan.h), and so does a sweep's
  // golden run, which records each allocation of a step with its phase (OOMH_RECORD_STEP).
  for (const FaultSpec& f : faults) {
    const nlohmann::json& when = f.rule.value("when", nlohmann::json::object());
    if (when.is_object() && (when.contains("phase") || when.contains("step") || when.contains("steps")))
      wanted.insert(EvidenceKind::phases);
  }
  if (env.count("OOMH_RECORD_STEP")) wanted.insert(EvidenceKind::phases);
  std::string out;
  for (const auto& e : kEvidenceKinds)
    if (wanted.count(e.value)) out += (out.empty() ? "" : ",") + std::string(e.name);
  return out;
}

}  // namespace oomh
