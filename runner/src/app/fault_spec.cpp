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
// suite mean the same thing. Entry lists use `+` because `,` separates items.

#include <map>
#include <set>

#include "app/spec_text.h"
#include "oomharness/control_block.h"
#include "oomharness/runner/cli_specs.h"
#include "oomharness/units.h"

namespace oomh {

namespace {

enum class KeyKind { integer, count, probability, bytes, duration, phase, steps, entries, flag, text };

struct KeyInfo {
  const char* name;
  const char* section;  // "when", "fail", or "" (the rule itself)
  KeyKind kind;
};

constexpr KeyInfo kKeys[] = {
    {"step", "when", KeyKind::integer},       {"steps", "when", KeyKind::steps},
    {"phase", "when", KeyKind::phase},        {"after", "when", KeyKind::duration},
    {"min_size", "when", KeyKind::bytes},     {"max_size", "when", KeyKind::bytes},
    {"device", "when", KeyKind::integer},     {"rank", "when", KeyKind::integer},
    {"local_rank", "when", KeyKind::integer}, {"entry", "when", KeyKind::entries},
    {"nth", "when", KeyKind::count},          {"every", "when", KeyKind::count},
    {"probability", "when", KeyKind::probability}, {"repeat", "when", KeyKind::integer},
    {"times", "fail", KeyKind::count},        {"until_freed", "fail", KeyKind::bytes},
    {"forever", "fail", KeyKind::flag},       {"name", "", KeyKind::text},
};

const char* const kEntries[] = {"alloc", "sync", "async", "vmm", "managed", "cuMemAlloc", "cuMemAllocPitch",
                                "cuMemAllocManaged", "cuMemAllocAsync", "cuMemAllocFromPoolAsync", "cuMemCreate"};

std::vector<std::string> key_names() {
  std::vector<std::string> out;
  for (const auto& k : kKeys) out.emplace_back(k.name);
  return out;
}

const KeyInfo* find_key(const std::string& name) {
  for (const auto& k : kKeys)
    if (name == k.name) return &k;
  return nullptr;
}

// Parses "A..B", "A-B", "A..", "..B" into {"from": A, "to": B}.
std::optional<nlohmann::json> parse_steps(const std::string& v) {
  size_t sep = v.find("..");
  size_t len = 2;
  if (sep == std::string::npos) {
    sep = v.find('-', 1);  // not a leading minus
    len = 1;
  }
  if (sep == std::string::npos) return std::nullopt;
  std::string from = v.substr(0, sep), to = v.substr(sep + len);
  nlohmann::json out = nlohmann::json::object();
  if (!from.empty()) {
    auto a = app::parse_integer(from);
    if (!a || *a < 0) return std::nullopt;
    out["from"] = *a;
  }
  if (!to.empty()) {
    auto b = app::parse_integer(to);
    if (!b || *b < 0) return std::nullopt;
    out["to"] = *b;
  }
  if (out.empty()) return std::nullopt;
  if (out.contains("from") && out.contains("to") && out["from"].get<int64_t>() > out["to"].get<int64_t>())
    return std::nullopt;
  return out;
}

// The value of one item as plan JSON, or an error (without the "bad --fault" prefix).
std::optional<nlohmann::json> item_value(const KeyInfo& key, const std::optional<std::string>& value, std::string& error) {
  const std::string name = key.name;
  if (key.kind == KeyKind::flag) {
    if (!value) return true;
    auto b = app::parse_boolean(*value);
    if (!b) { error = "'" + name + "' is a flag: write '" + name + "' or '" + name + "=true'"; return std::nullopt; }
    return *b;
  }
  if (!value || value->empty()) {
    error = "'" + name + "' needs a value ('" + name + "=...')";
    return std::nullopt;
  }
  const std::string& v = *value;
  switch (key.kind) {
    case KeyKind::integer: {
      auto n = app::parse_integer(v);
      if (!n || *n < 0) { error = "'" + name + "' must be a whole number >= 0, not '" + v + "'"; return std::nullopt; }
      return *n;
    }
    case KeyKind::count: {
      auto n = app::parse_integer(v);
      if (!n || *n < 1) { error = "'" + name + "' must be a whole number >= 1, not '" + v + "'"; return std::nullopt; }
      return *n;
    }
    case KeyKind::probability: {
      auto p = app::parse_number(v);
      if (!p || !(*p > 0.0 && *p <= 1.0)) {
        error = "'probability' must be a number in (0, 1], not '" + v + "'";
        return std::nullopt;
      }
      return *p;
    }
    case KeyKind::bytes: {
      ParseResult r = parse_bytes(v);
      if (!r) { error = r.error; return std::nullopt; }
      return static_cast<uint64_t>(*r.value);
    }
    case KeyKind::duration: {
      ParseResult r = parse_duration(v);
      if (!r) { error = r.error; return std::nullopt; }
      return *r.value;
    }
    case KeyKind::phase: {
      Phase p{};
      if (!phase_from_name(v.c_str(), p) || p == Phase::none) {
        error = "unknown phase '" + v + "' (use forward, backward, optimizer, eval, checkpoint or data)";
        return std::nullopt;
      }
      return v;
    }
    case KeyKind::steps: {
      auto s = parse_steps(v);
      if (!s) { error = "'steps' must be a range like 5..10, 5.. or ..10, not '" + v + "'"; return std::nullopt; }
      return *s;
    }
    case KeyKind::entries: {
      nlohmann::json list = nlohmann::json::array();
      size_t start = 0;
      while (start <= v.size()) {
        size_t plus = v.find_first_of("+|", start);
        std::string e = v.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
        bool known = false;
        for (const char* k : kEntries) known = known || e == k;
        if (!known) {
          std::vector<std::string> names(std::begin(kEntries), std::end(kEntries));
          error = "unknown entry '" + e + "' (use " + app::join(names) + ")";
          return std::nullopt;
        }
        list.push_back(e);
        if (plus == std::string::npos) break;
        start = plus + 1;
      }
      return list;
    }
    case KeyKind::text: return v;
    case KeyKind::flag: break;
  }
  return std::nullopt;
}

// Rejects combinations the plan does not allow, naming both keys.
std::optional<std::string> conflict(const std::set<std::string>& seen) {
  const std::vector<std::vector<std::string>> exclusive = {
      {"step", "steps"}, {"nth", "every", "probability"}, {"times", "until_freed", "forever"}};
  for (const auto& group : exclusive) {
    std::vector<std::string> present;
    for (const auto& k : group)
      if (seen.count(k)) present.push_back(k);
    if (present.size() > 1) return "'" + present[0] + "' and '" + present[1] + "' cannot be used together";
  }
  return std::nullopt;
}

}  // namespace

SpecResult<FaultSpec> parse_fault_spec(const std::string& text, const std::string& name) {
  SpecResult<FaultSpec> out;
  auto fail = [&](const std::string& why) {
    out.error = "bad --fault '" + text + "': " + why;
    return out;
  };
  auto items = app::split_items(text);
  if (text.find_first_not_of(" \t") == std::string::npos)
    return fail("empty (write e.g. step=5,times=4 or every=10,min_size=64MiB)");

  FaultSpec fault;
  fault.name = name.empty() ? text : name;
  nlohmann::json when = nlohmann::json::object();
  nlohmann::json fail_part = nlohmann::json::object();
  std::set<std::string> seen;
  for (const auto& item : items) {
    if (item.empty()) return fail("empty item (two commas in a row?)");
    auto [key, value] = app::split_key_value(item);
    const KeyInfo* info = find_key(key);
    if (!info) {
      auto guess = app::closest(key, key_names());
      return fail("unknown key '" + key + "'" + (guess ? " (did you mean '" + *guess + "'?)" : " (known: " + app::join(key_names()) + ")"));
    }
    if (!seen.insert(key).second) return fail("'" + key + "' is given twice");
    std::string error;
    auto v = item_value(*info, value, error);
    if (!v) return fail(error);
    if (key == "name") fault.name = v->get<std::string>();
    else if (key == "forever") { if (v->get<bool>()) fail_part["forever"] = true; }
    else if (std::string(info->section) == "fail") fail_part[key] = *v;
    else when[key] = *v;
  }
  if (auto c = conflict(seen)) return fail(*c);
  if (when.contains("min_size") && when.contains("max_size") &&
      when["min_size"].get<uint64_t>() > when["max_size"].get<uint64_t>())
    return fail("'min_size' is larger than 'max_size'");
  if (fail_part.empty()) fail_part["times"] = 1;

  fault.rule = nlohmann::json::object();
  fault.rule["name"] = fault.name;
  fault.rule["when"] = when;
  fault.rule["fail"] = fail_part;
  fault.where = SourceLocation{"<command line>", 0, 0};
  out.value = std::move(fault);
  return out;
}

}  // namespace oomh
