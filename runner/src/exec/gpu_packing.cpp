// Packing jobs onto GPUs: Note [GPU packing] in gpu_packing.h.

#include "exec/gpu_packing.h"

#include "exec/launch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>


namespace oomh::exec {

GpuNeed gpu_need(const JobSpec& job) {
  if (!job.memory.limit || *job.memory.limit == 0) return {true, 0};
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

std::optional<Placement> GpuPacker::place(const GpuNeed& need) {
  if (slots_.empty()) return Placement{};
  bool fits_somewhere = std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return need.bytes <= s.capacity; });
  bool exclusive = need.exclusive || !fits_somewhere;
  for (Slot& s : slots_) {
    if (exclusive) {
      if (s.jobs != 0) continue;
      s.jobs = 1;
      s.exclusive = true;
      return Placement{s.info.index, need.bytes, true};
    }
    if (s.exclusive || s.committed + need.bytes > s.capacity) continue;
    s.committed += need.bytes;
    ++s.jobs;
    return Placement{s.info.index, need.bytes, false};
  }
  return std::nullopt;
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

std::vector<GpuInfo> parse_nvidia_smi(const std::string& text) {
  std::vector<GpuInfo> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    long long index = 0, total = 0, used = 0;
    if (std::sscanf(line.c_str(), " %lld , %lld , %lld", &index, &total, &used) != 3) continue;
    if (index < 0 || total < 0 || used < 0) continue;
    out.push_back({static_cast<int>(index), static_cast<uint64_t>(total) << 20, static_cast<uint64_t>(used) << 20});
  }
  return out;
}


std::vector<GpuInfo> detect_gpus() {
  const char* path = std::getenv("PATH");
  if (resolve_program("nvidia-smi", {std::string("PATH=") + (path ? path : "")}).empty()) return {};
  FILE* f = popen("nvidia-smi --query-gpu=index,memory.total,memory.used --format=csv,noheader,nounits 2>/dev/null", "re");
  if (!f) return {};
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  if (pclose(f) != 0) return {};
  return parse_nvidia_smi(text);
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
