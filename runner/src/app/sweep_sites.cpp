#include "app/sweep_sites.h"

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>

#include "oomharness/events.h"
#include "oomharness/units.h"

namespace oomh::app {

std::vector<RecordedCall> recorded_calls(const Trace& trace, int64_t step) {
  std::vector<RecordedCall> out;
  if (trace.attempts.empty()) return out;
  int pid = 0;
  for (const Event& e : trace.attempts.front().events) {
    if (e.src != events::kSrcShim || e.kind != events::kAlloc || e.integer("step") != step) continue;
    if (pid == 0) pid = e.pid;
    if (e.pid != pid) continue;
    RecordedCall c;
    c.pid = e.pid;
    c.entry = e.text("entry");
    c.size = static_cast<uint64_t>(std::max<int64_t>(0, e.integer("size", 0)));
    c.device = static_cast<int>(e.integer("device", 0));
    c.step = step;
    c.phase = e.text("phase", "none");
    c.nth = static_cast<uint64_t>(std::max<int64_t>(0, e.integer("nth", 0)));
    if (std::string where = e.text("where"); !where.empty()) c.where = std::move(where);
    out.push_back(std::move(c));
  }
  // Events are sorted by time; two calls in one microsecond keep the order of their numbers.
  std::stable_sort(out.begin(), out.end(), [](const RecordedCall& a, const RecordedCall& b) { return a.nth < b.nth; });
  return out;
}

std::string size_class(uint64_t size) {
  if (size == 0) return "0 B";
  const uint64_t low = uint64_t{1} << (63 - std::countl_zero(size));
  return format_bytes(low) + ".." + (low == (uint64_t{1} << 63) ? std::string("16 EiB") : format_bytes(low * 2));
}

std::vector<SweepSite> sweep_sites(const std::vector<RecordedCall>& calls) {
  std::vector<SweepSite> sites;
  std::map<std::tuple<int64_t, std::string, std::string, std::string, std::string>, size_t> seen;  // key -> index in sites
  for (const auto& c : calls) {
    std::string cls = size_class(c.size);
    auto key = std::make_tuple(c.step, c.phase, c.entry, cls, c.where.value_or(""));
    auto [it, fresh] = seen.emplace(key, sites.size());
    if (!fresh) {
      ++sites[it->second].calls;
      continue;
    }
    SweepSite s;
    s.index = static_cast<int>(sites.size()) + 1;
    s.step = c.step;
    s.phase = c.phase;
    s.entry = c.entry;
    s.size = c.size;
    s.size_class = cls;
    s.nth = c.nth;
    s.calls = 1;
    s.where = c.where;
    sites.push_back(std::move(s));
  }
  return sites;
}

std::string parse_sweep_steps(const std::string& text, std::vector<int64_t>& steps) {
  steps.clear();
  auto number = [](const std::string& t) -> std::optional<int64_t> {
    if (t.empty() || t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    int64_t n = std::stoll(t);
    return n >= 1 ? std::optional<int64_t>(n) : std::nullopt;
  };
  std::string item;
  std::vector<std::string> items;
  for (char c : text + ",") {
    if (c == ',') {
      items.push_back(item);
      item.clear();
    } else if (c != ' ') {
      item += c;
    }
  }
  for (const auto& it : items) {
    size_t dots = it.find("..");
    auto from = number(dots == std::string::npos ? it : it.substr(0, dots));
    auto to = number(dots == std::string::npos ? it : it.substr(dots + 2));
    if (!from || !to) return "'" + it + "' is not a step (from 1) or a range of steps like 2..4";
    if (*from > *to) return "'" + it + "' goes backwards";
    if (static_cast<uint64_t>(*to - *from) >= kMaxSweepSteps) return "'" + it + "' is more than 64 steps";
    for (int64_t s = *from; s <= *to; ++s) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  if (steps.size() > kMaxSweepSteps) return "more than 64 steps";
  return "";
}

const char* sweep_mode_name(SweepMode m) { return m == SweepMode::transient ? "transient" : "persistent"; }

std::optional<SweepMode> sweep_mode_from_name(const std::string& name) {
  if (name == "transient") return SweepMode::transient;
  if (name == "persistent") return SweepMode::persistent;
  return std::nullopt;
}

std::string site_fault_text(const SweepSite& site, SweepMode mode, int transient_times) {
  std::string text = "step=" + std::to_string(site.step) + ",nth=" + std::to_string(site.nth);
  if (mode == SweepMode::transient) return text + ",times=" + std::to_string(transient_times);
  return text + ",until_freed=1";
}

std::optional<uint64_t> sweep_packing_cap(const JobSpec& job, uint64_t golden_peak, int jobs, bool simulate) {
  const bool on_a_gpu = !simulate && job.device != DeviceChoice::virtual_device;
  const bool own_limit = job.memory.limit || job.memory.reserve > 0 || job.memory.leave || !job.memory.schedule.empty();
  if (jobs <= 1 || !on_a_gpu || own_limit || golden_peak == 0) return std::nullopt;
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  return (2 * golden_peak + 256 * kMiB + kMiB - 1) / kMiB * kMiB;
}

}  // namespace oomh::app
