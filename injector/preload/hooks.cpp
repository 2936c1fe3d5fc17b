// liboomharness_inject.so: the preload. This file only forwards (heaptrack's habit): it finds the real
// driver, routes each intercepted call through the engine (injector/engine), and hands out its own hooks
// wherever a program looks a driver function up.
//
// Note [Three ways in]
// A program reaches a driver function (1) through the exported symbol, when it links libcuda (this library
// is preloaded, so its definitions come first); (2) through dlsym on a libcuda handle, which this library
// overrides; (3) through what cuGetProcAddress/cuGetProcAddress_v2 hands out: the CUDA runtime looks
// cuGetProcAddress_v2 up with dlsym (so it gets our hook) and asks it for every other function, including
// when a framework calls cudaGetDriverEntryPoint[ByVersion]. Our cuGetProcAddress calls the real one, then
// swaps the pointer it got for our hook: first by comparing it with the real address of every variant,
// then, when the driver handed out an internal address, by base name, cudaVersion and the per-thread flag
// (hook_table.h). All three paths end in the same hook function, declared once in hook_table.h.
//
// Note [dlsym override]
// The real dlsym is found with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34") (then "GLIBC_2.2.5"). glibc's
// dlsym resolves RTLD_NEXT and RTLD_DEFAULT relative to the object that called it, found from the return
// address. If our dlsym called the real one, every RTLD_NEXT lookup would be answered as if this library
// had asked, and another interposer (a second preload that wraps malloc with dlsym(RTLD_NEXT, "malloc"))
// would get its own function back and recurse. So on x86-64, dlsym is a few instructions of assembly: it
// asks oomh_dlsym_replacement whether the name is one we hook, and otherwise tail-jumps into the real dlsym
// with the caller's return address still on the stack. Elsewhere a C fallback calls the real dlsym (the
// RTLD_NEXT limitation then applies; docs/injector.md says so).
//
// Note [Start-up]
// The engine starts in this library's constructor, or earlier when another library's constructor already
// calls dlsym or cuGetProcAddress (the first call starts it). Starting reads the OOMH_ variables and maps
// the control block; it never touches the driver. The driver (libcuda.so.1) is resolved lazily, at the
// first hooked call, with dlopen(RTLD_NOLOAD) first: the shim never loads CUDA into a process that does not
// use it, and never links libcuda. A thread-local guard (initial-exec TLS: no allocation on first use)
// makes a hook that the engine's own work reaches again forward straight to the driver.

#include "footprint.h"
#include "hook_table.h"
#include "real_driver.h"

#include "../engine/engine.h"
#include "../engine/options.h"

#include <oomharness/control_block.h>
#include <oomharness/process_ids.h>

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#undef cuGetProcAddress  // cuda.h maps it to cuGetProcAddress_v2; the old 4-argument symbol is hooked too

#define OOMH_EXPORT extern "C" __attribute__((visibility("default")))

// The per-thread-default-stream variants: cuda.h declares them only under CUDA_API_PER_THREAD_DEFAULT_STREAM.
OOMH_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
OOMH_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream);
OOMH_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
OOMH_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);

namespace oomh::inject {
namespace {

// ---- NVML, declared here: the shim does not need nvml.h, only these two layouts (stable NVML ABI).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
using NvmlGetIndex = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);

nvmlReturn_t hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, NvmlMemory* memory);
nvmlReturn_t hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, NvmlMemoryV2* memory);

// ---- The replacements, by index into kHookTable.
void* hook_address(int index) {
  switch (index) {
    case hook_index("cuGetProcAddress"): return reinterpret_cast<void*>(&::cuGetProcAddress);
    case hook_index("cuGetProcAddress_v2"): return reinterpret_cast<void*>(&::cuGetProcAddress_v2);
    case hook_index("cuMemAlloc_v2"): return reinterpret_cast<void*>(&::cuMemAlloc_v2);
    case hook_index("cuMemAllocPitch_v2"): return reinterpret_cast<void*>(&::cuMemAllocPitch_v2);
    case hook_index("cuMemAllocManaged"): return reinterpret_cast<void*>(&::cuMemAllocManaged);
    case hook_index("cuMemAllocAsync"): return reinterpret_cast<void*>(&::cuMemAllocAsync);
    case hook_index("cuMemAllocAsync_ptsz"): return reinterpret_cast<void*>(&::cuMemAllocAsync_ptsz);
    case hook_index("cuMemAllocFromPoolAsync"): return reinterpret_cast<void*>(&::cuMemAllocFromPoolAsync);
    case hook_index("cuMemAllocFromPoolAsync_ptsz"): return reinterpret_cast<void*>(&::cuMemAllocFromPoolAsync_ptsz);
    case hook_index("cuMemCreate"): return reinterpret_cast<void*>(&::cuMemCreate);
    case hook_index("cuMemFree_v2"): return reinterpret_cast<void*>(&::cuMemFree_v2);
    case hook_index("cuMemFreeAsync"): return reinterpret_cast<void*>(&::cuMemFreeAsync);
    case hook_index("cuMemFreeAsync_ptsz"): return reinterpret_cast<void*>(&::cuMemFreeAsync_ptsz);
    case hook_index("cuMemRelease"): return reinterpret_cast<void*>(&::cuMemRelease);
    case hook_index("cuMemHostAlloc"): return reinterpret_cast<void*>(&::cuMemHostAlloc);
    case hook_index("cuMemAllocHost_v2"): return reinterpret_cast<void*>(&::cuMemAllocHost_v2);
    case hook_index("cuMemHostRegister_v2"): return reinterpret_cast<void*>(&::cuMemHostRegister_v2);
    case hook_index("cuMemFreeHost"): return reinterpret_cast<void*>(&::cuMemFreeHost);
    case hook_index("cuMemHostUnregister"): return reinterpret_cast<void*>(&::cuMemHostUnregister);
    case hook_index("cuMemGetInfo_v2"): return reinterpret_cast<void*>(&::cuMemGetInfo_v2);
    case hook_index("cuDeviceTotalMem_v2"): return reinterpret_cast<void*>(&::cuDeviceTotalMem_v2);
    case hook_index("nvmlDeviceGetMemoryInfo"): return reinterpret_cast<void*>(&hook_nvmlDeviceGetMemoryInfo);
    case hook_index("nvmlDeviceGetMemoryInfo_v2"): return reinterpret_cast<void*>(&hook_nvmlDeviceGetMemoryInfo_v2);
    default: return nullptr;
  }
}
static_assert(kHookCount == 23, "a new kHookTable entry needs its replacement in hook_address()");

bool is_our_hook(void* p) {
  for (int i = 0; i < kHookCount; ++i)
    if (p == hook_address(i)) return true;
  return false;
}

// ---- Process state. Constant-initialised: valid before any constructor runs, never destroyed.
enum State : int { kNotStarted = 0, kStarting = 1, kPassThrough = 2, kActive = 3 };
std::atomic<int> g_state{kNotStarted};
Engine* g_engine = nullptr;
alignas(Engine) unsigned char g_engine_storage[sizeof(Engine)];
char g_control_name[64];
bool g_created_block = false;
LogLevel g_log = LogLevel::warn;

thread_local bool t_in_hook __attribute__((tls_model("initial-exec"))) = false;
thread_local bool t_starting __attribute__((tls_model("initial-exec"))) = false;

std::atomic<void*> g_real[kHookCount];
std::atomic<void*> g_libcuda{nullptr};
std::atomic<void*> g_libnvml{nullptr};
std::atomic<void*> g_cu_ctx_get_device{nullptr};
std::atomic<void*> g_nvml_get_index{nullptr};
std::atomic<bool> g_missing_reported[kHookCount];

// CUDA_VISIBLE_DEVICES as numbers (NVML index -> CUDA ordinal), read at start.
int g_visible[kMaxDevices];
int g_visible_count = -1;  // -1: unset (ordinal = NVML index); -2: not numeric (no mapping)

struct HookGuard {
  HookGuard() { t_in_hook = true; }
  ~HookGuard() { t_in_hook = false; }
  HookGuard(const HookGuard&) = delete;
  HookGuard& operator=(const HookGuard&) = delete;
};

void say(const char* format, ...) __attribute__((format(printf, 1, 2)));
void say(const char* format, ...) {
  if (g_log == LogLevel::quiet) return;
  char buf[1400];
  int n = std::snprintf(buf, sizeof buf, "oomharness: ");
  va_list args;
  va_start(args, format);
  int m = std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, format, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0u : std::min<size_t>(static_cast<size_t>(m), sizeof buf - static_cast<size_t>(n) - 2));
  buf[len++] = '\n';
  ssize_t ignored = ::write(2, buf, len);
  (void)ignored;
}

}  // namespace
}  // namespace oomh::inject

// ---- The real dlsym (Note [dlsym override]). Hidden, but named for the assembly below.
using oomh::inject::DlsymFn;
extern "C" {
__attribute__((visibility("hidden"))) DlsymFn oomh_real_dlsym_ptr = nullptr;
}

namespace oomh::inject {

DlsymFn real_dlsym() {
  DlsymFn f = __atomic_load_n(&oomh_real_dlsym_ptr, __ATOMIC_ACQUIRE);
  if (f) return f;
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");  // aarch64's first version
  if (!p) {
    static const char message[] = "oomharness: cannot find the real dlsym (dlvsym GLIBC_2.34 / GLIBC_2.2.5); aborting\n";
    ssize_t ignored = ::write(2, message, sizeof message - 1);
    (void)ignored;
    std::abort();
  }
  f = reinterpret_cast<DlsymFn>(p);
  __atomic_store_n(&oomh_real_dlsym_ptr, f, __ATOMIC_RELEASE);
  return f;
}

void* libcuda() {
  void* h = g_libcuda.load(std::memory_order_acquire);
  if (h) return h;
  h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h) g_libcuda.store(h, std::memory_order_release);
  return h;
}

namespace {

void* libnvml() {
  void* h = g_libnvml.load(std::memory_order_acquire);
  if (h) return h;
  h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (h) g_libnvml.store(h, std::memory_order_release);
  return h;
}

// Remembers a real address for an entry, never one of our own hooks (that would recurse).
void remember_real(int index, void* p) {
  if (!p || is_our_hook(p)) return;
  void* expected = nullptr;
  g_real[index].compare_exchange_strong(expected, p, std::memory_order_acq_rel);
}

// `report`: say once on stderr when the real function is missing (a call needs it, not a comparison).
__attribute__((noinline, cold)) void* resolve_slow(int index, bool report) {
  const HookSpec& spec = kHookTable[index];
  void* lib = spec.library == HookLibrary::cuda ? libcuda() : libnvml();
  if (lib) remember_real(index, real_dlsym()(lib, spec.name));
  void* p = g_real[index].load(std::memory_order_acquire);
  if (!p && report && !g_missing_reported[index].exchange(true)) {
    say("%s: the real %s was not found (%s); the call fails", spec.name, spec.name,
        lib ? "the driver does not export it" : "libcuda.so.1 cannot be loaded");
  }
  return p;
}

// Once resolved, a real function costs one load.
inline void* resolve(int index, bool report = true) {
  void* p = g_real[index].load(std::memory_order_acquire);
  return p ? p : resolve_slow(index, report);
}

// An entry of kHookTable, found by name at compile time. Every hook calls real_fn, so looking the name up at
// run time (a string compare per table entry, ~300 instructions for cuMemFree_v2) cost more per call than
// the rest of the hook. The constructor is consteval: a name that is not in the table does not compile (the
// throw is never evaluated at run time).
struct HookId {
  consteval HookId(const char* entry) : index(hook_index(entry)) {
    if (index < 0) throw "not an entry of kHookTable";
  }
  const char* name() const { return kHookTable[index].name; }
  int index;
};

template <typename Fn>
Fn real_fn(HookId id) {
  return reinterpret_cast<Fn>(resolve(id.index));
}

// ---- Start-up (Note [Start-up]).
void parse_visible_devices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v) return;
  g_visible_count = 0;
  for (const char* p = v; *p;) {
    char* end = nullptr;
    long n = std::strtol(p, &end, 10);
    if (end == p || n < 0 || (*end != ',' && *end != '\0') || g_visible_count >= kMaxDevices) {
      g_visible_count = -2;  // UUIDs, MIG names: no mapping from NVML index to CUDA ordinal
      return;
    }
    g_visible[g_visible_count++] = static_cast<int>(n);
    p = *end == ',' ? end + 1 : end;
  }
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

void fork_prepare() {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  g_engine->prepare_fork();
  footprint_prepare_fork();
}
void fork_parent() {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  footprint_after_fork_parent();
  g_engine->after_fork_parent();
}
void fork_child() {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  g_created_block = false;  // the parent unlinks the block it created, not a child
  footprint_after_fork_child();
  g_engine->after_fork_child();
  char pid[24];
  std::snprintf(pid, sizeof pid, "%d", static_cast<int>(process_ids().pid));  // Note [Pids the runner can see]
  setenv("OOMH_SHIM_PARENT", pid, 1);
}

ControlBlock* map_control_block(const Options& o) {
  std::snprintf(g_control_name, sizeof g_control_name, "%s%d", kSoloBlockPrefix, static_cast<int>(getpid()));
  if (o.has_control) {
    ControlBlock* cb = control_block_open(o.control.c_str());
    if (!cb)
      say("OOMH_CONTROL: cannot map '%s': %s; the shim runs as a pass-through", o.control.c_str(),
          errno == EPROTO ? "not a control block of this version" : std::strerror(errno));
    // The process that created its own block and then exec'd (a wrapper script: same pid) still owns it.
    g_created_block = cb && o.control == g_control_name && (cb->flags & kControlCreatedByShim);
    return cb;
  }
  ControlBlock* cb = control_block_create(g_control_name, kControlCreatedByShim);
  if (!cb && errno == EEXIST) {  // left behind by a dead process whose pid this one reuses
    shm_unlink(g_control_name);
    cb = control_block_create(g_control_name, kControlCreatedByShim);
  }
  if (!cb) {
    say("cannot create the control block '%s': %s; the shim runs as a pass-through", g_control_name, std::strerror(errno));
    return nullptr;
  }
  g_created_block = true;
  setenv("OOMH_CONTROL", g_control_name, 1);  // exec'd children share it
  return cb;
}

// Returns the state it settled on.
int start_engine() {
  Options o = read_options(environ);
  g_log = o.log;
  // A process that inherited the shim through exec: its parent already warned about the variables.
  if (!o.has_shim_parent)
    for (const auto& problem : o.problems) say("%s", problem.c_str());
  if (!o.active()) return kPassThrough;

  EngineSetup setup;
  setup.log = o.log;
  setup.cap_counts = o.cap_counts;
  setup.record_from = o.record_from;
  setup.record_to = o.record_to;
  setup.footprint_probe = &measure_footprint;
  std::string faults_off;  // why faults are off, when a variable could not be read
  if (o.has_plan) {
    Expected<FaultPlan, std::string> plan = load_fault_plan(o.plan.c_str());
    if (plan) setup.plan = std::move(*plan);
    else faults_off = "OOMH_PLAN: " + plan.error();
  }
  if (o.has_cap && faults_off.empty()) {
    Expected<std::vector<CapEntry>> caps = parse_cap_option(o.cap);
    if (caps) setup.option_caps = std::move(*caps);
    else faults_off = "OOMH_CAP: " + caps.error().str();
  }
  if (!faults_off.empty()) {
    setup.plan.reset();
    setup.option_caps.clear();
    setup.plan_error = faults_off;  // the armed record says so (Note [Armed record])
  }

  ControlBlock* cb = map_control_block(o);
  if (!cb) {
    if (!faults_off.empty()) say("%s", faults_off.c_str());
    return kPassThrough;
  }
  setup.block = cb;
  // Note [A plan only the runner writes]: a runner's block takes no plan; one a shim made for itself does.
  setup.plan_updates = !o.has_control || control_name_is_solo(o.control.c_str());
  bool execd = o.has_shim_parent;
  setup.process_flags = execd ? kProcessExecd : 0;
  // OOMH_SHIM_PARENT equal to our own pid: this image replaced one of ours by exec without fork (a wrapper
  // script); the engine then takes over that image's slot. Otherwise the parent is the process that forked us.
  // Pids as /proc names them, as the slots hold them (Note [Pids the runner can see]).
  const ProcessIds ids = process_ids();
  int pid = ids.pid;
  setup.parent_pid = execd && std::atoi(o.shim_parent.c_str()) == pid ? pid : ids.ppid;
  if (o.has_events) {
    setup.events_fd = events::open_event_log(o.events.c_str());
    if (setup.events_fd < 0) say("OOMH_EVENTS: cannot open '%s': %s; no events are written", o.events.c_str(), std::strerror(errno));
  }
  setup.rank = env_int("RANK");
  setup.local_rank = env_int("LOCAL_RANK");
  parse_visible_devices();

  char pid_text[24];
  std::snprintf(pid_text, sizeof pid_text, "%d", pid);
  setenv("OOMH_SHIM_PARENT", pid_text, 1);

  g_engine = new (g_engine_storage) Engine(std::move(setup));
  if (!faults_off.empty()) {
    std::string message = faults_off + " (no faults and no caps; the shim only counts)";
    g_engine->report_warning(message.c_str());
  }
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  return kActive;
}

// Starts the engine once. A thread that arrives while another starts it waits; the starting thread itself
// (a hook reached from inside start-up) gets nullptr and forwards.
Engine* engine() {
  int s = g_state.load(std::memory_order_acquire);
  if (s == kActive) return t_in_hook ? nullptr : g_engine;
  if (s == kPassThrough) return nullptr;
  if (t_starting) return nullptr;
  int expected = kNotStarted;
  if (g_state.compare_exchange_strong(expected, kStarting, std::memory_order_acq_rel)) {
    t_starting = true;
    int settled = kPassThrough;
    try {
      settled = start_engine();
    } catch (...) {
      say("start-up failed (out of memory?); the shim runs as a pass-through");
    }
    t_starting = false;
    g_state.store(settled, std::memory_order_release);
    return settled == kActive && !t_in_hook ? g_engine : nullptr;
  }
  while ((s = g_state.load(std::memory_order_acquire)) == kStarting) sched_yield();
  return s == kActive && !t_in_hook ? g_engine : nullptr;
}

__attribute__((constructor)) void shim_constructor() { engine(); }

__attribute__((destructor)) void shim_destructor() {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  g_engine->finish();
  if (g_created_block) shm_unlink(g_control_name);
}

// ---- The device an allocation lands on: the current context's, asked of the real driver.
int current_device() {
  auto* f = reinterpret_cast<CUresult (*)(CUdevice*)>(g_cu_ctx_get_device.load(std::memory_order_acquire));
  if (!f) {
    void* lib = libcuda();
    f = lib ? reinterpret_cast<CUresult (*)(CUdevice*)>(real_dlsym()(lib, "cuCtxGetDevice")) : nullptr;
    if (!f) return -1;
    g_cu_ctx_get_device.store(reinterpret_cast<void*>(f), std::memory_order_release);
  }
  CUdevice d = -1;
  return f(&d) == CUDA_SUCCESS ? static_cast<int>(d) : -1;
}

void learn_physical_total(Engine& e, int device) {
  if (!e.needs_physical_total(device)) return;
  auto real = real_fn<CUresult (*)(size_t*, CUdevice)>("cuDeviceTotalMem_v2");
  size_t total = 0;
  if (real && real(&total, device) == CUDA_SUCCESS) e.note_physical_total(device, total);
}

// One allocation through the engine: decide, call the driver, book the result.
template <typename Call, typename Key, typename Actual>
CUresult intercept_alloc(Engine& e, Entry entry, const char* symbol, int device, uint64_t size, Space space,
                         Call&& call, Key&& key, Actual&& actual) {
  HookGuard guard;
  if (device >= 0) learn_physical_total(e, device);
  AllocDecision d = e.begin_alloc(entry, symbol, device, size);
  if (d.fail) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = call();
  bool ok = rc == CUDA_SUCCESS;
  e.end_alloc(d, ok, space, ok ? key() : 0, ok ? actual() : 0);
  return rc;
}

// One pinned host allocation through the engine (Note [Host memory] in engine/fault_plan.h).
template <typename Call, typename Key>
CUresult intercept_host_alloc(Engine& e, Entry entry, const char* symbol, uint64_t size, Space space, Call&& call,
                              Key&& key) {
  HookGuard guard;
  AllocDecision d = e.begin_host_alloc(entry, symbol, size);
  if (d.fail) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult rc = call();
  bool ok = rc == CUDA_SUCCESS;
  e.end_host_alloc(d, ok, space, ok ? key() : 0, size);
  return rc;
}

template <typename Call>
CUresult intercept_free(Engine& e, Space space, uint64_t key, Call&& call) {
  HookGuard guard;
  std::optional<Allocation> taken = e.begin_free(space, key);
  CUresult rc = call();
  e.end_free(space, key, taken, rc == CUDA_SUCCESS);
  return rc;
}

CUresult missing() { return CUDA_ERROR_NOT_FOUND; }

// ---- cuGetProcAddress (Note [Three ways in]).
void wrap_proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  Engine* e = symbol && pfn && *pfn ? engine() : nullptr;
  if (!e) return;
  void* got = *pfn;
  if (is_our_hook(got)) return;
  int index = -1;
  for (int i = 0; i < kHookCount && index < 0; ++i)
    if (kHookTable[i].library == HookLibrary::cuda && resolve(i, false) == got) index = i;
  if (index < 0) {
    index = hook_for_proc_address(symbol, cuda_version, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
    if (index < 0) index = hook_index(symbol);  // asked for a versioned name the driver accepted
    if (index >= 0 && kHookTable[index].library != HookLibrary::cuda) index = -1;
    if (index >= 0) remember_real(index, got);
  }
  if (index >= 0) {
    *pfn = hook_address(index);
    e->note_way_in(kWayProcAddress);
  }
}

// ---- NVML (reached through dlsym only). NVML index -> CUDA ordinal through CUDA_VISIBLE_DEVICES.
int nvml_cuda_ordinal(nvmlDevice_t device) {
  auto get_index = reinterpret_cast<NvmlGetIndex>(g_nvml_get_index.load(std::memory_order_acquire));
  unsigned int index = 0;
  if (!get_index || get_index(device, &index) != 0) return -1;
  if (g_visible_count == -1) return static_cast<int>(index);
  for (int i = 0; i < g_visible_count; ++i)
    if (g_visible[i] == static_cast<int>(index)) return i;
  return -1;  // not visible to CUDA, or CUDA_VISIBLE_DEVICES is not numeric
}

// Both NVML memory queries: the real answer, then total and free capped for the CUDA device it maps to.
// Returns true when `memory` was capped (the caller then fixes the fields its struct version adds).
template <class Memory>
bool cap_nvml_memory(HookId id, nvmlDevice_t device, Memory* memory, nvmlReturn_t& rc) {
  auto real = real_fn<nvmlReturn_t (*)(nvmlDevice_t, Memory*)>(id);
  if (!real) {
    rc = 999;  // NVML_ERROR_UNKNOWN
    return false;
  }
  rc = real(device, memory);
  Engine* e = engine();
  if (rc != 0 || !memory || !e) return false;
  HookGuard guard;
  int ordinal = nvml_cuda_ordinal(device);
  if (ordinal < 0) return false;
  MemInfo m = e->mem_info(ordinal, memory->free, memory->total, false);
  memory->total = m.total;
  memory->free = m.free;
  return true;
}

nvmlReturn_t hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, NvmlMemory* memory) {
  nvmlReturn_t rc = 0;
  if (cap_nvml_memory("nvmlDeviceGetMemoryInfo", device, memory, rc)) memory->used = memory->total - memory->free;
  return rc;
}

nvmlReturn_t hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, NvmlMemoryV2* memory) {
  nvmlReturn_t rc = 0;
  if (cap_nvml_memory("nvmlDeviceGetMemoryInfo_v2", device, memory, rc)) {
    uint64_t in_use = memory->total - memory->free;
    memory->reserved = memory->reserved < in_use ? memory->reserved : in_use;
    memory->used = in_use - memory->reserved;
  }
  return rc;
}

}  // namespace
}  // namespace oomh::inject

using namespace oomh::inject;  // NOLINT: the hooks below are the C ABI of this namespace's engine

// ---- dlsym. Returns our hook for a name in the table that the handle really resolves, else nullptr
// (the caller then forwards to the real dlsym with the program's return address).
extern "C" __attribute__((visibility("hidden"))) void* oomh_dlsym_replacement(void* handle, const char* name) {
  real_dlsym();  // the assembly below jumps through oomh_real_dlsym_ptr
  if (!name || !((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v')) || t_in_hook) return nullptr;
  int index = hook_index(name);
  Engine* e = index < 0 ? nullptr : engine();
  if (!e) return nullptr;
  void* real = real_dlsym()(handle, name);
  if (!real) return nullptr;
  e->note_way_in(oomh::kWayDlsym);
  if (kHookTable[index].library == HookLibrary::nvml && !is_our_hook(real)) {
    // NVML's functions are resolved from the handle the program used; nvmlDeviceGetIndex comes from the same.
    if (handle != RTLD_DEFAULT && handle != RTLD_NEXT) g_libnvml.store(handle, std::memory_order_release);
    g_real[index].store(real, std::memory_order_release);
    if (void* get_index = real_dlsym()(handle, "nvmlDeviceGetIndex"))
      g_nvml_get_index.store(get_index, std::memory_order_release);
  } else {
    remember_real(index, real);
  }
  return hook_address(index);
}

#if defined(__x86_64__)
// dlsym(handle, name): ask oomh_dlsym_replacement; on nullptr, tail-jump to the real dlsym so that it sees
// the caller's return address (Note [dlsym override]).
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    "dlsym:\n"
    ".cfi_startproc\n"
    "  endbr64\n"
    "  push %rdi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  push %rsi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  sub $8, %rsp\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  call oomh_dlsym_replacement\n"
    "  add $8, %rsp\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  pop %rsi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  pop %rdi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  test %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  jmp *oomh_real_dlsym_ptr(%rip)\n"
    ".cfi_endproc\n"
    ".size dlsym, .-dlsym\n");
#else
OOMH_EXPORT void* dlsym(void* handle, const char* name) {
  if (void* hook = oomh_dlsym_replacement(handle, name)) return hook;
  return real_dlsym()(handle, name);
}
#endif

// ---- The hooks. Each forwards when the shim is off (or re-entered), else goes through the engine.
OOMH_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* symbolStatus) {
  auto real = real_fn<decltype(&cuGetProcAddress_v2)>("cuGetProcAddress_v2");
  if (!real) return missing();
  CUresult rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (rc == CUDA_SUCCESS && !t_in_hook) wrap_proc_address(symbol, pfn, cudaVersion, flags);
  return rc;
}

OOMH_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  auto real = real_fn<decltype(&cuGetProcAddress)>("cuGetProcAddress");
  if (!real) return missing();
  CUresult rc = real(symbol, pfn, cudaVersion, flags);
  if (rc == CUDA_SUCCESS && !t_in_hook) wrap_proc_address(symbol, pfn, cudaVersion, flags);
  return rc;
}

OOMH_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  auto real = real_fn<decltype(&cuMemAlloc_v2)>("cuMemAlloc_v2");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(dptr, bytesize);
  return intercept_alloc(*e, Entry::mem_alloc, "cuMemAlloc_v2", current_device(), bytesize, Space::device_pointer,
                         [&] { return real(dptr, bytesize); }, [&] { return static_cast<uint64_t>(*dptr); },
                         [&] { return static_cast<uint64_t>(bytesize); });
}

OOMH_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                        unsigned int ElementSizeBytes) {
  auto real = real_fn<decltype(&cuMemAllocPitch_v2)>("cuMemAllocPitch_v2");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  // Note [Pitched allocations]: the driver pads each row to a pitch it picks, and pitch x height is what it
  // holds and what is booked. So the cap is checked against the rows padded to kPitchAlignment (the texture
  // alignment drivers pad to, which the driver double uses too); should the driver pick a wider pitch and
  // the booked bytes pass the cap, the allocation is freed and fails as a cap failure would.
  constexpr uint64_t kPitchAlignment = 512;
  uint64_t width = WidthInBytes, height = Height;
  uint64_t padded = width > UINT64_MAX - kPitchAlignment ? UINT64_MAX : (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  uint64_t bound = height != 0 && padded > UINT64_MAX / height ? UINT64_MAX : padded * height;
  int device = current_device();
  CUresult rc = intercept_alloc(*e, Entry::mem_alloc_pitch, "cuMemAllocPitch_v2", device, bound, Space::device_pointer,
                                [&] { return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes); },
                                [&] { return static_cast<uint64_t>(*dptr); },
                                [&] { return static_cast<uint64_t>(*pPitch) * Height; });
  if (rc != CUDA_SUCCESS || !pPitch || static_cast<uint64_t>(*pPitch) * height <= bound) return rc;
  oomh::ControlBlock* cb = e->block();
  if (!cb || device < 0 || device >= oomh::kMaxDevices) return rc;
  oomh::DeviceCounters& c = cb->devices[device];
  uint64_t cap = e->cap_limit(device);  // this process's, never the block's (Note [A plan only the runner writes])
  if (cap == 0 || c.held.load(std::memory_order_relaxed) <= cap) return rc;
  auto real_free = real_fn<decltype(&cuMemFree_v2)>("cuMemFree_v2");
  if (!real_free) return rc;
  CUdeviceptr p = *dptr;
  intercept_free(*e, Space::device_pointer, static_cast<uint64_t>(p), [&] { return real_free(p); });
  c.cap_failures.fetch_add(1, std::memory_order_relaxed);
  *dptr = 0;
  return CUDA_ERROR_OUT_OF_MEMORY;
}

OOMH_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  auto real = real_fn<decltype(&cuMemAllocManaged)>("cuMemAllocManaged");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(dptr, bytesize, flags);
  return intercept_alloc(*e, Entry::mem_alloc_managed, "cuMemAllocManaged", current_device(), bytesize,
                         Space::device_pointer, [&] { return real(dptr, bytesize, flags); },
                         [&] { return static_cast<uint64_t>(*dptr); }, [&] { return static_cast<uint64_t>(bytesize); });
}

namespace {
template <typename Fn>
CUresult alloc_async(HookId id, CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  auto real = real_fn<Fn>(id);
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(dptr, bytesize, stream);
  return intercept_alloc(*e, Entry::mem_alloc_async, id.name(), current_device(), bytesize, Space::device_pointer,
                         [&] { return real(dptr, bytesize, stream); }, [&] { return static_cast<uint64_t>(*dptr); },
                         [&] { return static_cast<uint64_t>(bytesize); });
}

template <typename Fn>
CUresult alloc_from_pool(HookId id, CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) {
  auto real = real_fn<Fn>(id);
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(dptr, bytesize, pool, stream);
  return intercept_alloc(*e, Entry::mem_alloc_from_pool_async, id.name(), current_device(), bytesize, Space::device_pointer,
                         [&] { return real(dptr, bytesize, pool, stream); },
                         [&] { return static_cast<uint64_t>(*dptr); }, [&] { return static_cast<uint64_t>(bytesize); });
}

template <typename Fn>
CUresult free_async(HookId id, CUdeviceptr dptr, CUstream stream) {
  auto real = real_fn<Fn>(id);
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(dptr, stream);
  return intercept_free(*e, Space::device_pointer, dptr, [&] { return real(dptr, stream); });
}
}  // namespace

OOMH_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async<decltype(&cuMemAllocAsync)>("cuMemAllocAsync", dptr, bytesize, hStream);
}

OOMH_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async<decltype(&cuMemAllocAsync_ptsz)>("cuMemAllocAsync_ptsz", dptr, bytesize, hStream);
}

OOMH_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_from_pool<decltype(&cuMemAllocFromPoolAsync)>("cuMemAllocFromPoolAsync", dptr, bytesize, pool, hStream);
}

OOMH_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_from_pool<decltype(&cuMemAllocFromPoolAsync_ptsz)>("cuMemAllocFromPoolAsync_ptsz", dptr, bytesize, pool, hStream);
}

OOMH_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                 unsigned long long flags) {
  auto real = real_fn<decltype(&cuMemCreate)>("cuMemCreate");
  if (!real) return missing();
  Engine* e = engine();
  if (!e || !prop) return real(handle, size, prop, flags);
  // Host memory (Note [Host memory]): a host location of any kind (the host, one of its NUMA nodes).
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST || prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
      prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
    return intercept_host_alloc(*e, Entry::mem_create, "cuMemCreate", size, Space::vmm_handle,
                                [&] { return real(handle, size, prop, flags); },
                                [&] { return static_cast<uint64_t>(*handle); });
  // Device memory counts on the device the properties name (not the current context's).
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return real(handle, size, prop, flags);
  return intercept_alloc(*e, Entry::mem_create, "cuMemCreate", prop->location.id, size, Space::vmm_handle,
                         [&] { return real(handle, size, prop, flags); }, [&] { return static_cast<uint64_t>(*handle); },
                         [&] { return static_cast<uint64_t>(size); });
}

OOMH_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  auto real = real_fn<decltype(&cuMemFree_v2)>("cuMemFree_v2");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(dptr);
  return intercept_free(*e, Space::device_pointer, dptr, [&] { return real(dptr); });
}

OOMH_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return free_async<decltype(&cuMemFreeAsync)>("cuMemFreeAsync", dptr, hStream);
}

OOMH_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return free_async<decltype(&cuMemFreeAsync_ptsz)>("cuMemFreeAsync_ptsz", dptr, hStream);
}

OOMH_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto real = real_fn<decltype(&cuMemRelease)>("cuMemRelease");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(handle);
  return intercept_free(*e, Space::vmm_handle, handle, [&] { return real(handle); });
}

// ---- Pinned host memory (Note [Host memory] in engine/fault_plan.h).
OOMH_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  auto real = real_fn<decltype(&cuMemHostAlloc)>("cuMemHostAlloc");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(pp, bytesize, Flags);
  return intercept_host_alloc(*e, Entry::mem_host_alloc, "cuMemHostAlloc", bytesize, Space::host_pointer,
                              [&] { return real(pp, bytesize, Flags); },
                              [&] { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*pp)); });
}

OOMH_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  auto real = real_fn<decltype(&cuMemAllocHost_v2)>("cuMemAllocHost_v2");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(pp, bytesize);
  return intercept_host_alloc(*e, Entry::mem_alloc_host, "cuMemAllocHost_v2", bytesize, Space::host_pointer,
                              [&] { return real(pp, bytesize); },
                              [&] { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*pp)); });
}

OOMH_EXPORT CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  auto real = real_fn<decltype(&cuMemHostRegister_v2)>("cuMemHostRegister_v2");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(p, bytesize, Flags);
  return intercept_host_alloc(*e, Entry::mem_host_register, "cuMemHostRegister_v2", bytesize, Space::host_pointer,
                              [&] { return real(p, bytesize, Flags); },
                              [&] { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); });
}

OOMH_EXPORT CUresult cuMemFreeHost(void* p) {
  auto real = real_fn<decltype(&cuMemFreeHost)>("cuMemFreeHost");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(p);
  return intercept_free(*e, Space::host_pointer, reinterpret_cast<uintptr_t>(p), [&] { return real(p); });
}

OOMH_EXPORT CUresult cuMemHostUnregister(void* p) {
  auto real = real_fn<decltype(&cuMemHostUnregister)>("cuMemHostUnregister");
  if (!real) return missing();
  Engine* e = engine();
  if (!e) return real(p);
  return intercept_free(*e, Space::host_pointer, reinterpret_cast<uintptr_t>(p), [&] { return real(p); });
}

// Note [The site of a recorded call] in injector/engine/engine.h: the virtual device's allocator model names
// the user's line of the segment it is about to ask for. Needs no engine (a thread-local copy).
OOMH_EXPORT void oomh_note_site(const char* where) { oomh::inject::Engine::note_site(where); }

// Note [Where a step fault fires] in injector/engine/fault_plan.h: the virtual device's allocator model
// (layer 1, `allocator`) or the probe on a GPU (layer 2, `probe`) registers itself once, then asks for each
// request, with the step and phase (oomh::Phase) its process is in; 1: the fault plan refuses it (the shim wrote
// the inject event), 0: it does not, or the shim is not active. Called from Python through ctypes, at any time after the shim started: the engine is what the
// hooks use (engine() starts it when needed), and nothing here allocates.
OOMH_EXPORT void oomh_register_requests(int layer) {
  Engine* e = engine();
  if (!e || (layer != 1 && layer != 2)) return;
  HookGuard guard;
  e->register_requests(static_cast<oomh::inject::Layer>(layer));
}

OOMH_EXPORT int oomh_request(int layer, unsigned long long size, int device, long long step, int phase) {
  Engine* e = engine();
  if (!e || (layer != 1 && layer != 2) || phase < 0 || phase >= static_cast<int>(oomh::kPhases.size())) return 0;
  HookGuard guard;
  return e->request(static_cast<oomh::inject::Layer>(layer), size, device, step, static_cast<oomh::Phase>(phase)) ? 1 : 0;
}

// Note [Processes outside the shim] in runner/src/exec/escapes.h: the probe asks whether the shim is active in
// its own process (1), or only forwards (0: OOMH_DISABLE, no control block); a process without the shim has no
// such symbol at all. Nothing here allocates.
OOMH_EXPORT int oomh_shim_active(void) { return engine() != nullptr ? 1 : 0; }

OOMH_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  auto real = real_fn<decltype(&cuMemGetInfo_v2)>("cuMemGetInfo_v2");
  if (!real) return missing();
  CUresult rc = real(free, total);
  Engine* e = engine();
  if (rc != CUDA_SUCCESS || !e || !free || !total) return rc;
  HookGuard guard;
  MemInfo m = e->mem_info(current_device(), *free, *total);
  *free = m.free;
  *total = m.total;
  return rc;
}

OOMH_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  auto real = real_fn<decltype(&cuDeviceTotalMem_v2)>("cuDeviceTotalMem_v2");
  if (!real) return missing();
  CUresult rc = real(bytes, dev);
  Engine* e = engine();
  if (rc != CUDA_SUCCESS || !e || !bytes) return rc;
  HookGuard guard;
  *bytes = e->total_mem(dev, *bytes);
  return rc;
}
