#pragma once
// The fault plan (docs/fault-plan.md is the contract with the runner): which allocations to fail, for how
// long, and which memory caps to apply. Parsing turns the JSON into plain values; deciding what a call does
// lives in rule_book.h (rules) and caps.h (caps). Parsing never throws: it returns the plan or one error
// message that names the field ("rules[0].when: unknown key 'stpe'"; Note [A plan's error is a line]).

#include <oomharness/control_block.h>
#include <oomharness/request_layer.h>
#include <oomharness/expected.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oomh::inject {

// The allocation entry points by base name (docs/fault-plan.md, `entry`). The versioned and per-thread
// variants (cuMemAlloc_v2, cuMemAllocAsync_ptsz) count as their base name.
// (Not the driver's names: cuda.h defines cuMemAlloc and friends as macros.)
// The last three allocate pinned host memory (Note [Host memory]); cuMemCreate allocates either kind.
enum class Entry : uint8_t {
  mem_alloc, mem_alloc_pitch, mem_alloc_managed, mem_alloc_async, mem_alloc_from_pool_async, mem_create,
  mem_host_alloc, mem_alloc_host, mem_host_register
};
inline constexpr int kEntryCount = 9;
using EntryMask = uint32_t;
constexpr EntryMask entry_bit(Entry e) { return EntryMask{1} << static_cast<unsigned>(e); }
inline constexpr EntryMask kAllEntries = (EntryMask{1} << kEntryCount) - 1;
const char* entry_name(Entry e);

// Note [Host memory]
// Pinned host memory (cudaHostAlloc, `pin_memory=True` DataLoaders, cudaHostRegister) runs out too, and
// NVIDIA's own fault injectors and spark-rapids' CI inject it; a job that pins its batches should survive a
// refused pin (fall back to pageable memory) as much as a refused device allocation. The shim intercepts
// the driver's entry points for it: cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister, and cuMemCreate with
// a host location; and their frees, cuMemFreeHost, cuMemHostUnregister, cuMemRelease.
// A rule or a cap names which memory it targets with `memory: host` or `memory: device` (the default, so
// that every plan written before keeps its meaning: a device rule never fails a pin, and a host rule never a
// device allocation). Host memory is not a device's: it is not booked on any device's counters, shown by
// memory queries or counted by the runner's samples; a host cap is a limit on the bytes *this process* has
// pinned through the shim (the control block has no host counters), refused with CUDA_ERROR_OUT_OF_MEMORY
// as the driver does when the pinned limit is reached. Each refusal is an `inject` event with
// `memory: "host"` and `device: -1`.
enum class MemoryKind : uint8_t { device, host };
const char* memory_kind_name(MemoryKind m);
// The entry points that can allocate each kind (cuMemCreate can allocate either).
inline constexpr EntryMask kDeviceEntries = entry_bit(Entry::mem_alloc) | entry_bit(Entry::mem_alloc_pitch) |
                                            entry_bit(Entry::mem_alloc_managed) | entry_bit(Entry::mem_alloc_async) |
                                            entry_bit(Entry::mem_alloc_from_pool_async) | entry_bit(Entry::mem_create);
inline constexpr EntryMask kHostEntries = entry_bit(Entry::mem_host_alloc) | entry_bit(Entry::mem_alloc_host) |
                                          entry_bit(Entry::mem_host_register) | entry_bit(Entry::mem_create);
constexpr EntryMask entries_of(MemoryKind m) { return m == MemoryKind::host ? kHostEntries : kDeviceEntries; }

// Note [Where a step fault fires]
// A caching allocator serves a training loop's steady state from its cache: a step may ask the driver for
// nothing, and whether step 3 asks at all varies from run to run (issue 40: a `step: 3` fault was
// "inconclusive, no fault was injected" in 4 runs of 6). Flushing the cache before a faulted step (Note
// [Flushing before a faulted step] in python/oomharness/probe/steps.py) does not help once segments hold
// live blocks beside the freed ones. So a rule aimed at a step is asked where the step's allocations are
// made, not where the driver is reached: at a *request layer* the job registers with the shim
// (oomh_register_requests, then oomh_request for each request; injector/preload/hooks.cpp):
//  - `allocator`: the virtual device's caching-allocator model asks for every tensor request, with its size,
//    before it looks in its cache (python/oomharness/virtual_device/allocator.py). A refusal is taken as
//    PyTorch's allocator takes a refused segment: it frees its cache and asks once more, and raises
//    OutOfMemoryError when that is refused too; so `times: 1` is absorbed and `times: 2` reaches the code,
//    as on the driver, but in the targeted step every time.
//  - `probe`: on a GPU, where no Python sees PyTorch's allocations, the probe asks at the points of a step
//    it sees begin (a model's top-level forward, backward, the optimizer's step), with no size, and raises
//    PyTorch's OutOfMemoryError where it is refused twice (python/oomharness/probe/faults.py).
// A rule goes to the registered layer when it has a step window, no count (nth, every, probability: those count
// one layer's calls, and a sweep's `step=N,nth=K` names a driver call), names no driver entry point and targets
// device memory, and (at the probe layer, which knows no sizes and has points in the training work only) has
// no size filter and no phase but forward, backward or optimizer; every other rule, and every rule of a
// process that registered no layer (a C++ program, a job without the probe), stays at the driver. A rule is
// asked at one layer only, so one request never counts twice. At a request layer a step window without a
// phase means the step's training work, not the copy of its batch before it (`phase: data` asks for that):
// what a user aiming a fault at step N wants to see recover is step N's forward, backward and optimizer step,
// and an OOM in the batch's copy, outside most retry loops, is what `phase: data` tests. The request also
// carries its process's own step and phase (the probe's), not the control block's, which the ranks of a job
// that starts torchrun itself share. The inject event says at which layer it fired (`layer`), and so do the
// reports.
using oomh::Layer;  // include/oomharness/request_layer.h
const char* layer_name(Layer l);
struct RuleWhen;
// Whether the rule is asked at `registered` (the process's request layer; driver: none registered).
bool at_request_layer(const RuleWhen& w, Layer registered) noexcept;
// The phases of a step's training work: forward, backward, the optimizer (the probe's points on a GPU).
constexpr bool training_work(Phase p) { return p == Phase::forward || p == Phase::backward || p == Phase::optimizer; }

enum class Trigger : uint8_t { first, nth, every, probability };
enum class Duration : uint8_t { times, until_freed, forever };

// What a call must look like for a rule to match: the target (entry, size, device, rank) and the window
// (step, steps, phase, after).
struct RuleWhen {
  EntryMask entries = kAllEntries;
  uint64_t min_size = 0;
  uint64_t max_size = UINT64_MAX;
  int device = -1;      // -1: any
  int rank = -1;        // -1: any
  int local_rank = -1;  // -1: any
  bool has_steps = false;         // `step` or `steps`
  int64_t steps_from = INT64_MIN;
  int64_t steps_to = INT64_MAX;
  bool has_phase = false;
  Phase phase = Phase::none;
  double after_s = 0;             // 0: no time filter
  Trigger trigger = Trigger::first;
  uint64_t n = 1;                 // nth / every
  double probability = 0;
  uint64_t repeat = 1;            // 0: unlimited
  MemoryKind memory = MemoryKind::device;  // Note [Host memory]
};

struct RuleFail {
  Duration kind = Duration::times;
  uint64_t times = 1;
  uint64_t until_freed = 0;
};

struct Rule {
  std::string name;
  RuleWhen when;
  RuleFail fail;
};

struct CapEntry {
  enum class At : uint8_t { start, step, after };
  int device = -1;  // -1: every device
  uint64_t limit = 0;
  At at = At::start;
  int64_t at_step = 0;
  double at_after_s = 0;
  MemoryKind memory = MemoryKind::device;  // host: this process's pinned host memory (Note [Host memory])
};

// What a cap counts (docs/fault-plan.md, `cap_counts`; Note [Counting the footprint] in engine.h):
// the bytes the job allocates through the driver, or the whole device footprint of its processes.
enum class CapCounting : uint8_t { allocations, footprint };
const char* cap_counting_name(CapCounting c);
// Parses "allocations" or "footprint".
std::optional<CapCounting> parse_cap_counting(std::string_view text);

// Note [One rule schema]
// This file is the only place that knows what a fault rule, a cap and a plan may say: the shim parses
// OOMH_PLAN with it, and the runner links it to check a suite's `faults:` and `memory:` and the
// `--fault` text before anything runs (runner/src/suite/fault_rule.cpp), so `oomharness validate` accepts
// exactly what the shim accepts. The front ends only translate their syntax (YAML, key=value items) into
// the plan's JSON; the keys below are what they offer as suggestions.
inline constexpr const char* kRuleKeys[] = {"name", "when", "fail"};
inline constexpr const char* kWhenKeys[] = {"memory", "entry", "min_size", "max_size", "device", "rank", "local_rank", "step",
                                            "steps", "phase", "after", "nth", "every", "probability", "repeat"};
inline constexpr const char* kStepsKeys[] = {"from", "to"};
inline constexpr const char* kFailKeys[] = {"times", "until_freed", "forever"};
// What `entry` may name: an entry point, or a group of them.
inline constexpr const char* kEntryChoices[] = {"cuMemAlloc", "cuMemAllocPitch", "cuMemAllocManaged", "cuMemAllocAsync",
                                                "cuMemAllocFromPoolAsync", "cuMemCreate", "cuMemHostAlloc",
                                                "cuMemAllocHost", "cuMemHostRegister", "alloc", "sync", "async",
                                                "vmm", "managed", "host"};
// What `memory` may name (Note [Host memory]).
inline constexpr const char* kMemoryChoices[] = {"device", "host"};

struct FaultPlan {
  uint64_t seed = 0;
  std::vector<Rule> rules;
  std::vector<CapEntry> caps;
  std::optional<CapCounting> cap_counts;  // unset: OOMH_CAP_COUNTS, else allocations
};

// Note [A plan's error is a line]
// A plan's error is one line of text (Expected<T, std::string>, Note [One result type]), not an Error with a
// path: its readers (the shim's OOMH_PLAN and control-block warnings, the runner's check of a job's whole
// plan) print it as it is and never point at a field, and OOMH_PLAN's file puts its own name first, which
// is no field of the plan. A front end that needs the field checks one rule at a time, with check_rule.

// Parses the plan's JSON text. The error names the field: "rules[0].when: unknown key 'stpe'".
Expected<FaultPlan, std::string> parse_fault_plan(std::string_view json) noexcept;

// Reads OOMH_PLAN's value: the JSON text itself (it starts with '{') or the path of a file holding it.
// A file's errors are prefixed with its path: "/tmp/plan.json: rules[0]: ...".
Expected<FaultPlan, std::string> load_fault_plan(const char* value) noexcept;

// One rule (the JSON of one item of `rules`), checked as the shim checks it. On success the rule's JSON text
// as the shim will read it (sizes in bytes, times in seconds, every default explicit where it matters);
// else an Error whose path is relative to the rule ({"when", "steps"}; Note [One result type]) and whose
// message has no path in it: "'from' is after 'to'". An unknown key is Error::Kind::unknown_key, its path
// ending at the key.
Expected<std::string> check_rule(std::string_view rule_json) noexcept;

// The plan as JSON text that parse_fault_plan reads back to the same plan.
std::string fault_plan_json(const FaultPlan& plan);

// Parses OOMH_CAP: "8GiB" (every device) or "0=8GiB,1=4GiB". The error has no path (the text is one
// variable's value): "bad device 'x' in 'x=8GiB' (write DEVICE=SIZE with DEVICE from 0 to 15)".
Expected<std::vector<CapEntry>> parse_cap_option(std::string_view text) noexcept;

}  // namespace oomh::inject
