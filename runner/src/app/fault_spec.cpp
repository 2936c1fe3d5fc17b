// `--fault SPEC`: a compact, one-argument form of one fault-plan rule (docs/fault-plan.md).
//
// Note [--fault syntax]
// A spec is comma-separated items, each `key=value` or a bare flag, in the words of the fault plan:
//   when (window):  step=N  steps=A..B (or A-B, A.., ..B)  phase=NAME  after=DURATION
//   when (target):  min_size=BYTES  max_size=BYTES  device=N  rank=N  local_rank=N  entry=NAME[+NAME...]
//   trigger:        nth=N  every=K  probability=P  repeat=N      (at most one of nth/every/probability)
//   fail:           times=N  until_freed=BYTES  forever          (at most one; default times=1)
//   name=NAME       the rule's name in reports (default: the spec text itself)
// Each key maps one to one onto the plan's JSON, so a spec on the command line and a `faults:` entry in a
// suite mean the same thing. Entry lists use `+` because `,` separates items. This file only translates
// that syntax: the keys come from the shim's tables and the shim's parser checks the rule (Note [One rule
// schema] in injector/engine/fault_plan.h), so `--fault` accepts exactly what the shim does.

#include <algorithm>
#include <cmath>
#include <set>

#include "app/spec_text.h"
#include "oomharness/runner/cli_specs.h"
#include "suite/fault_rule.h"

namespace oomh {

namespace {

// Which part of the rule a key belongs to: "when", "fail", or "" (the rule's name).
std::optional<std::string> section_of(const std::string& key) {
  if (key == "name") return std::string();
  for (const char* part : {"when", "fail"}) {
    auto keys = suite::rule_keys_at({part});
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return std::string(part);
  }
  return std::nullopt;
}

std::vector<std::string> key_names() {
  std::vector<std::string> out = suite::rule_keys_at({"when"});
  for (const auto& k : suite::rule_keys_at({"fail"})) out.push_back(k);
  out.emplace_back("name");
  return out;
}

// A plain value typed as YAML would type it: a whole number, a number, true/false, else the text.
nlohmann::json typed(const std::string& v) {
  if (auto n = app::parse_integer(v)) return *n;
  if (auto b = app::parse_boolean(v)) return *b;
  if (auto x = app::parse_number(v); x && std::isfinite(*x)) return *x;
  return v;
}

// "A..B", "A-B", "A..", "..B" -> {"from": A, "to": B}; the parts as written, typed.
std::optional<nlohmann::json> steps_range(const std::string& v) {
  size_t sep = v.find("..");
  size_t len = 2;
  if (sep == std::string::npos) {
    sep = v.find('-', 1);  // not a leading minus
    len = 1;
  }
  if (sep == std::string::npos) return std::nullopt;
  std::string from = v.substr(0, sep), to = v.substr(sep + len);
  nlohmann::json out = nlohmann::json::object();
  if (!from.empty()) out["from"] = typed(from);
  if (!to.empty()) out["to"] = typed(to);
  return out;
}

}  // namespace

Expected<FaultSpec, std::string> parse_fault_spec(const std::string& text, const std::string& name) {
  auto fail = [&](const std::string& why) {
    return Expected<FaultSpec, std::string>::failure("bad --fault '" + text + "': " + why);
  };
  if (text.find_first_not_of(" \t") == std::string::npos)
    return fail("empty (write e.g. step=5,times=4 or every=10,min_size=64MiB)");

  FaultSpec fault;
  fault.name = name.empty() ? text : name;
  nlohmann::json rule = {{"when", nlohmann::json::object()}};
  std::set<std::string> seen;
  for (const auto& item : app::split_items(text)) {
    if (item.empty()) return fail("empty item (two commas in a row?)");
    auto [key, value] = app::split_key_value(item);
    auto section = section_of(key);
    if (!section) {
      auto guess = app::closest(key, key_names());
      return fail("unknown key '" + key + "'" + (guess ? " (did you mean '" + *guess + "'?)" : " (known: " + app::join(key_names()) + ")"));
    }
    if (!seen.insert(key).second) return fail("'" + key + "' is given twice");
    if (key == "forever") {  // a flag: `forever` alone means forever=true
      rule["fail"]["forever"] = value ? typed(*value) : nlohmann::json(true);
      continue;
    }
    if (!value || value->empty()) return fail("'" + key + "' needs a value ('" + key + "=...')");
    nlohmann::json v = typed(*value);
    if (key == "name") {
      fault.name = *value;
      continue;
    }
    if (key == "steps") {
      auto range = steps_range(*value);
      if (!range) return fail("'steps' must be a range like 5..10, 5.. or ..10, not '" + *value + "'");
      v = *range;
    } else if (key == "entry") {
      v = nlohmann::json::array();
      size_t start = 0;
      while (true) {
        size_t plus = value->find_first_of("+|", start);
        v.push_back(value->substr(start, plus == std::string::npos ? std::string::npos : plus - start));
        if (plus == std::string::npos) break;
        start = plus + 1;
      }
    }
    rule[*section][key] = v;
  }
  rule["name"] = fault.name;
  Expected<nlohmann::json> checked = suite::check_fault_rule(rule);
  if (!checked) {
    const Error& p = checked.error();
    // Name the key as written here: `step`, `steps`, `times`, not `when.step`; an unknown key is in its map
    // (Note [One result type]).
    const size_t depth = p.path.size() - (p.kind == Error::Kind::unknown_key && !p.path.empty() ? 1 : 0);
    std::string key = depth >= 2 ? p.path[1] : depth == 0 ? std::string() : p.path[0];
    return fail((key.empty() || key == "when" || key == "fail" ? std::string() : "'" + key + "': ") + p.message + p.suggestion);
  }
  fault.rule = std::move(checked.value());
  fault.where = SourceLocation{"<command line>", 0, 0};
  return Expected<FaultSpec, std::string>::success(std::move(fault));
}

}  // namespace oomh
