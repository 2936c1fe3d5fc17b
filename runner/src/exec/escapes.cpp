// Note [Processes outside the shim] in escapes.h.

#include "exec/escapes.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <dlfcn.h>

namespace oomh::exec {

namespace {

// NVML's ABI, as nvml.h declares it (only what is used here).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct ProcessInfoV2 {  // nvmlProcessInfo_v2_t, and nvmlProcessInfo_t of the _v3 call
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
using InitFn = NvmlReturn (*)();
using CountFn = NvmlReturn (*)(unsigned int*);
using HandleFn = NvmlReturn (*)(unsigned int, NvmlDevice*);
using ProcessesFn = NvmlReturn (*)(NvmlDevice, unsigned int*, void*);
// NVML reports a memory figure it cannot know (per-process accounting off, a MIG instance) as this.
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;

void* symbol(void* library, const char* name) { return library ? dlsym(library, name) : nullptr; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return in ? std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()) : std::string();
}

// The fields of /proc/<pid>/stat after the command's closing parenthesis: state, ppid, pgrp, session, ...
// A process that has exited (a zombie, or dead) is no process to judge: NVML may list it a moment after its end,
// and its maps are empty then.
bool stat_of(pid_t pid, pid_t& ppid, pid_t& session, bool* ended = nullptr) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  char state = 0;
  int parent = 0, group = 0, sid = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %c %d %d %d", &state, &parent, &group, &sid) != 4) return false;
  ppid = parent;
  session = sid;
  if (ended) *ended = state == 'Z' || state == 'X' || state == 'x';
  return true;
}

}  // namespace

GpuProcessList::GpuProcessList(const std::string& library) {
  library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library_) return;
  auto init = reinterpret_cast<InitFn>(symbol(library_, "nvmlInit_v2"));
  if (!init) init = reinterpret_cast<InitFn>(symbol(library_, "nvmlInit"));
  auto count = reinterpret_cast<CountFn>(symbol(library_, "nvmlDeviceGetCount_v2"));
  if (!count) count = reinterpret_cast<CountFn>(symbol(library_, "nvmlDeviceGetCount"));
  handle_by_index_ = symbol(library_, "nvmlDeviceGetHandleByIndex_v2");
  if (!handle_by_index_) handle_by_index_ = symbol(library_, "nvmlDeviceGetHandleByIndex");
  info_v2_ = true;
  processes_ = symbol(library_, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!processes_) processes_ = symbol(library_, "nvmlDeviceGetComputeRunningProcesses_v2");
  if (!processes_) {
    info_v2_ = false;
    processes_ = symbol(library_, "nvmlDeviceGetComputeRunningProcesses");
  }
  unsigned n = 0;
  if (!init || !count || !handle_by_index_ || !processes_ || init() != kNvmlSuccess || count(&n) != kNvmlSuccess) return;
  devices_ = n;
}

GpuProcessList::~GpuProcessList() {
  if (!library_) return;
  if (devices_ > 0)
    if (auto shutdown = reinterpret_cast<InitFn>(symbol(library_, "nvmlShutdown"))) shutdown();
  dlclose(library_);
}

std::vector<GpuProcess> GpuProcessList::now() const {
  std::vector<GpuProcess> out;
  auto handle_of = reinterpret_cast<HandleFn>(handle_by_index_);
  auto list = reinterpret_cast<ProcessesFn>(processes_);
  for (unsigned d = 0; d < devices_; ++d) {
    NvmlDevice device = nullptr;
    if (handle_of(d, &device) != kNvmlSuccess) continue;
    // Asked with room for 64, then with what NVML said it needs (processes come and go between the calls).
    for (unsigned room = 64, tries = 0; tries < 3; ++tries) {
      std::vector<ProcessInfoV2> v2(info_v2_ ? room : 0);
      std::vector<ProcessInfoV1> v1(info_v2_ ? 0 : room);
      unsigned n = room;
      const NvmlReturn rc = list(device, &n, info_v2_ ? static_cast<void*>(v2.data()) : static_cast<void*>(v1.data()));
      if (rc == kNvmlInsufficientSize && n > room) {
        room = n + 8;
        continue;
      }
      if (rc != kNvmlSuccess) break;
      for (unsigned i = 0; i < n && i < room; ++i) {
        const unsigned pid = info_v2_ ? v2[i].pid : v1[i].pid;
        const unsigned long long used = info_v2_ ? v2[i].usedGpuMemory : v1[i].usedGpuMemory;
        out.push_back(GpuProcess{static_cast<int>(pid), used == kNvmlValueNotAvailable ? 0 : used});
      }
      break;
    }
  }
  return out;
}

bool belongs_to(pid_t pid, const AttemptProcesses& a) {
  if (pid <= 0 || a.leader <= 0) return false;
  pid_t ppid = 0, session = 0;
  bool ended = false;
  if (!stat_of(pid, ppid, session, &ended) || ended) return false;
  if (session == a.leader || pid == a.leader) return true;
  if (!a.control.empty()) {
    const std::string environ = read_file("/proc/" + std::to_string(pid) + "/environ");
    const std::string want = "OOMH_CONTROL=" + a.control;
    for (size_t at = 0; at < environ.size();) {
      const size_t end = environ.find('\0', at);
      if (environ.compare(at, (end == std::string::npos ? environ.size() : end) - at, want) == 0) return true;
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  // Its ancestors (a process that left the session, or cleared its environment), up to a bound.
  for (int depth = 0; depth < 64 && ppid > 1; ++depth) {
    if (ppid == a.leader) return true;
    pid_t next = 0, ignored = 0;
    if (!stat_of(ppid, next, ignored)) break;
    ppid = next;
  }
  return false;
}

std::string shim_state(pid_t pid, const AttemptProcesses& a) {
  bool mapped = false, known = false;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  if (maps && !a.shim_file.empty()) {
    std::string line;
    static const std::string kDeleted = " (deleted)";  // the library replaced on disk while the job runs
    while (std::getline(maps, line)) {
      known = true;  // an empty maps (a process that has just ended) tells nothing
      if (line.size() > kDeleted.size() && line.compare(line.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0)
        line.resize(line.size() - kDeleted.size());
      if (line.size() >= a.shim_file.size() && line.compare(line.size() - a.shim_file.size(), std::string::npos, a.shim_file) == 0 &&
          (line.size() == a.shim_file.size() || line[line.size() - a.shim_file.size() - 1] == '/')) {
        mapped = true;
        break;
      }
    }
  }
  if (known && !mapped) return "absent";
  if (!a.cb) return mapped ? "" : "absent";
  // A job of more processes than the block has slots: those past it were not registered (Engine's local slot).
  if (a.cb->process_count.load(std::memory_order_relaxed) > static_cast<uint32_t>(kMaxProcesses)) return mapped || !known ? "" : "absent";
  for (const ProcessSlot& s : a.cb->processes)
    if (s.pid.load(std::memory_order_relaxed) == pid) return "";
  return mapped ? "inactive" : "absent";
}

std::string command_of(pid_t pid) {
  std::string cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
  for (char& c : cmdline)
    if (c == '\0') c = ' ';
  return cmdline;
}

}  // namespace oomh::exec
