#include "engine.h"

#include <oomharness/event_seal.h>
#include <oomharness/process_ids.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <new>

#include <sys/syscall.h>
#include <unistd.h>

namespace oomh::inject {

namespace {

// Note [The site of a recorded call] in engine.h.
thread_local char t_site[160] __attribute__((tls_model("initial-exec"))) = {};

bool valid_device(int d) { return d >= 0 && d < kMaxDevices; }

// A slot's pid is as /proc names it (Note [Pids the runner can see]), which kill() from inside the job's
// namespace would not find: /proc is asked.
bool process_alive(int32_t pid) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d", static_cast<int>(pid));
  return ::access(path, F_OK) == 0;
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void raise_to(std::atomic<uint32_t>& value, uint32_t at_least) {
  uint32_t seen = value.load(std::memory_order_relaxed);
  while (seen < at_least && !value.compare_exchange_weak(seen, at_least, std::memory_order_relaxed)) {}
}

void sub_saturating(std::atomic<uint64_t>& value, uint64_t n) {
  uint64_t before = value.fetch_sub(n, std::memory_order_relaxed);
  if (before < n) value.fetch_add(n - before, std::memory_order_relaxed);
}

}  // namespace

Engine::Engine(EngineSetup setup)
    : cb_(setup.block),
      events_fd_(setup.events_fd),
      log_level_(setup.log),
      log_fd_(setup.log_fd),
      rank_(setup.rank),
      local_rank_(setup.local_rank),
      option_caps_(std::move(setup.option_caps)),
      record_from_(setup.record_from),
      record_to_(setup.record_to),
      plan_updates_(setup.plan_updates),
      plan_error_(std::move(setup.plan_error)),
      option_counting_(setup.cap_counts),
      footprint_probe_(setup.footprint_probe),
      process_start_ns_(monotonic_ns()) {
  std::memcpy(seal_key_, cb_->seal_key, sizeof seal_key_);  // Note [Sealed event lines] in event_seal.h
  register_process(setup.process_flags, setup.parent_pid);
  Plan* plan = make_plan(setup.plan ? std::move(*setup.plan) : FaultPlan{});
  if (!plan) plan = make_plan(FaultPlan{});
  install(plan, nullptr);
  write_start_event();
}

Engine::~Engine() {
  delete plan_.load(std::memory_order_relaxed);
  while (retired_) {
    Plan* next = retired_->retired_next;
    delete retired_;
    retired_ = next;
  }
}

Engine::Plan* Engine::make_plan(FaultPlan source) noexcept {
  try {
    std::vector<CapEntry> caps = option_caps_;
    caps.insert(caps.end(), source.caps.begin(), source.caps.end());
    auto* p = new Plan{std::move(source), RuleBook{}, CapSchedule(std::move(caps)), nullptr};
    p->rules = RuleBook(p->source.rules, p->source.seed);
    return p;
  } catch (...) {
    return nullptr;
  }
}

// Swaps in a plan and brings the caps in line with it. `reason` nullptr: at start-up (each cap_change then
// says how its entry applied: start, step or time).
void Engine::install(Plan* plan, const char* reason) noexcept {
  Plan* old = plan_.exchange(plan, std::memory_order_acq_rel);
  int64_t step = cb_->step.load(std::memory_order_relaxed);
  for (int d = 0; d < kMaxDevices; ++d) {
    if (plan->caps.covers(d)) apply_cap(*plan, d, step, reason);
    else if (old && old->caps.covers(d)) set_cap(d, 0, reason ? reason : "plan");
  }
  if (old) {
    old->retired_next = retired_;
    retired_ = old;
  }
  bool footprint = plan->source.cap_counts.value_or(option_counting_) == CapCounting::footprint;
  if (footprint && !footprint_probe_) {
    report_warning("cap_counts footprint: this shim has no way to measure the device footprint; caps count allocations only");
    footprint = false;
  }
  if (footprint_on_.exchange(footprint, std::memory_order_relaxed) && !footprint) {
    for (int d = 0; d < kMaxDevices; ++d) set_footprint_overhead(d, 0);  // back to counting allocations
  }
}

CapCounting Engine::cap_counting() const noexcept {
  return footprint_on_.load(std::memory_order_relaxed) ? CapCounting::footprint : CapCounting::allocations;
}

uint64_t Engine::footprint_overhead(int device) const noexcept {
  return valid_device(device) ? footprint_[device].overhead.load(std::memory_order_relaxed) : 0;
}

// Books `bytes` as this process's overhead on `device` (Note [Counting the footprint]): the difference from
// what was booked goes onto the job's and the slot's held, never refused.
void Engine::set_footprint_overhead(int device, uint64_t bytes) noexcept {
  uint64_t old = footprint_[device].overhead.exchange(bytes, std::memory_order_relaxed);
  DeviceCounters& dc = cb_->devices[device];
  if (bytes > old) {
    uint64_t add = bytes - old;
    raise_peak(dc.peak, dc.held.fetch_add(add, std::memory_order_relaxed) + add);
    hold(device, add);
    note_device(device);
  } else if (old > bytes) {
    release_bytes(dc, old - bytes);
    unhold(device, old - bytes);
  }
}

void Engine::refresh_footprint(int device, uint64_t max_age_ns) noexcept {
  if (!footprint_on_.load(std::memory_order_relaxed) || !valid_device(device)) return;
  DeviceFootprint& f = footprint_[device];
  uint64_t now = monotonic_ns();
  uint64_t last = f.measured_ns.load(std::memory_order_relaxed);
  if (max_age_ns != 0 && last != 0 && now - last < max_age_ns) return;
  if (!f.lock.try_lock()) return;  // another thread is measuring; this call uses the figure booked now
  uint64_t booked = f.overhead.load(std::memory_order_relaxed);
  uint64_t before = slot_->held[device].load(std::memory_order_relaxed);
  uint64_t footprint = 0;
  bool measured = footprint_probe_(device, &footprint);
  uint64_t after = slot_->held[device].load(std::memory_order_relaxed);
  f.measured_ns.store(now, std::memory_order_relaxed);  // a failed probe is not retried at once either
  if (!measured) {
    f.lock.unlock();
    if (!footprint_failed_.exchange(true, std::memory_order_relaxed))
      report_warning("cap_counts footprint: cannot measure this process's device footprint (NVML does not list "
                     "it, or cannot be loaded); its caps count allocations only");
    return;
  }
  uint64_t allocated = std::max(before, after);
  allocated = allocated > booked ? allocated - booked : 0;
  uint64_t overhead = footprint > allocated ? footprint - allocated : 0;
  set_footprint_overhead(device, overhead);
  f.lock.unlock();
  if (last == 0) {
    events::EventLine line(events::kSrcShim, events::kFootprint);
    line.add("device", device).add("footprint", footprint).add("overhead", overhead);
    emit(line);
    log(LogLevel::info, "device %d: footprint %llu bytes, of which %llu not from allocations (counted against the cap)",
        device, static_cast<unsigned long long>(footprint), static_cast<unsigned long long>(overhead));
  }
}

size_t Engine::rule_count() const noexcept { return plan_.load(std::memory_order_acquire)->rules.size(); }

void Engine::register_process(uint32_t flags, int parent_pid) noexcept {
  // The runner checks the slot's pid from its own namespace: Note [Pids the runner can see].
  int32_t pid = process_ids().pid;
  slot_ = nullptr;
  // exec() without fork keeps the pid: the slot of the image this one replaced is ours, and what that image
  // held died with its address space.
  if ((flags & kProcessExecd) && parent_pid == pid) {
    for (auto& s : cb_->processes) {
      if (s.pid.load(std::memory_order_relaxed) != pid) continue;
      for (int d = 0; d < kMaxDevices; ++d) {
        uint64_t held = s.held[d].exchange(0, std::memory_order_relaxed);
        if (held) release_bytes(cb_->devices[d], held);
      }
      slot_ = &s;
      parent_pid = s.parent_pid.load(std::memory_order_relaxed);  // who forked it, not itself
      break;
    }
  }
  for (auto& s : cb_->processes) {
    if (slot_) break;
    int32_t expected = 0;
    if (s.pid.compare_exchange_strong(expected, pid, std::memory_order_acq_rel)) { slot_ = &s; break; }
  }
  // Every slot taken: reuse one whose process is gone and gave its bytes back (a long job forks many
  // short-lived workers).
  for (int i = 0; !slot_ && i < kMaxProcesses; ++i) {
    ProcessSlot& s = cb_->processes[i];
    int32_t owner = s.pid.load(std::memory_order_relaxed);
    if (owner == pid || owner <= 0 || process_alive(owner)) continue;
    bool empty = true;
    for (auto& h : s.held) empty = empty && h.load(std::memory_order_relaxed) == 0;
    if (empty && s.pid.compare_exchange_strong(owner, pid, std::memory_order_acq_rel)) slot_ = &s;
  }
  if (!slot_) {
    slot_ = &local_slot_;
    slot_->pid.store(pid, std::memory_order_relaxed);
    warn("every process slot of the control block is taken; this process's bytes count for the job but the "
         "runner cannot see them per process");
  }
  for (auto& h : slot_->held) h.store(0, std::memory_order_relaxed);
  slot_->parent_pid.store(parent_pid, std::memory_order_relaxed);
  slot_->flags.store(flags, std::memory_order_relaxed);
  cb_->process_count.fetch_add(1, std::memory_order_relaxed);
}

void Engine::write_start_event() noexcept {
  const bool rejected = !plan_error_.empty();
  (rejected ? cb_->plans_rejected : cb_->shims_armed).fetch_add(1, std::memory_order_relaxed);
  uint32_t flags = slot_->flags.load(std::memory_order_relaxed);
  events::EventLine line(events::kSrcShim, events::kShimStart);
  line.add("ppid", static_cast<int>(getppid()))
      .add("exec", (flags & kProcessExecd) != 0)
      .add("forked", (flags & kProcessForked) != 0)
      .add("rules", static_cast<uint64_t>(rule_count()))
      .add("cap", limit_[0].load(std::memory_order_relaxed))
      .add("plan", rejected ? "rejected" : "accepted");
  if (rejected) line.add("plan_error", plan_error_.c_str());
  emit(line);
  log(LogLevel::info, "active in pid %d: %zu rule(s), cap on device 0: %llu bytes", static_cast<int>(getpid()),
      rule_count(), static_cast<unsigned long long>(limit_[0].load(std::memory_order_relaxed)));
}

void Engine::note_way_in(uint32_t way) noexcept {
  if ((ways_.load(std::memory_order_relaxed) & way) == way) return;
  ways_.fetch_or(way, std::memory_order_relaxed);
  cb_->ways_in.fetch_or(way, std::memory_order_relaxed);
}

void Engine::record_first_driver_call(const char* symbol) noexcept {
  if (driver_called_.exchange(true, std::memory_order_relaxed)) return;
  // No lookup handed out a hook before this call: the program reached the exported symbol.
  if (ways_.load(std::memory_order_relaxed) == 0) note_way_in(kWayExport);
  uint64_t none = 0;
  cb_->first_driver_call_ns.compare_exchange_strong(none, realtime_ns(), std::memory_order_relaxed);
  uint32_t ways = ways_.load(std::memory_order_relaxed);
  events::EventLine line(events::kSrcShim, events::kDriverCall);
  line.add("entry", symbol ? symbol : "?")
      .add("export", (ways & kWayExport) != 0)
      .add("dlsym", (ways & kWayDlsym) != 0)
      .add("proc_address", (ways & kWayProcAddress) != 0);
  emit(line);
}

void Engine::note_device(int device) noexcept {
  uint32_t bit = 1u << device;
  if (used_devices_.load(std::memory_order_relaxed) & bit) return;
  used_devices_.fetch_or(bit, std::memory_order_relaxed);
  raise_to(cb_->device_count, static_cast<uint32_t>(device + 1));
}

double Engine::process_elapsed() const noexcept {
  return static_cast<double>(monotonic_ns() - process_start_ns_) * 1e-9;
}

double Engine::job_elapsed() const noexcept {
  uint64_t now = realtime_ns();
  return now > cb_->start_ns ? static_cast<double>(now - cb_->start_ns) * 1e-9 : 0.0;
}

void Engine::poll_plan() noexcept {
  uint32_t g = cb_->plan_generation.load(std::memory_order_relaxed);
  if (g == seen_generation_.load(std::memory_order_relaxed)) return;
  if (!plan_updates_) return refuse_plan(g);  // Note [A plan only the runner writes]
  if (g & 1u) return;
  if (!plan_lock_.try_lock()) return;  // another thread is on it; this call goes on with the current plan
  uint32_t size = 0;
  uint32_t got = control_block_read_plan(cb_, plan_buffer_, size);
  if (got != 0) {
    seen_generation_.store(got, std::memory_order_relaxed);
    Expected<FaultPlan, std::string> parsed = parse_fault_plan(std::string_view(plan_buffer_, size));
    Plan* plan = parsed ? make_plan(std::move(*parsed)) : nullptr;
    if (plan) {
      install(plan, "plan");
      events::EventLine line(events::kSrcShim, events::kPlanChange);
      line.add("generation", got).add("rules", static_cast<uint64_t>(plan->rules.size()));
      emit(line);
      log(LogLevel::info, "new plan from the control block (generation %u): %zu rule(s)", got, plan->rules.size());
    } else {
      char message[1200];
      std::snprintf(message, sizeof message, "OOMH_CONTROL: the plan of generation %u is not usable (%s); keeping the previous plan",
                    got, parsed ? "out of memory" : parsed.error().c_str());
      report_warning(message);
    }
  }
  plan_lock_.unlock();
}

void Engine::refuse_plan(uint32_t generation) noexcept {
  if (!plan_lock_.try_lock()) return;  // another thread is on it
  if (seen_generation_.exchange(generation, std::memory_order_relaxed) != generation) {
    cb_->tampered.fetch_add(1, std::memory_order_relaxed);
    events::EventLine line(events::kSrcShim, events::kTamper);
    line.add("what", "plan").add("generation", generation);
    char message[256];
    std::snprintf(message, sizeof message,
                  "the job wrote a fault plan into its control block (generation %u): only the runner may change a "
                  "running job's plan, and the shim kept the one it was given",
                  generation);
    report_tamper(line, message);
  }
  plan_lock_.unlock();
}

void Engine::restore_cap(int device, uint64_t limit, uint64_t found) noexcept {
  // Only the process whose swap lands reports it: every process of the job finds the same change.
  if (!cb_->devices[device].cap.compare_exchange_strong(found, limit, std::memory_order_relaxed)) return;
  cb_->tampered.fetch_add(1, std::memory_order_relaxed);
  events::EventLine line(events::kSrcShim, events::kTamper);
  line.add("what", "cap").add("device", device).add("cap", limit).add("found", found);
  char message[256];
  std::snprintf(message, sizeof message,
                "the control block's cap for device %d was %llu bytes, not the %llu bytes the shim was given: the job "
                "wrote it (or gave one of its processes another plan); the shim enforces its own, and put it back",
                device, static_cast<unsigned long long>(found), static_cast<unsigned long long>(limit));
  report_tamper(line, message);
}

void Engine::report_tamper(events::EventLine& line, const char* message) noexcept {
  if (tamper_events_.fetch_add(1, std::memory_order_relaxed) >= kTamperEventLimit) return;
  line.add("message", message);
  emit(line);
  log(LogLevel::warn, "%s", message);
}

void Engine::set_cap(int device, uint64_t limit, const char* reason) noexcept {
  limit_[device].store(limit, std::memory_order_relaxed);  // Note [A plan only the runner writes]
  std::atomic<uint64_t>& cap = cb_->devices[device].cap;
  uint64_t old = cap.load(std::memory_order_relaxed);
  while (old != limit) {
    // Every process of the job applies the same schedule; the one whose swap lands reports it.
    if (cap.compare_exchange_weak(old, limit, std::memory_order_relaxed)) {
      events::EventLine line(events::kSrcShim, events::kCapChange);
      line.add("device", device).add("from", old).add("to", limit).add("reason", reason);
      emit(line);
      log(LogLevel::info, "cap on device %d: %llu -> %llu bytes (%s)", device, static_cast<unsigned long long>(old),
          static_cast<unsigned long long>(limit), reason);
      return;
    }
  }
}

void Engine::apply_cap(Plan& plan, int device, int64_t step, const char* reason) noexcept {
  const char* why = "start";
  double elapsed = plan.caps.needs_time() ? job_elapsed() : 0.0;
  uint64_t limit = plan.caps.limit_for(device, step, elapsed, &why);
  if (limit_[device].load(std::memory_order_relaxed) != limit || cb_->devices[device].cap.load(std::memory_order_relaxed) != limit)
    set_cap(device, limit, reason ? reason : why);
}

uint64_t Engine::cap_limit(int device) const noexcept {
  return valid_device(device) ? limit_[device].load(std::memory_order_relaxed) : 0;
}

AllocDecision Engine::begin_alloc(Entry entry, const char* symbol, int device, uint64_t size) noexcept {
  AllocDecision d;
  note_driver_call(symbol);
  if (!valid_device(device) || finished_.load(std::memory_order_relaxed)) return d;
  d.tracked = true;
  d.device = device;
  // `call` in inject events: this process's Nth intercepted allocation on the device.
  uint64_t call = alloc_calls_[device].fetch_add(1, std::memory_order_relaxed) + 1;
  DeviceCounters& dc = cb_->devices[device];
  dc.alloc_calls.fetch_add(1, std::memory_order_relaxed);
  note_device(device);
  poll_plan();

  Plan& plan = *plan_.load(std::memory_order_acquire);
  int64_t step = cb_->step.load(std::memory_order_relaxed);
  auto phase = static_cast<Phase>(cb_->phase.load(std::memory_order_relaxed));
  if (plan.caps.changes()) apply_cap(plan, device, step, nullptr);
  const uint64_t limit = limit_[device].load(std::memory_order_relaxed);
  // Note [A plan only the runner writes]: a fixed cap in a runner's block is this process's to keep.
  if (!plan_updates_ && !plan.caps.changes() && plan_error_.empty()) {
    const uint64_t found = dc.cap.load(std::memory_order_relaxed);
    if (found != limit) restore_cap(device, limit, found);
  }
  if (record_from_ >= 0 && step >= record_from_ && step <= record_to_) report_alloc(symbol, size, device, step, phase, call);

  if (plan.rules.size() != 0) {
    int rule = plan.rules.decide(call_facts(plan, MemoryKind::device, entry, size, device, step, phase));
    if (rule >= 0) {
      dc.failures_injected.fetch_add(1, std::memory_order_relaxed);
      failures_[device].fetch_add(1, std::memory_order_relaxed);
      report_inject(symbol, size, device, plan.rules.rule(static_cast<size_t>(rule)).name.c_str(), "rule", step, phase, call);
      d.fail = true;
      return d;
    }
  }

  bool footprint = footprint_on_.load(std::memory_order_relaxed);
  if (footprint) refresh_footprint(device, kFootprintMaxAge);
  bool reserved = reserve_bytes(dc, size, limit, &d.job_held);
  if (!reserved && footprint) {  // a refusal for the cap is decided on a fresh footprint
    refresh_footprint(device, 0);
    reserved = reserve_bytes(dc, size, limit, &d.job_held);
  }
  if (!reserved) {
    dc.cap_failures.fetch_add(1, std::memory_order_relaxed);
    failures_[device].fetch_add(1, std::memory_order_relaxed);
    report_inject(symbol, size, device, "cap", "cap", step, phase, call);
    d.fail = true;
    return d;
  }
  d.process_held = hold(device, size);
  d.reserved = size;
  return d;
}

// What the rules judge an allocation by: the call, and the process's rank, step, phase, age and frees.
CallFacts Engine::call_facts(const Plan& plan, MemoryKind memory, Entry entry, uint64_t size, int device, int64_t step,
                             Phase phase) const noexcept {
  CallFacts facts;
  facts.memory = memory;
  facts.entry = entry;
  facts.size = size;
  facts.device = device;
  facts.rank = rank_;
  facts.local_rank = local_rank_;
  facts.step = step;
  facts.phase = phase;
  facts.elapsed_s = plan.rules.needs_time() ? process_elapsed() : 0.0;
  facts.freed_total = freed_.load(std::memory_order_relaxed);
  facts.requests = requests_layer();
  return facts;
}

void Engine::register_requests(Layer layer) noexcept {
  requests_.store(static_cast<uint8_t>(layer), std::memory_order_relaxed);
}

bool Engine::request(Layer layer, uint64_t size, int device, int64_t step, Phase phase) noexcept {
  if (layer == Layer::driver || layer != requests_layer() || !valid_device(device) ||
      finished_.load(std::memory_order_relaxed))
    return false;
  poll_plan();
  Plan& plan = *plan_.load(std::memory_order_acquire);
  if (plan.rules.size() == 0) return false;
  CallFacts facts = call_facts(plan, MemoryKind::device, Entry::mem_alloc, size, device, step, phase);
  facts.layer = layer;
  uint64_t call = request_calls_.fetch_add(1, std::memory_order_relaxed) + 1;
  int rule = plan.rules.decide(facts);
  if (rule < 0) return false;
  cb_->devices[device].failures_injected.fetch_add(1, std::memory_order_relaxed);
  failures_[device].fetch_add(1, std::memory_order_relaxed);
  note_device(device);
  report_inject(layer_name(layer), size, device, plan.rules.rule(static_cast<size_t>(rule)).name.c_str(), "rule", step,
                phase, call, MemoryKind::device, layer);
  return true;
}

void Engine::report_rules_seen() noexcept {
  Plan& plan = *plan_.load(std::memory_order_acquire);
  for (size_t i = 0; i < plan.rules.size(); ++i) {
    const Rule& rule = plan.rules.rule(i);
    if (!rule.when.has_steps) continue;
    RuleSeen seen = plan.rules.seen(i);
    Layer layer = at_request_layer(rule.when, requests_layer()) ? requests_layer() : Layer::driver;
    events::EventLine line(events::kSrcShim, events::kRuleSeen);
    line.add("rule", rule.name.c_str())
        .add("layer", layer_name(layer))
        .add("triggers", seen.triggers)
        .add("driver_calls", seen.driver_calls)
        .add("requests", seen.requests);
    emit(line);
  }
}

AllocDecision Engine::begin_host_alloc(Entry entry, const char* symbol, uint64_t size) noexcept {
  AllocDecision d;
  note_driver_call(symbol);
  if (finished_.load(std::memory_order_relaxed)) return d;
  d.tracked = true;
  d.device = kHostDevice;
  uint64_t call = host_calls_.fetch_add(1, std::memory_order_relaxed) + 1;
  poll_plan();
  Plan& plan = *plan_.load(std::memory_order_acquire);
  int64_t step = cb_->step.load(std::memory_order_relaxed);
  auto phase = static_cast<Phase>(cb_->phase.load(std::memory_order_relaxed));
  if (plan.rules.size() != 0) {
    int rule = plan.rules.decide(call_facts(plan, MemoryKind::host, entry, size, kHostDevice, step, phase));
    if (rule >= 0) {
      host_failures_.fetch_add(1, std::memory_order_relaxed);
      report_inject(symbol, size, kHostDevice, plan.rules.rule(static_cast<size_t>(rule)).name.c_str(), "rule", step,
                    phase, call, MemoryKind::host);
      d.fail = true;
      return d;
    }
  }
  // The host cap: this process's pinned bytes, reserved before the driver call like a device cap's.
  uint64_t limit = plan.caps.has_host() ? plan.caps.host_limit(step, plan.caps.needs_time() ? job_elapsed() : 0.0) : 0;
  uint64_t held = host_held_.load(std::memory_order_relaxed), now = 0;
  do {
    now = held + size;
    if (limit != 0 && (now < held || now > limit)) {
      host_failures_.fetch_add(1, std::memory_order_relaxed);
      report_inject(symbol, size, kHostDevice, "cap", "cap", step, phase, call, MemoryKind::host);
      d.fail = true;
      return d;
    }
  } while (!host_held_.compare_exchange_weak(held, now, std::memory_order_relaxed));
  d.reserved = size;
  d.process_held = now;
  return d;
}

void Engine::end_host_alloc(const AllocDecision& d, bool succeeded, Space space, uint64_t key, uint64_t size) noexcept {
  if (!d.tracked || d.fail) return;
  if (!succeeded) {
    sub_saturating(host_held_, d.reserved);
    return;
  }
  std::optional<Allocation> replaced = ledger_.record(space, key, Allocation{size, kHostDevice});
  if (replaced) {  // freed through a path the shim did not see
    if (replaced->device == kHostDevice) sub_saturating(host_held_, replaced->size);
    else if (valid_device(replaced->device)) {
      release_bytes(cb_->devices[replaced->device], replaced->size);
      unhold(replaced->device, replaced->size);
    }
    count_freed(replaced->size);
  }
  raise_peak(host_peak_, host_held_.load(std::memory_order_relaxed));
}

uint64_t Engine::hold(int device, uint64_t bytes) noexcept {
  return slot_->held[device].fetch_add(bytes, std::memory_order_relaxed) + bytes;
}

void Engine::unhold(int device, uint64_t bytes) noexcept { sub_saturating(slot_->held[device], bytes); }

void Engine::count_freed(uint64_t bytes) noexcept {
  if (plan_.load(std::memory_order_acquire)->rules.needs_freed()) freed_.fetch_add(bytes, std::memory_order_relaxed);
}

void Engine::end_alloc(const AllocDecision& d, bool succeeded, Space space, uint64_t key, uint64_t actual_size) noexcept {
  if (!d.tracked || d.fail) return;
  DeviceCounters& dc = cb_->devices[d.device];
  if (!succeeded) {
    release_bytes(dc, d.reserved);
    unhold(d.device, d.reserved);
    return;
  }
  // The driver may round (cuMemAllocPitch's pitch): book what it really gave. Rounding up can pass the cap
  // by less than one row; the allocation already happened, so it is counted, not refused.
  uint64_t process_held = d.process_held;
  uint64_t job_held = d.job_held;
  if (actual_size > d.reserved) {
    uint64_t extra = actual_size - d.reserved;
    job_held = dc.held.fetch_add(extra, std::memory_order_relaxed) + extra;
    process_held = hold(d.device, extra);
  } else if (actual_size < d.reserved) {
    release_bytes(dc, d.reserved - actual_size);
    unhold(d.device, d.reserved - actual_size);
    process_held -= d.reserved - actual_size;
  }
  std::optional<Allocation> replaced = ledger_.record(space, key, Allocation{actual_size, d.device});
  if (replaced && valid_device(replaced->device)) {
    release_bytes(cb_->devices[replaced->device], replaced->size);
    unhold(replaced->device, replaced->size);
    count_freed(replaced->size);
    if (replaced->device == d.device) process_held -= std::min(process_held, replaced->size);
  }
  // Peaks count what the driver gave, not a reservation that it then refused.
  raise_peak(peak_[d.device], process_held);
  raise_peak(dc.peak, job_held);
}

std::optional<Allocation> Engine::begin_free(Space space, uint64_t key) noexcept {
  if (finished_.load(std::memory_order_relaxed)) return std::nullopt;
  // The ledger counts the free for this process (under the shard lock it takes anyway).
  std::optional<Allocation> taken = ledger_.take(space, key);
  if (taken && valid_device(taken->device))
    cb_->devices[taken->device].free_calls.fetch_add(1, std::memory_order_relaxed);
  return taken;
}

void Engine::end_free(Space space, uint64_t key, const std::optional<Allocation>& taken, bool succeeded) noexcept {
  if (!taken) return;
  if (!succeeded) {
    ledger_.restore(space, key, *taken);
    return;
  }
  if (valid_device(taken->device)) {
    release_bytes(cb_->devices[taken->device], taken->size);
    unhold(taken->device, taken->size);
  } else if (taken->device == kHostDevice) {
    sub_saturating(host_held_, taken->size);
  }
  count_freed(taken->size);
}

uint64_t Engine::held(int device) const noexcept {
  return valid_device(device) ? slot_->held[device].load(std::memory_order_relaxed) : 0;
}

uint64_t Engine::peak(int device) const noexcept {
  return valid_device(device) ? peak_[device].load(std::memory_order_relaxed) : 0;
}

MemInfo Engine::mem_info(int device, uint64_t real_free, uint64_t real_total, bool from_driver) noexcept {
  if (from_driver) note_driver_call("cuMemGetInfo_v2");
  if (!valid_device(device)) return MemInfo{real_free, real_total};
  if (from_driver) note_physical_total(device, real_total);
  poll_plan();
  Plan& plan = *plan_.load(std::memory_order_acquire);
  if (plan.caps.changes()) apply_cap(plan, device, cb_->step.load(std::memory_order_relaxed), nullptr);
  refresh_footprint(device, kFootprintMaxAge);
  const DeviceCounters& dc = cb_->devices[device];
  return capped_mem_info(real_free, real_total, limit_[device].load(std::memory_order_relaxed), dc.held.load(std::memory_order_relaxed));
}

uint64_t Engine::total_mem(int device, uint64_t real_total) noexcept {
  note_driver_call("cuDeviceTotalMem_v2");
  if (!valid_device(device)) return real_total;
  note_physical_total(device, real_total);
  return capped_mem_info(real_total, real_total, limit_[device].load(std::memory_order_relaxed), 0).total;
}

bool Engine::needs_physical_total(int device) const noexcept {
  return valid_device(device) && !(physical_known_.load(std::memory_order_relaxed) & (1u << device));
}

void Engine::note_physical_total(int device, uint64_t bytes) noexcept {
  if (!valid_device(device) || bytes == 0) return;
  cb_->devices[device].physical_total.store(bytes, std::memory_order_relaxed);
  physical_known_.fetch_or(1u << device, std::memory_order_relaxed);
}

void Engine::report_inject(const char* symbol, uint64_t size, int device, const char* rule, const char* reason,
                           int64_t step, Phase phase, uint64_t call, MemoryKind memory, Layer layer) noexcept {
  log(LogLevel::debug, "failing %s of %llu bytes on device %d (%s %s, call %llu)", symbol,
      static_cast<unsigned long long>(size), device, reason, rule, static_cast<unsigned long long>(call));
  if (inject_events_.fetch_add(1, std::memory_order_relaxed) >= kInjectEventLimit) {
    dropped_events_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  events::EventLine line(events::kSrcShim, events::kInject);
  line.add("entry", symbol)
      .add("size", size)
      .add("device", device)
      .add("rule", rule)
      .add("reason", reason)
      .add("step", step)
      .add("phase", phase_name(phase))
      .add("tid", static_cast<int64_t>(syscall(SYS_gettid)))
      .add("call", call)
      .add("memory", memory_kind_name(memory))
      .add("layer", layer_name(layer));
  emit(line);
}

void Engine::report_alloc(const char* symbol, uint64_t size, int device, int64_t step, Phase phase,
                          uint64_t call) noexcept {
  int64_t counted = recorded_step_.load(std::memory_order_relaxed);
  if (counted != step && recorded_step_.compare_exchange_strong(counted, step, std::memory_order_relaxed))
    recorded_.store(0, std::memory_order_relaxed);
  uint64_t nth = recorded_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (recorded_total_.fetch_add(1, std::memory_order_relaxed) >= kRecordEventLimit) {
    dropped_events_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  events::EventLine line(events::kSrcShim, events::kAlloc);
  line.add("entry", symbol)
      .add("size", size)
      .add("device", device)
      .add("step", step)
      .add("phase", phase_name(phase))
      .add("call", call)
      .add("nth", nth);
  if (t_site[0] != '\0') line.add("where", t_site);
  emit(line);
}

void Engine::note_site(const char* where) noexcept {
  if (where == nullptr) {
    t_site[0] = '\0';
    return;
  }
  size_t n = 0;
  while (n + 1 < sizeof t_site && where[n] != '\0') {
    t_site[n] = where[n];
    ++n;
  }
  t_site[n] = '\0';
}

void Engine::emit(events::EventLine& line) noexcept {
  if (events_fd_ < 0) return;
  // Note [Sealed event lines]: under the key the block held when this process started.
  if (events::write_sealed(line, events_fd_, seal_key_)) cb_->events_written.fetch_add(1, std::memory_order_relaxed);
}

void Engine::finish() noexcept {
  if (finished_.exchange(true, std::memory_order_acq_rel)) return;
  report_rules_seen();
  uint32_t used = used_devices_.load(std::memory_order_relaxed);
  for (int d = 0; d < kMaxDevices; ++d) {
    if (!(used & (1u << d))) continue;
    const DeviceCounters& dc = cb_->devices[d];
    events::EventLine line(events::kSrcShim, events::kShimExit);
    line.add("device", d)
        .add("alloc_calls", alloc_calls_[d].load(std::memory_order_relaxed))
        .add("free_calls", ledger_.taken(d))
        .add("failures", failures_[d].load(std::memory_order_relaxed))
        .add("held", slot_->held[d].load(std::memory_order_relaxed))
        .add("peak", peak_[d].load(std::memory_order_relaxed))
        .add("job_held", dc.held.load(std::memory_order_relaxed))
        .add("job_peak", dc.peak.load(std::memory_order_relaxed))
        .add("overhead", footprint_[d].overhead.load(std::memory_order_relaxed))
        .add("events_dropped", dropped_events_.load(std::memory_order_relaxed));
    emit(line);
  }
  // The process is ending: the driver frees what it still holds, so the job no longer holds it either.
  for (int d = 0; d < kMaxDevices; ++d) {
    uint64_t held = slot_->held[d].exchange(0, std::memory_order_relaxed);
    if (held) release_bytes(cb_->devices[d], held);
  }
}

void Engine::prepare_fork() noexcept {
  plan_lock_.lock();
  plan_.load(std::memory_order_acquire)->rules.lock_all();
  ledger_.lock_all();
}

void Engine::after_fork_parent() noexcept {
  ledger_.unlock_all();
  plan_.load(std::memory_order_acquire)->rules.unlock_all();
  plan_lock_.unlock();
}

void Engine::after_fork_child() noexcept {
  ledger_.unlock_all();
  Plan* current = plan_.load(std::memory_order_acquire);
  current->rules.unlock_all();
  plan_lock_.unlock();

  int parent = static_cast<int>(slot_->pid.load(std::memory_order_relaxed));
  ledger_.clear();
  host_held_.store(0, std::memory_order_relaxed);  // pinned by the parent, not this process
  host_peak_.store(0, std::memory_order_relaxed);
  for (int d = 0; d < kMaxDevices; ++d) {
    alloc_calls_[d].store(0, std::memory_order_relaxed);
    failures_[d].store(0, std::memory_order_relaxed);
    peak_[d].store(0, std::memory_order_relaxed);
  }
  freed_.store(0, std::memory_order_relaxed);
  used_devices_.store(0, std::memory_order_relaxed);
  for (DeviceFootprint& f : footprint_) {  // the child's context (if it makes one) is its own
    f.lock.unlock();  // a thread of the parent may have been measuring: it does not exist here
    f.overhead.store(0, std::memory_order_relaxed);
    f.measured_ns.store(0, std::memory_order_relaxed);
  }
  inject_events_.store(0, std::memory_order_relaxed);
  recorded_.store(0, std::memory_order_relaxed);
  recorded_step_.store(-1, std::memory_order_relaxed);
  recorded_total_.store(0, std::memory_order_relaxed);
  dropped_events_.store(0, std::memory_order_relaxed);
  process_start_ns_ = monotonic_ns();
  register_process(kProcessForked, parent);
  // Fresh rule counters: the child's calls are its own.
  Plan* fresh = make_plan(current->source);
  if (fresh) {
    current->retired_next = retired_;
    retired_ = current;
    plan_.store(fresh, std::memory_order_release);
  }
  write_start_event();
}

void Engine::report_warning(const char* message) noexcept {
  events::EventLine line(events::kSrcShim, events::kWarning);
  line.add("message", message);
  emit(line);
  log(LogLevel::warn, "%s", message);
}

void Engine::warn(const char* format, ...) noexcept {
  va_list args;
  va_start(args, format);
  vlog(LogLevel::warn, format, args);
  va_end(args);
}

void Engine::log(LogLevel level, const char* format, ...) noexcept {
  va_list args;
  va_start(args, format);
  vlog(level, format, args);
  va_end(args);
}

void Engine::vlog(LogLevel level, const char* format, va_list args) noexcept {
  if (level > log_level_ || log_fd_ < 0) return;
  char buf[1400];
  int n = std::snprintf(buf, sizeof buf, "oomharness: ");
  int m = std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, format, args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : std::min<size_t>(static_cast<size_t>(m), sizeof buf - static_cast<size_t>(n) - 2));
  buf[len++] = '\n';
  ssize_t ignored = ::write(log_fd_, buf, len);
  (void)ignored;
}

}  // namespace oomh::inject
