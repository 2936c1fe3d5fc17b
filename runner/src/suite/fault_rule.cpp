#include "suite/fault_rule.h"

#include <algorithm>
#include <iterator>

#include "engine/fault_plan.h"
#include "suite/names.h"

namespace oomh::suite {

namespace {

template <class Table>
std::vector<std::string> names(const Table& table) {
  return std::vector<std::string>(std::begin(table), std::end(table));
}

}  // namespace

std::vector<std::string> rule_keys_at(const std::vector<std::string>& path) {
  if (path.empty()) return names(inject::kRuleKeys);
  if (path == std::vector<std::string>{"when"}) return names(inject::kWhenKeys);
  if (path == std::vector<std::string>{"when", "steps"}) return names(inject::kStepsKeys);
  if (path == std::vector<std::string>{"fail"}) return names(inject::kFailKeys);
  return {};
}

Expected<nlohmann::json> check_fault_rule(const nlohmann::json& rule) {
  // A suite may hold any bytes: invalid UTF-8 in a value is replaced (U+FFFD), and the shim's parser then
  // refuses the value it cannot read, never the dump (tests/fuzz/crashes/suite/fault-rule-invalid-utf8.yaml).
  Expected<std::string> check = inject::check_rule(rule.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (check) return Expected<nlohmann::json>::success(nlohmann::json::parse(check.value()));
  Error problem = std::move(check.error());
  if (problem.kind == Error::Kind::unknown_key && !problem.path.empty()) {
    const std::vector<std::string> map_path(problem.path.begin(), problem.path.end() - 1);
    problem.suggestion = suggestion(problem.path.back(), rule_keys_at(map_path), "known keys");
  }
  return Expected<nlohmann::json>::failure(std::move(problem));
}

std::optional<std::string> check_fault_plan(const nlohmann::json& plan) {
  Expected<inject::FaultPlan, std::string> r =
      inject::parse_fault_plan(plan.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (r) return std::nullopt;
  return r.error();
}

std::optional<Error> steps_before_first(const nlohmann::json& rule, int step_base) {
  if (!rule.contains("when")) return std::nullopt;
  const nlohmann::json& when = rule["when"];
  const auto counts = [&](const char* verb) {
    return std::string(" ") + verb + " before the first training step: steps count from " + std::to_string(step_base) +
           (step_base == 1 ? " (a job whose own log counts from 0 says step_base: 0, --step-base 0)" : "") + ", so the rule could never fire";
  };
  if (when.contains("step") && when["step"].is_number_integer() && when["step"].get<int64_t>() < step_base)
    return Error::of("step " + when["step"].dump() + counts("comes"), {"when", "step"});
  if (when.contains("steps") && when["steps"].contains("to") && when["steps"]["to"].is_number_integer() &&
      when["steps"]["to"].get<int64_t>() < step_base)
    return Error::of("steps ending at " + when["steps"]["to"].dump() + counts("come"), {"when", "steps", "to"});
  return std::nullopt;
}

std::optional<bool> cap_counts_footprint(const std::string& text) {
  auto counting = inject::parse_cap_counting(text);
  if (!counting) return std::nullopt;
  return *counting == inject::CapCounting::footprint;
}

std::vector<std::string> cap_counting_names() {
  return {inject::cap_counting_name(inject::CapCounting::allocations), inject::cap_counting_name(inject::CapCounting::footprint)};
}

}  // namespace oomh::suite
