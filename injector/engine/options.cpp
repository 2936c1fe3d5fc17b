#include "options.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "oomharness/names.h"

namespace oomh::inject {

namespace {

bool read_flag(std::string_view v, bool& out) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") { out = true; return true; }
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") { out = false; return true; }
  return false;
}

void assign(Options& o, std::string_view name, std::string_view value) {
  if (name == "OOMH_PLAN") { o.plan = value; o.has_plan = true; }
  else if (name == "OOMH_CAP") { o.cap = value; o.has_cap = true; }
  else if (name == "OOMH_CAP_COUNTS") {
    if (auto c = parse_cap_counting(value)) o.cap_counts = *c;
    else o.problems.push_back("OOMH_CAP_COUNTS: '" + std::string(value) + "' is not allocations or footprint; caps count allocations");
  }
  else if (name == "OOMH_RECORD_STEP") {
    // "N" or "A..B": whole numbers, A <= B.
    auto number = [](std::string_view v, int64_t& n) {
      if (v.empty() || v.size() > 18) return false;
      n = 0;
      for (char c : v) {
        if (c < '0' || c > '9') return false;
        n = n * 10 + (c - '0');
      }
      return true;
    };
    size_t dots = value.find("..");
    int64_t from = 0, to = 0;
    bool ok = dots == std::string_view::npos ? number(value, from) && number(value, to)
                                             : number(value.substr(0, dots), from) && number(value.substr(dots + 2), to);
    if (ok && from <= to) {
      o.record_from = from;
      o.record_to = to;
    } else {
      o.problems.push_back("OOMH_RECORD_STEP: '" + std::string(value) + "' is not a step or a range of steps (3, 2..5); no allocation is recorded");
    }
  }
  else if (name == "OOMH_CONTROL") { o.control = value; o.has_control = !value.empty(); }
  else if (name == "OOMH_EVENTS") { o.events = value; o.has_events = !value.empty(); }
  else if (name == "OOMH_SHIM_PARENT") { o.shim_parent = value; o.has_shim_parent = !value.empty(); }
  else if (name == "OOMH_DISABLE") {
    if (!read_flag(value, o.disable)) {
      o.disable = true;  // someone meant to turn the shim off: do so
      o.problems.push_back("OOMH_DISABLE: '" + std::string(value) + "' is not 1 or 0; the shim is disabled");
    }
  } else if (name == "OOMH_LOG") {
    if (value == "quiet") o.log = LogLevel::quiet;
    else if (value == "warn" || value.empty()) o.log = LogLevel::warn;
    else if (value == "info") o.log = LogLevel::info;
    else if (value == "debug") o.log = LogLevel::debug;
    else o.problems.push_back("OOMH_LOG: unknown level '" + std::string(value) + "' (use quiet, warn, info or debug)");
  }
}

}  // namespace

// The one suggestion rule (include/oomharness/names.h), as every other did-you-mean of the project.
std::string closest_option(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& spec : kOptionTable) names.emplace_back(spec.name);
  return nearest_name(name, names);
}

Options read_options(char** envp) noexcept {
  Options o;
  try {
    for (char** e = envp; e && *e; ++e) {
      if (std::strncmp(*e, "OOMH_", 5) != 0) continue;
      const char* eq = std::strchr(*e, '=');
      if (!eq) continue;
      std::string_view name(*e, static_cast<size_t>(eq - *e));
      std::string_view value(eq + 1);
      o.any_set = true;
      bool known = false;
      for (const auto& spec : kOptionTable) known = known || name == spec.name;
      if (!known) {
        std::string hint = closest_option(name);
        o.problems.push_back("unknown variable " + std::string(name) +
                             (hint.empty() ? std::string() : " (did you mean " + hint + "?)"));
        continue;
      }
      assign(o, name, value);
    }
  } catch (...) {
    o.problems.push_back("cannot read the OOMH_ variables (out of memory)");
  }
  return o;
}

}  // namespace oomh::inject
