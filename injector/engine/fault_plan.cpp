#include "fault_plan.h"

#include <oomharness/names.h>
#include <oomharness/units.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <iterator>

namespace oomh::inject {

namespace {

using nlohmann::json;

// The first kEntryCount choices are the entry points themselves, in Entry's order.
constexpr const char* const* kEntryNames = kEntryChoices;
static_assert(std::size(kEntryChoices) >= kEntryCount);

struct EntryGroup {
  const char* name;
  EntryMask mask;
};
constexpr EntryGroup kGroups[] = {
    {"alloc", kAllEntries},
    {"sync", entry_bit(Entry::mem_alloc) | entry_bit(Entry::mem_alloc_pitch) | entry_bit(Entry::mem_alloc_managed)},
    {"async", entry_bit(Entry::mem_alloc_async) | entry_bit(Entry::mem_alloc_from_pool_async)},
    {"vmm", entry_bit(Entry::mem_create)},
    {"managed", entry_bit(Entry::mem_alloc_managed)},
    {"host", entry_bit(Entry::mem_host_alloc) | entry_bit(Entry::mem_alloc_host) | entry_bit(Entry::mem_host_register)},
};

// A parse failure: carries the field and the problem up to parse_fault_plan and check_rule, the only places
// that catch it: the plan's error is one line, the rule's a structured Error (Note [One result type]).
// A value outside a closed set (a phase, an entry point, a memory kind) also carries the set in words and
// the name nearest what was written: the plan's one-line error lists the set, as it always has; the rule's
// Error puts "did you mean" before the list in Error::suggestion, for the front ends to append.
struct PlanError {
  std::string where;        // "rules[0].when.steps"; "" for the whole plan
  std::string problem;      // "'from' is after 'to'", "unknown key 'stpe'", "unknown phase \"forwards\""
  std::string unknown_key;  // the key, for an unknown key in the map at `where`
  std::string choices;      // "use forward, backward, ...": what an unknown value may be; "" otherwise
  std::string near;         // of those, the one nearest the value written (Note [One typo threshold]); "" for none
  std::string message() const {
    return (where.empty() ? problem : where + ": " + problem) + (choices.empty() ? "" : " (" + choices + ")");
  }
  // " (did you mean 'forward'?; use forward, backward, ...)", " (use ...)", or "".
  std::string suggestion() const {
    if (choices.empty()) return {};
    return near.empty() ? " (" + choices + ")" : " (did you mean '" + near + "'?; " + choices + ")";
  }
};

[[noreturn]] void fail(const std::string& where, const std::string& problem) { throw PlanError{where, problem, {}, {}, {}}; }

// An unknown value of a closed set: `names` are the set's, `choices` says it in words.
template <class Names>
[[noreturn]] void fail_choice(const std::string& where, const std::string& problem, const json& written,
                              const Names& names, const std::string& choices) {
  std::string near = written.is_string() ? nearest_name(written.get<std::string>(), names) : std::string();
  throw PlanError{where, problem, {}, choices, std::move(near)};
}

std::string join(const std::string& where, const std::string& key) { return where.empty() ? key : where + "." + key; }

// "use a, b or c": a closed set in words, from its own names, so that the words cannot drift from the set.
template <class Names>
std::string use_one_of(const Names& names) {
  std::string out = "use ";
  const size_t n = std::size(names);
  size_t i = 0;
  for (const auto& name : names) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += name;
    ++i;
  }
  return out;
}

template <class Keys>
void check_keys(const json& object, const std::string& where, const Keys& allowed) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool known = false;
    for (const char* k : allowed) known = known || it.key() == k;
    if (!known) throw PlanError{where, "unknown key '" + it.key() + "'", it.key(), {}, {}};
  }
}
void check_keys(const json& object, const std::string& where, std::initializer_list<const char*> allowed) {
  check_keys<std::initializer_list<const char*>>(object, where, allowed);
}

const json& require_object(const json& v, const std::string& where) {
  if (!v.is_object()) fail(where, "must be an object");
  return v;
}

// Integers: JSON integers, or floats with no fraction (a YAML writer may produce 5.0).
bool as_int64(const json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) { out = v.get<int64_t>(); return true; }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) != d || std::fabs(d) > 9.0e18) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

int64_t int_at_least(const json& v, const std::string& where, int64_t minimum) {
  int64_t out = 0;
  if (!as_int64(v, out)) fail(where, "must be an integer (got " + v.dump() + ")");
  if (out < minimum) fail(where, "must be at least " + std::to_string(minimum) + " (got " + std::to_string(out) + ")");
  return out;
}

uint64_t bytes_value(const json& v, const std::string& where) {
  if (v.is_string()) {
    Expected<double> r = parse_bytes(v.get<std::string>());
    if (!r) fail(where, r.error().str());
    return static_cast<uint64_t>(*r);
  }
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  int64_t i = 0;
  if (as_int64(v, i) && i >= 0) return static_cast<uint64_t>(i);
  fail(where, "must be a size in bytes (a number, or a string like \"1MiB\"; got " + v.dump() + ")");
}

double seconds_value(const json& v, const std::string& where) {
  if (v.is_string()) {
    Expected<double> r = parse_duration(v.get<std::string>());
    if (!r) fail(where, r.error().str());
    return *r;
  }
  if (v.is_number()) {
    double d = v.get<double>();
    if (d < 0 || !std::isfinite(d)) fail(where, "must be a non-negative number of seconds (got " + v.dump() + ")");
    if (d > kMaxDurationSeconds) fail(where, "must be at most 1e9 seconds, about 31 years (got " + v.dump() + ")");
    return d;
  }
  fail(where, "must be seconds (a number, or a string like \"30s\"; got " + v.dump() + ")");
}

EntryMask entry_value(const json& name, const std::string& where) {
  if (!name.is_string()) fail(where, "must be an entry point name (got " + name.dump() + ")");
  std::string s = name.get<std::string>();
  for (int i = 0; i < kEntryCount; ++i)
    if (s == kEntryNames[i]) return entry_bit(static_cast<Entry>(i));
  for (const auto& g : kGroups)
    if (s == g.name) return g.mask;
  fail_choice(where, "unknown entry point '" + s + "'", name, kEntryChoices,
              "use cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, cuMemAllocAsync, cuMemAllocFromPoolAsync, "
              "cuMemCreate, cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister, or a group: alloc, sync, async, "
              "vmm, managed, host");
  static_assert(std::size(kEntryChoices) == kEntryCount + std::size(kGroups), "kEntryChoices lists every entry and group");
}

EntryMask entries_value(const json& v, const std::string& where) {
  if (v.is_string()) return entry_value(v, where);
  if (!v.is_array()) fail(where, "must be a list of entry points or groups");
  if (v.empty()) fail(where, "must name at least one entry point or group");
  EntryMask mask = 0;
  for (size_t i = 0; i < v.size(); ++i) mask |= entry_value(v[i], where + "[" + std::to_string(i) + "]");
  return mask;
}

void parse_steps(const json& v, const std::string& where, RuleWhen& w) {
  require_object(v, where);
  check_keys(v, where, kStepsKeys);
  if (v.empty()) fail(where, "give 'from', 'to' or both");
  if (v.contains("from")) w.steps_from = int_at_least(v["from"], where + ".from", 0);
  if (v.contains("to")) w.steps_to = int_at_least(v["to"], where + ".to", 0);
  if (w.steps_from > w.steps_to) fail(where, "'from' is after 'to'");
  w.has_steps = true;
}

MemoryKind memory_value(const json& v, const std::string& where) {
  if (v.is_string() && v.get<std::string>() == "device") return MemoryKind::device;
  if (v.is_string() && v.get<std::string>() == "host") return MemoryKind::host;
  fail_choice(where, "unknown memory " + v.dump(), v, kMemoryChoices, use_one_of(kMemoryChoices));
}

RuleWhen parse_when(const json& v, const std::string& where) {
  require_object(v, where);
  check_keys(v, where, kWhenKeys);
  RuleWhen w;
  if (v.contains("memory")) w.memory = memory_value(v["memory"], join(where, "memory"));
  if (v.contains("entry")) {
    w.entries = entries_value(v["entry"], join(where, "entry"));
    // A rule that names only entry points of the other kind could never fire (Note [Host memory]).
    if ((w.entries & entries_of(w.memory)) == 0)
      fail(join(where, "entry"), w.memory == MemoryKind::host
                                     ? "names no entry point that allocates host memory (use cuMemHostAlloc, "
                                       "cuMemAllocHost, cuMemHostRegister, cuMemCreate or the group host)"
                                     : "names only host entry points: add memory: host to the rule");
  }
  if (v.contains("min_size")) w.min_size = bytes_value(v["min_size"], join(where, "min_size"));
  if (v.contains("max_size")) w.max_size = bytes_value(v["max_size"], join(where, "max_size"));
  if (w.min_size > w.max_size) fail(where, "min_size is larger than max_size");
  if (v.contains("device")) w.device = static_cast<int>(int_at_least(v["device"], join(where, "device"), 0));
  if (v.contains("rank")) w.rank = static_cast<int>(int_at_least(v["rank"], join(where, "rank"), 0));
  if (v.contains("local_rank")) w.local_rank = static_cast<int>(int_at_least(v["local_rank"], join(where, "local_rank"), 0));
  if (v.contains("step") && v.contains("steps")) fail(where, "use either 'step' or 'steps', not both");
  if (v.contains("step")) {
    w.steps_from = w.steps_to = int_at_least(v["step"], join(where, "step"), 0);
    w.has_steps = true;
  }
  if (v.contains("steps")) parse_steps(v["steps"], join(where, "steps"), w);
  if (v.contains("phase")) {
    const json& p = v["phase"];
    Phase phase{};
    if (!p.is_string() || !phase_from_name(p.get<std::string>().c_str(), phase) || phase == Phase::none) {
      std::vector<std::string_view> reported;  // a rule names a phase the probe reports: never `none`
      for (const NameEntry<Phase>& e : kPhases)
        if (e.value != Phase::none) reported.push_back(e.name);
      fail_choice(join(where, "phase"), "unknown phase " + p.dump(), p, reported, use_one_of(reported));
    }
    w.has_phase = true;
    w.phase = phase;
  }
  if (v.contains("after")) w.after_s = seconds_value(v["after"], join(where, "after"));

  int triggers = int(v.contains("nth")) + int(v.contains("every")) + int(v.contains("probability"));
  if (triggers > 1) fail(where, "use only one of 'nth', 'every' and 'probability'");
  if (v.contains("nth")) {
    w.trigger = Trigger::nth;
    w.n = static_cast<uint64_t>(int_at_least(v["nth"], join(where, "nth"), 1));
  }
  if (v.contains("every")) {
    w.trigger = Trigger::every;
    w.n = static_cast<uint64_t>(int_at_least(v["every"], join(where, "every"), 1));
    w.repeat = 0;
  }
  if (v.contains("probability")) {
    const json& p = v["probability"];
    // 0 is refused: a rule that can never fire tests nothing.
    if (!p.is_number() || !(p.get<double>() > 0.0 && p.get<double>() <= 1.0))
      fail(join(where, "probability"), "must be a number more than 0 and at most 1 (got " + p.dump() + ")");
    w.trigger = Trigger::probability;
    w.probability = p.get<double>();
    w.repeat = 0;
  }
  if (v.contains("repeat")) w.repeat = static_cast<uint64_t>(int_at_least(v["repeat"], join(where, "repeat"), 0));
  return w;
}

RuleFail parse_fail(const json& v, const std::string& where) {
  require_object(v, where);
  check_keys(v, where, kFailKeys);
  int kinds = int(v.contains("times")) + int(v.contains("until_freed")) + int(v.contains("forever"));
  if (kinds > 1) fail(where, "use only one of 'times', 'until_freed' and 'forever'");
  RuleFail f;
  if (v.contains("times")) f.times = static_cast<uint64_t>(int_at_least(v["times"], join(where, "times"), 1));
  if (v.contains("until_freed")) {
    f.kind = Duration::until_freed;
    f.until_freed = bytes_value(v["until_freed"], join(where, "until_freed"));
  }
  if (v.contains("forever")) {
    if (!v["forever"].is_boolean() || !v["forever"].get<bool>())
      fail(join(where, "forever"), "must be true (leave it out for a fault that ends)");
    f.kind = Duration::forever;
  }
  return f;
}

Rule parse_rule(const json& v, size_t index) {
  std::string where = "rules[" + std::to_string(index) + "]";
  require_object(v, where);
  check_keys(v, where, kRuleKeys);
  Rule r;
  r.name = where;
  if (v.contains("name")) {
    if (!v["name"].is_string() || v["name"].get<std::string>().empty()) fail(where + ".name", "must be a non-empty string");
    r.name = v["name"].get<std::string>();
  }
  if (v.contains("when")) r.when = parse_when(v["when"], where + ".when");
  if (v.contains("fail")) r.fail = parse_fail(v["fail"], where + ".fail");
  return r;
}

CapEntry parse_cap(const json& v, size_t index) {
  std::string where = "caps[" + std::to_string(index) + "]";
  require_object(v, where);
  check_keys(v, where, {"memory", "limit", "device", "at"});
  CapEntry c;
  if (!v.contains("limit")) fail(where, "missing 'limit'");
  c.limit = bytes_value(v["limit"], where + ".limit");
  if (v.contains("memory")) c.memory = memory_value(v["memory"], where + ".memory");
  if (v.contains("device")) c.device = static_cast<int>(int_at_least(v["device"], where + ".device", -1));
  if (c.memory == MemoryKind::host && c.device >= 0)
    fail(where + ".device", "a host cap is not a device's: leave 'device' out (Note [Host memory])");
  if (c.device >= kMaxDevices) fail(where + ".device", "must be below " + std::to_string(kMaxDevices));
  if (v.contains("at")) {
    const json& at = require_object(v["at"], where + ".at");
    check_keys(at, where + ".at", {"step", "after"});
    if (at.contains("step") == at.contains("after")) fail(where + ".at", "give exactly one of 'step' and 'after'");
    if (at.contains("step")) {
      c.at = CapEntry::At::step;
      c.at_step = int_at_least(at["step"], where + ".at.step", 0);
    } else {
      c.at = CapEntry::At::after;
      c.at_after_s = seconds_value(at["after"], where + ".at.after");
    }
  }
  return c;
}

FaultPlan parse_plan_object(const json& root) {
  if (!root.is_object()) fail("", "the plan must be a JSON object");
  check_keys(root, "", {"version", "seed", "rules", "caps", "cap_counts"});
  FaultPlan plan;
  if (root.contains("version")) {
    int64_t version = 0;
    if (!as_int64(root["version"], version) || version != 1) fail("version", "must be 1 (got " + root["version"].dump() + ")");
  }
  if (root.contains("seed")) plan.seed = static_cast<uint64_t>(int_at_least(root["seed"], "seed", 0));
  if (root.contains("rules")) {
    const json& rules = root["rules"];
    if (!rules.is_array()) fail("rules", "must be a list");
    for (size_t i = 0; i < rules.size(); ++i) plan.rules.push_back(parse_rule(rules[i], i));
  }
  if (root.contains("caps")) {
    const json& caps = root["caps"];
    if (!caps.is_array()) fail("caps", "must be a list");
    for (size_t i = 0; i < caps.size(); ++i) plan.caps.push_back(parse_cap(caps[i], i));
  }
  if (root.contains("cap_counts")) {
    const json& v = root["cap_counts"];
    auto counting = v.is_string() ? parse_cap_counting(v.get<std::string>()) : std::nullopt;
    if (!counting) fail("cap_counts", "must be \"allocations\" or \"footprint\" (got " + v.dump() + ")");
    plan.cap_counts = counting;
  }
  return plan;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the user needs the rest.
std::string json_error_text(const char* what) {
  std::string s = what;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  return "invalid JSON: " + s;
}

// The inverse of parse_rule and parse_cap: what they read back to the same values. Defaults are left out
// except `repeat`, written whenever it differs from its trigger's default.
json rule_to_json(const Rule& r) {
  const RuleWhen& w = r.when;
  json when = json::object();
  if (w.memory != MemoryKind::device) when["memory"] = memory_kind_name(w.memory);
  if (w.entries != kAllEntries) {
    json list = json::array();
    for (int i = 0; i < kEntryCount; ++i)
      if (w.entries & entry_bit(static_cast<Entry>(i))) list.push_back(kEntryNames[i]);
    when["entry"] = list;
  }
  if (w.min_size != 0) when["min_size"] = w.min_size;
  if (w.max_size != UINT64_MAX) when["max_size"] = w.max_size;
  if (w.device >= 0) when["device"] = w.device;
  if (w.rank >= 0) when["rank"] = w.rank;
  if (w.local_rank >= 0) when["local_rank"] = w.local_rank;
  if (w.has_steps) {
    if (w.steps_from == w.steps_to) {
      when["step"] = w.steps_from;
    } else {
      json steps = json::object();
      if (w.steps_from != INT64_MIN) steps["from"] = w.steps_from;
      if (w.steps_to != INT64_MAX) steps["to"] = w.steps_to;
      when["steps"] = steps;
    }
  }
  if (w.has_phase) when["phase"] = phase_name(w.phase);
  if (w.after_s > 0) when["after"] = w.after_s;
  uint64_t default_repeat = 1;
  switch (w.trigger) {
    case Trigger::first: break;
    case Trigger::nth: when["nth"] = w.n; break;
    case Trigger::every: when["every"] = w.n; default_repeat = 0; break;
    case Trigger::probability: when["probability"] = w.probability; default_repeat = 0; break;
  }
  if (w.repeat != default_repeat) when["repeat"] = w.repeat;
  json fail_part = json::object();
  switch (r.fail.kind) {
    case Duration::times: fail_part["times"] = r.fail.times; break;
    case Duration::until_freed: fail_part["until_freed"] = r.fail.until_freed; break;
    case Duration::forever: fail_part["forever"] = true; break;
  }
  return json{{"name", r.name}, {"when", when}, {"fail", fail_part}};
}

json cap_to_json(const CapEntry& c) {
  json cap = {{"limit", c.limit}};
  if (c.memory != MemoryKind::device) cap["memory"] = memory_kind_name(c.memory);
  if (c.device >= 0) cap["device"] = c.device;
  if (c.at == CapEntry::At::step) cap["at"] = {{"step", c.at_step}};
  if (c.at == CapEntry::At::after) cap["at"] = {{"after", c.at_after_s}};
  return cap;
}

}  // namespace

const char* cap_counting_name(CapCounting c) { return c == CapCounting::footprint ? "footprint" : "allocations"; }

std::optional<CapCounting> parse_cap_counting(std::string_view text) {
  if (text == "allocations") return CapCounting::allocations;
  if (text == "footprint") return CapCounting::footprint;
  return std::nullopt;
}

const char* layer_name(Layer l) { return name_of(kLayers, l, "driver").data(); }

bool at_request_layer(const RuleWhen& w, Layer registered) noexcept {
  // A count (nth, every, probability) counts the calls of one layer: a sweep's `step=N,nth=K` names the Kth
  // driver call its golden run recorded (Note [Recording a step's allocations] in engine.h), so it stays there.
  if (registered == Layer::driver || !w.has_steps || w.trigger != Trigger::first || w.memory != MemoryKind::device ||
      w.entries != kAllEntries)
    return false;
  return registered == Layer::allocator ||
         (w.min_size == 0 && w.max_size == UINT64_MAX && (!w.has_phase || training_work(w.phase)));
}

const char* memory_kind_name(MemoryKind m) { return m == MemoryKind::host ? "host" : "device"; }

const char* entry_name(Entry e) {
  auto i = static_cast<unsigned>(e);
  return i < static_cast<unsigned>(kEntryCount) ? kEntryNames[i] : "?";
}

Expected<FaultPlan, std::string> parse_fault_plan(std::string_view text) noexcept {
  using Result = Expected<FaultPlan, std::string>;
  try {
    json root = json::parse(text.begin(), text.end());
    return Result::success(parse_plan_object(root));
  } catch (const PlanError& e) {
    return Result::failure(e.message());
  } catch (const json::exception& e) {
    return Result::failure(json_error_text(e.what()));
  } catch (const std::exception& e) {
    return Result::failure(std::string("cannot read the plan: ") + e.what());
  } catch (...) {
    return Result::failure("cannot read the plan");
  }
}

Expected<FaultPlan, std::string> load_fault_plan(const char* value) noexcept {
  using Result = Expected<FaultPlan, std::string>;
  try {
    std::string_view v = value ? value : "";
    size_t first = v.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return Result::failure("empty (give the plan's JSON or the path of a file holding it)");
    if (v[first] == '{' || v[first] == '[') return parse_fault_plan(v);
    std::string path(v);
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return Result::failure("cannot read '" + path + "': " + std::strerror(errno));
    std::string text;
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    bool bad = std::ferror(f) != 0;
    std::fclose(f);
    if (bad) return Result::failure("cannot read '" + path + "'");
    Result r = parse_fault_plan(text);
    if (!r) r.error() = path + ": " + r.error();
    return r;
  } catch (...) {
    return Result::failure("cannot read the plan");
  }
}

Expected<std::vector<CapEntry>> parse_cap_option(std::string_view text) noexcept {
  using Result = Expected<std::vector<CapEntry>>;
  try {
    std::vector<CapEntry> caps;
    std::string_view rest = text;
    if (rest.find_first_not_of(" \t") == std::string_view::npos)
      return Result::failure(Error::of("empty (write a size like 8GiB, or 0=8GiB,1=4GiB)"));
    while (true) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      CapEntry c;
      size_t eq = item.find('=');
      std::string_view size = item;
      if (eq != std::string_view::npos) {
        std::string dev(detail::trim(item.substr(0, eq)));
        char* end = nullptr;
        long d = dev.empty() ? -1 : std::strtol(dev.c_str(), &end, 10);
        if (dev.empty() || *end != '\0' || d < 0 || d >= kMaxDevices)
          return Result::failure(Error::of("bad device '" + dev + "' in '" + std::string(item) +
                                           "' (write DEVICE=SIZE with DEVICE from 0 to " +
                                           std::to_string(kMaxDevices - 1) + ")"));
        c.device = static_cast<int>(d);
        size = item.substr(eq + 1);
      }
      Expected<double> r = parse_bytes(size);
      if (!r) return Result::failure(std::move(r.error()));
      c.limit = static_cast<uint64_t>(*r);
      caps.push_back(c);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    return Result::success(std::move(caps));
  } catch (...) {
    return Result::failure(Error::of("cannot read the cap"));
  }
}

Expected<std::string> check_rule(std::string_view rule_json) noexcept {
  using Result = Expected<std::string>;
  try {
    json rule = json::parse(rule_json.begin(), rule_json.end());
    Rule parsed = parse_rule(rule, 0);
    return Result::success(rule_to_json(parsed).dump());
  } catch (const PlanError& e) {
    // parse_rule names fields from "rules[0]"; the caller knows which rule it is.
    std::vector<std::string> path = split_path(e.where);
    if (path.size() >= 2 && path[0] == "rules" && path[1] == "0") path.erase(path.begin(), path.begin() + 2);
    if (e.unknown_key.empty()) return Result::failure(Error{std::move(path), e.problem, e.suggestion(), Error::Kind::value});
    path.push_back(e.unknown_key);
    return Result::failure(Error{std::move(path), e.problem, "", Error::Kind::unknown_key});
  } catch (const json::exception& e) {
    return Result::failure(Error{{}, json_error_text(e.what()), "", Error::Kind::value});
  } catch (...) {
    return Result::failure(Error{{}, "cannot read the rule", "", Error::Kind::value});
  }
}

std::string fault_plan_json(const FaultPlan& plan) {
  json rules = json::array(), caps = json::array();
  for (const Rule& r : plan.rules) rules.push_back(rule_to_json(r));
  for (const CapEntry& c : plan.caps) caps.push_back(cap_to_json(c));
  json out = {{"version", 1}, {"seed", plan.seed}, {"rules", rules}, {"caps", caps}};
  if (plan.cap_counts) out["cap_counts"] = cap_counting_name(*plan.cap_counts);
  return out.dump();
}

}  // namespace oomh::inject
