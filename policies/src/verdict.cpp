// The JSON form of a verdict (what the JSON report and `oomharness compare` read back).

#include "oomharness/policies/verdict.h"

#include <stdexcept>

#include "oomharness/json_number.h"

namespace oomh {

namespace {
VerdictStatus status_from_string(const std::string& s) {
  if (s == "pass") return VerdictStatus::pass;
  if (s == "fail") return VerdictStatus::fail;
  if (s == "inconclusive") return VerdictStatus::inconclusive;
  throw std::invalid_argument("unknown verdict status '" + s + "' (pass, fail or inconclusive)");
}
}  // namespace

void to_json(nlohmann::json& j, const Evidence& e) {
  j = nlohmann::json{{"attempt", e.attempt}, {"t", e.t}, {"what", e.what}};
}

void from_json(const nlohmann::json& j, Evidence& e) {
  e.attempt = whole_member(j, "attempt", 0);
  e.t = j.value("t", 0.0);
  e.what = j.value("what", std::string());
}

void to_json(nlohmann::json& j, const Verdict& v) {
  j = nlohmann::json{{"policy", v.policy},
                     {"args", v.args.is_null() ? nlohmann::json::object() : v.args},
                     {"status", to_string(v.status)},
                     {"reason", v.reason},
                     {"evidence", v.evidence}};
  if (v.must_fail) j["must_fail"] = true;  // only when set: results of ordinary suites stay as they were
}

void from_json(const nlohmann::json& j, Verdict& v) {
  v.policy = j.at("policy").get<std::string>();
  v.args = j.contains("args") ? j.at("args") : nlohmann::json::object();
  v.status = status_from_string(j.at("status").get<std::string>());
  v.reason = j.value("reason", std::string());
  v.evidence = j.contains("evidence") ? j.at("evidence").get<std::vector<Evidence>>() : std::vector<Evidence>{};
  v.must_fail = j.value("must_fail", false);
}

}  // namespace oomh
