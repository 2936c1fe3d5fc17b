// What the shim adds to an intercepted call (Google Benchmark). Three views:
//  - the floor: only the atomic read-modify-writes that an allocation and a free must do to keep the
//    documented counts exact (Note [Counters on the hot path] in injector/engine/engine.h), on a real
//    control block, with nothing else around them;
//  - the engine's decision path, measured directly (linked, no preload): one allocation and its free through
//    begin_alloc/end_alloc/begin_free/end_free, with no rule, and with 8 rules of which none matches;
//  - the whole hook, measured through the preload: run this program under
//      LD_PRELOAD=<build>/injector/liboomharness_inject.so LD_LIBRARY_PATH=<build>/cuda_double OOMH_CAP=1TiB
//    and compare a driver call made through the hook (the exported symbol, bound to the shim) with the same
//    call made on the driver double's own function (from its table, which the shim never sees).
// bench/RESULTS.md records the figures and the command.
#include "engine/engine.h"

#include <oomharness/control_block.h>

#include <benchmark/benchmark.h>

#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <dlfcn.h>
#include <unistd.h>

using namespace oomh::inject;

namespace {

struct BenchBlock {
  BenchBlock() {
    name = "/oomh-shim-bench-" + std::to_string(getpid());
    cb = oomh::control_block_create(name.c_str());
  }
  ~BenchBlock() {
    oomh::control_block_close(cb);
    shm_unlink(name.c_str());
  }
  std::string name;
  oomh::ControlBlock* cb;
};

// 8 rules, each with a filter that the benchmark's calls never pass.
constexpr const char* kEightRules = R"({"rules":[
  {"when":{"min_size":"1TiB"}}, {"when":{"device":5}}, {"when":{"entry":"vmm"}}, {"when":{"rank":3}},
  {"when":{"step":1000}}, {"when":{"phase":"eval"}}, {"when":{"max_size":16}}, {"when":{"local_rank":2}}]})";

void engine_alloc_free(benchmark::State& state, const char* plan_json, bool with_cap) {
  BenchBlock block;
  EngineSetup setup;
  setup.block = block.cb;
  setup.log = LogLevel::quiet;
  if (plan_json) setup.plan = *parse_fault_plan(plan_json);
  if (with_cap) setup.option_caps = *parse_cap_option("1TiB");
  Engine engine(std::move(setup));
  uint64_t key = 0x7f0000000000;
  for (auto _ : state) {
    AllocDecision d = engine.begin_alloc(Entry::mem_alloc, "cuMemAlloc_v2", 0, 1 << 20);
    engine.end_alloc(d, true, Space::device_pointer, key, 1 << 20);
    auto taken = engine.begin_free(Space::device_pointer, key);
    engine.end_free(Space::device_pointer, key, taken, true);
    key += 512;
  }
  if (engine.held(0) != 0 || engine.ledger().live_count() != 0) state.SkipWithError("the ledger did not balance");
}

void engine_decision(benchmark::State& state, const char* plan_json) {
  BenchBlock block;
  EngineSetup setup;
  setup.block = block.cb;
  setup.log = LogLevel::quiet;
  if (plan_json) setup.plan = *parse_fault_plan(plan_json);
  Engine engine(std::move(setup));
  for (auto _ : state) {
    AllocDecision d = engine.begin_alloc(Entry::mem_alloc, "cuMemAlloc_v2", 0, 1 << 20);
    benchmark::DoNotOptimize(d);
    engine.end_alloc(d, false, Space::device_pointer, 0, 0);  // the driver refused: no ledger entry
  }
}

void BM_EngineAllocFree_NoRule(benchmark::State& s) { engine_alloc_free(s, nullptr, false); }
void BM_EngineAllocFree_NoRuleWithCap(benchmark::State& s) { engine_alloc_free(s, nullptr, true); }
void BM_EngineAllocFree_EightRulesNoneMatching(benchmark::State& s) { engine_alloc_free(s, kEightRules, true); }
void BM_EngineDecision_NoRule(benchmark::State& s) { engine_decision(s, nullptr); }
void BM_EngineDecision_EightRulesNoneMatching(benchmark::State& s) { engine_decision(s, kEightRules); }
BENCHMARK(BM_EngineDecision_NoRule);
BENCHMARK(BM_EngineDecision_EightRulesNoneMatching);
BENCHMARK(BM_EngineAllocFree_NoRule);
BENCHMARK(BM_EngineAllocFree_NoRuleWithCap);
BENCHMARK(BM_EngineAllocFree_EightRulesNoneMatching);

// The floor. What no implementation of the documented behaviour can skip, per call, as bare atomics:
// allocation: the job's alloc_calls (the runner samples it), the process's running call number (an inject
// event's `call`), the reservation on the job's held under the cap (one compare-and-swap: two processes
// near the cap never both get through), the process's share in its slot (the runner and an exec'd
// successor read it), and the lock of the ledger shard that records the pointer (any thread may free it);
// free: the shard lock, the job's free_calls, and the job's and the process's held.
void BM_Floor_AllocationAtomics(benchmark::State& state) {
  BenchBlock block;
  oomh::DeviceCounters& dc = block.cb->devices[0];
  std::atomic<uint64_t>& slot_held = block.cb->processes[0].held[0];
  std::atomic<uint64_t> call{0};
  SpinLock shard;
  dc.cap.store(uint64_t{1} << 40, std::memory_order_relaxed);
  for (auto _ : state) {
    dc.alloc_calls.fetch_add(1, std::memory_order_relaxed);
    benchmark::DoNotOptimize(call.fetch_add(1, std::memory_order_relaxed));
    uint64_t held = dc.held.load(std::memory_order_relaxed);
    while (!dc.held.compare_exchange_weak(held, held + 1, std::memory_order_relaxed)) {}
    slot_held.fetch_add(1, std::memory_order_relaxed);
    shard.lock();
    shard.unlock();
  }
}

void BM_Floor_FreeAtomics(benchmark::State& state) {
  BenchBlock block;
  oomh::DeviceCounters& dc = block.cb->devices[0];
  std::atomic<uint64_t>& slot_held = block.cb->processes[0].held[0];
  SpinLock shard;
  for (auto _ : state) {
    shard.lock();
    shard.unlock();
    dc.free_calls.fetch_add(1, std::memory_order_relaxed);
    dc.held.fetch_sub(1, std::memory_order_relaxed);
    slot_held.fetch_sub(1, std::memory_order_relaxed);
  }
}

// One uncontended read-modify-write, for scale.
void BM_Floor_OneAtomicAdd(benchmark::State& state) {
  BenchBlock block;
  for (auto _ : state) block.cb->devices[0].alloc_calls.fetch_add(1, std::memory_order_relaxed);
}
BENCHMARK(BM_Floor_AllocationAtomics);
BENCHMARK(BM_Floor_FreeAtomics);
BENCHMARK(BM_Floor_OneAtomicAdd);

// ---- Through the preload (skipped unless libcuda.so.1, the double, is on LD_LIBRARY_PATH).
struct DoubleProc {
  const char* base;
  int version;
  int per_thread;
  const char* name;
  void* function;
};

struct Driver {
  Driver() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return;
    auto table = reinterpret_cast<const DoubleProc* (*)(size_t*)>(dlsym(h, "oomh_cuda_double_procs"));
    if (!table) return;  // not the double: there is no unhooked function to compare with
    size_t n = 0;
    const DoubleProc* procs = table(&n);
    for (size_t i = 0; i < n; ++i) {
      if (std::strcmp(procs[i].name, "cuMemAlloc_v2") == 0) direct_alloc = reinterpret_cast<decltype(direct_alloc)>(procs[i].function);
      if (std::strcmp(procs[i].name, "cuMemFree_v2") == 0) direct_free = reinterpret_cast<decltype(direct_free)>(procs[i].function);
      if (std::strcmp(procs[i].name, "cuMemGetInfo_v2") == 0) direct_info = reinterpret_cast<decltype(direct_info)>(procs[i].function);
    }
    hooked_alloc = reinterpret_cast<decltype(hooked_alloc)>(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
    hooked_free = reinterpret_cast<decltype(hooked_free)>(dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
    hooked_info = reinterpret_cast<decltype(hooked_info)>(dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2"));
    auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(h, "cuInit"));
    auto retain = reinterpret_cast<decltype(&cuDevicePrimaryCtxRetain)>(dlsym(h, "cuDevicePrimaryCtxRetain"));
    auto set_current = reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(h, "cuCtxSetCurrent"));
    CUcontext ctx = nullptr;
    ready = direct_alloc && direct_free && direct_info && hooked_alloc && hooked_free && hooked_info && init &&
            init(0) == CUDA_SUCCESS && retain(&ctx, 0) == CUDA_SUCCESS && set_current(ctx) == CUDA_SUCCESS;
    Dl_info info{};
    shim = ready && dladdr(reinterpret_cast<void*>(hooked_alloc), &info) && info.dli_fname &&
           std::strstr(info.dli_fname, "liboomharness_inject");
  }
  bool ready = false, shim = false;
  CUresult (*direct_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*direct_free)(CUdeviceptr) = nullptr;
  CUresult (*direct_info)(size_t*, size_t*) = nullptr;
  CUresult (*hooked_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*hooked_free)(CUdeviceptr) = nullptr;
  CUresult (*hooked_info)(size_t*, size_t*) = nullptr;
};

Driver& driver() {
  static Driver d;
  return d;
}

bool driver_ready(benchmark::State& state, bool need_shim) {
  if (!driver().ready) {
    state.SkipWithError("run with LD_LIBRARY_PATH=<build>/cuda_double to measure driver calls");
    return false;
  }
  if (need_shim && !driver().shim) {
    state.SkipWithError("run under LD_PRELOAD=liboomharness_inject.so with an OOMH_ variable set");
    return false;
  }
  return true;
}

void alloc_free(benchmark::State& state, bool hooked) {
  if (!driver_ready(state, hooked)) return;
  auto alloc = hooked ? driver().hooked_alloc : driver().direct_alloc;
  auto release = hooked ? driver().hooked_free : driver().direct_free;
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (alloc(&p, 1 << 20) != CUDA_SUCCESS || release(p) != CUDA_SUCCESS) {
      state.SkipWithError("the driver double refused");
      break;
    }
  }
}

void mem_get_info(benchmark::State& state, bool hooked) {
  if (!driver_ready(state, hooked)) return;
  auto info = hooked ? driver().hooked_info : driver().direct_info;
  size_t free_bytes = 0, total = 0;
  for (auto _ : state) {
    info(&free_bytes, &total);
    benchmark::DoNotOptimize(free_bytes);
  }
}

// The figure the target names: what the shim adds to one allocation call and to one free call, hooked minus
// direct. The double's own call is an mmap or munmap (hundreds of ns, and noisy on a shared machine), so
// two separate benchmarks would differ by more noise than the figure itself. Each iteration therefore runs
// the same batch of kBatch allocations and then their frees both ways, direct and hooked, in alternating
// order, and times each half with the thread's CPU clock (time spent descheduled does not count). The
// counters are CPU ns per call: direct, hooked, and the difference.
constexpr int kBatch = 256;

// While it lives, the shim's control block carries a plan of 8 rules that never match (the runner's way of
// changing a plan at run time), so the hooked calls go through the rule book. Publishing an empty plan
// afterwards puts back "no rule" (the option cap, OOMH_CAP, stays: it comes from the environment).
struct EightRulesPublished {
  explicit EightRulesPublished(benchmark::State& state) {
    const char* name = std::getenv("OOMH_CONTROL");
    cb = name ? oomh::control_block_open(name) : nullptr;
    if (!cb) {
      state.SkipWithError("OOMH_CONTROL names no control block (run under the preload with an OOMH_ variable set)");
      return;
    }
    oomh::control_block_publish_plan(cb, kEightRules, static_cast<uint32_t>(std::strlen(kEightRules)));
  }
  ~EightRulesPublished() {
    if (!cb) return;
    static const char kEmpty[] = R"({"rules":[]})";
    oomh::control_block_publish_plan(cb, kEmpty, sizeof kEmpty - 1);
    oomh::control_block_close(cb);
  }
  oomh::ControlBlock* cb = nullptr;
};

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct BatchTimes {
  uint64_t alloc_ns = 0, free_ns = 0;
};

// kBatch allocations, then their frees, through one pair of functions. Returns false when the double refused.
bool run_batch(CUresult (*alloc)(CUdeviceptr*, size_t), CUresult (*release)(CUdeviceptr), BatchTimes& t) {
  CUdeviceptr p[kBatch] = {};
  bool ok = true;
  uint64_t t0 = thread_cpu_ns();
  for (auto& q : p) ok &= alloc(&q, 1 << 20) == CUDA_SUCCESS;
  uint64_t t1 = thread_cpu_ns();
  for (auto q : p) ok &= release(q) == CUDA_SUCCESS;
  uint64_t t2 = thread_cpu_ns();
  t.alloc_ns += t1 - t0;
  t.free_ns += t2 - t1;
  return ok;
}

void added_per_call(benchmark::State& state) {
  if (!driver_ready(state, true)) return;
  const Driver& d = driver();
  BatchTimes direct, hooked;
  bool hooked_first = false;
  for (auto _ : state) {
    bool ok = hooked_first ? run_batch(d.hooked_alloc, d.hooked_free, hooked) && run_batch(d.direct_alloc, d.direct_free, direct)
                           : run_batch(d.direct_alloc, d.direct_free, direct) && run_batch(d.hooked_alloc, d.hooked_free, hooked);
    if (!ok) {
      state.SkipWithError("the driver double refused");
      break;
    }
    hooked_first = !hooked_first;
  }
  double calls = static_cast<double>(state.iterations()) * kBatch;
  auto per_call = [&](uint64_t ns) { return benchmark::Counter(static_cast<double>(ns) / calls); };
  state.counters["alloc_direct_ns"] = per_call(direct.alloc_ns);
  state.counters["alloc_hooked_ns"] = per_call(hooked.alloc_ns);
  state.counters["alloc_added_ns"] = benchmark::Counter((static_cast<double>(hooked.alloc_ns) - static_cast<double>(direct.alloc_ns)) / calls);
  state.counters["free_direct_ns"] = per_call(direct.free_ns);
  state.counters["free_hooked_ns"] = per_call(hooked.free_ns);
  state.counters["free_added_ns"] = benchmark::Counter((static_cast<double>(hooked.free_ns) - static_cast<double>(direct.free_ns)) / calls);
}

void BM_Driver_AddedPerCall_NoRule(benchmark::State& s) { added_per_call(s); }
void BM_Driver_AddedPerCall_EightRulesNoneMatching(benchmark::State& s) {
  if (!driver_ready(s, true)) return;
  EightRulesPublished plan(s);
  if (plan.cb) added_per_call(s);
}
BENCHMARK(BM_Driver_AddedPerCall_NoRule);
BENCHMARK(BM_Driver_AddedPerCall_EightRulesNoneMatching);

void BM_Driver_AllocFree_Direct(benchmark::State& s) { alloc_free(s, false); }
void BM_Driver_AllocFree_Hooked(benchmark::State& s) { alloc_free(s, true); }
void BM_Driver_MemGetInfo_Direct(benchmark::State& s) { mem_get_info(s, false); }
void BM_Driver_MemGetInfo_Hooked(benchmark::State& s) { mem_get_info(s, true); }
BENCHMARK(BM_Driver_AllocFree_Direct);
BENCHMARK(BM_Driver_AllocFree_Hooked);
BENCHMARK(BM_Driver_MemGetInfo_Direct);
BENCHMARK(BM_Driver_MemGetInfo_Hooked);

}  // namespace

BENCHMARK_MAIN();
