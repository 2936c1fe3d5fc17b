// Packing jobs onto GPUs: Note [GPU packing] in gpu_packing.h.

#include "exec/gpu_packing.h"

#include "oomharness/runner/command.h"

#include <algorithm>
#include <cstdio>
#include <regex>
#include <sstream>

namespace oomh::exec {

GpuNeed gpu_need(const JobSpec& job) {
  // A job with `leave` takes all but that much of the GPU: it shares it with nobody.
  if (!job.memory.limit || *job.memory.limit == 0 || job.memory.leave) return {true, 0};
  uint64_t cap = *job.memory.limit;
  for (const CapChange& c : job.memory.schedule) cap = std::max(cap, c.limit);
  return {false, cap + job.memory.reserve + (job.memory.counts_footprint ? 0 : kContextAllowance)};
}

GpuPacker::GpuPacker(std::vector<GpuInfo> gpus, uint64_t margin) {
  for (const GpuInfo& g : gpus) {
    Slot s;
    s.info = g;
    uint64_t free = g.total > g.used ? g.total - g.used : 0;
    s.capacity = free > margin ? free - margin : 0;
    slots_.push_back(s);
  }
}

std::optional<Placement> GpuPacker::place(const GpuNeed& need, const std::vector<int>& taken) {
  if (slots_.empty()) return Placement{};
  bool fits_somewhere = std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return need.bytes <= s.capacity; });
  bool exclusive = need.exclusive || !fits_somewhere;
  // A shared job goes to the GPU, among those it fits, running the fewest jobs (the first such in order):
  // jobs spread over the GPUs the run was given before they share one (Note [GPU packing]).
  Slot* best = nullptr;
  for (Slot& s : slots_) {
    if (std::find(taken.begin(), taken.end(), s.info.index) != taken.end()) continue;
    if (exclusive) {
      if (s.jobs != 0) continue;
      s.jobs = 1;
      s.exclusive = true;
      return Placement{s.info.index, need.bytes, true};
    }
    if (s.exclusive || s.committed + need.bytes > s.capacity) continue;
    if (!best || s.jobs < best->jobs) best = &s;
  }
  if (!best) return std::nullopt;
  best->committed += need.bytes;
  ++best->jobs;
  return Placement{best->info.index, need.bytes, false};
}

std::optional<std::vector<Placement>> GpuPacker::place_each(const GpuNeed& need, size_t count) {
  if (slots_.empty() || count <= 1) {
    auto p = place(need);
    if (!p) return std::nullopt;
    return std::vector<Placement>{*p};
  }
  if (count > slots_.size()) return std::nullopt;
  std::vector<Placement> out;
  std::vector<int> taken;
  for (size_t k = 0; k < count; ++k) {
    std::optional<Placement> p = place(need, taken);
    if (!p) {
      for (const Placement& q : out) release(q);
      return std::nullopt;
    }
    taken.push_back(*p->gpu);
    out.push_back(*p);
  }
  return out;
}

void GpuPacker::release(const Placement& p) {
  if (!p.gpu) return;
  for (Slot& s : slots_) {
    if (s.info.index != *p.gpu) continue;
    if (p.exclusive) s.exclusive = false;
    else s.committed -= std::min(s.committed, p.bytes);
    if (s.jobs > 0) --s.jobs;
    return;
  }
}

namespace {
std::string trimmed(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}
}  // namespace

GpuSurvey parse_gpu_query(const std::string& text) {
  GpuSurvey survey;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) fields.push_back(trimmed(cell));
    if (fields.size() < 3) continue;
    long long index = 0, total = 0, used = 0;
    if (std::sscanf(fields[0].c_str(), "%lld", &index) != 1 || std::sscanf(fields[1].c_str(), "%lld", &total) != 1 ||
        std::sscanf(fields[2].c_str(), "%lld", &used) != 1 || index < 0 || total < 0 || used < 0)
      continue;
    if (survey.gpus.empty() && fields.size() >= 5) {
      survey.name = fields[3];
      survey.driver_version = fields[4];
    }
    survey.gpus.push_back({static_cast<int>(index), static_cast<uint64_t>(total) << 20, static_cast<uint64_t>(used) << 20});
  }
  return survey;
}

std::optional<GpuSurvey> survey_gpus(double timeout_seconds) {
  CommandOutput q = run_command({"nvidia-smi", "--query-gpu=index,memory.total,memory.used,name,driver_version",
                                 "--format=csv,noheader,nounits"}, timeout_seconds);
  if (q.exit_code != 0) return std::nullopt;
  GpuSurvey survey = parse_gpu_query(q.out);
  if (survey.gpus.empty()) return std::nullopt;
  // The CUDA version the driver supports is only in nvidia-smi's banner.
  CommandOutput banner = run_command({"nvidia-smi"}, timeout_seconds);
  if (banner.exit_code == 0)
    if (auto v = parse_smi_cuda_version(banner.out)) survey.cuda_version = *v;
  return survey;
}

std::optional<std::string> parse_smi_cuda_version(const std::string& text) {
  static const std::regex re(R"(CUDA Version:\s*([0-9]+\.[0-9]+))");
  std::smatch m;
  if (std::regex_search(text, m, re)) return m[1].str();
  return std::nullopt;
}

std::vector<GpuInfo> select_gpus(std::vector<GpuInfo> gpus, const std::vector<int>& wanted) {
  if (wanted.empty()) return gpus;
  std::vector<GpuInfo> out;
  for (int w : wanted)
    for (const GpuInfo& g : gpus)
      if (g.index == w) out.push_back(g);
  return out;
}

}  // namespace oomh::exec
