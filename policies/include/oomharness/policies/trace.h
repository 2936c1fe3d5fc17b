#pragma once
// The trace: everything the runner learned about one job, attempt by attempt, in time order.
// Policies are pure functions of it (policies/README.md); the runner fills it; reports summarise it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace oomh {

// Note [A job's integers]
// A step, a batch size, a count of samples or of bytes that a job wrote (its event log, its output, its
// control block) is read within +-kJobIntegerLimit, 2^53 (about 9.0e15): no training has that many steps,
// no GPU that many bytes, and a double holds every whole number up to it exactly. Past it a figure reads as
// the limit. Casting 1e30 to int64 would be undefined, and a step read as INT64_MAX would overflow the
// first `step + 1`; within the limit a check may add one to a step, subtract two figures or sum a
// thousand of them in int64. Event::integer, job_integer and the runner's sampler of the control block
// clamp to it; a sum over any number of events (samples seen) saturates at it.
inline constexpr int64_t kJobIntegerLimit = int64_t{1} << 53;
// A double a job wrote, as a count or a step: clamped to the limit, a fraction cut toward zero, NaN gives `nan`.
int64_t job_integer(double d, int64_t nan = 0);
// A JSON value a job wrote (an event's field, or one nested in it), as a count or a step: a number read as
// above, `fallback` for anything else. Event::integer reads its fields with it.
int64_t job_integer(const nlohmann::json& v, int64_t fallback);

// One line of an event log, or an event the runner added (src "runner").
struct Event {
  double t = 0;             // wall-clock seconds (CLOCK_REALTIME)
  int pid = 0;
  std::string src;          // "shim", "probe", "runner"
  std::string kind;         // include/oomharness/events.h
  nlohmann::json fields = nlohmann::json::object();

  // Convenience readers: the field, or `fallback` when absent or of another type.
  int64_t integer(const char* key, int64_t fallback = -1) const;
  double number(const char* key, double fallback = 0) const;
  std::string text(const char* key, const std::string& fallback = {}) const;
  bool flag(const char* key, bool fallback = false) const;
  bool has(const char* key) const { return fields.is_object() && fields.contains(key) && !fields[key].is_null(); }
};

// The control block sampled by the runner.
struct MemorySample {
  double t = 0;
  int device = 0;
  uint64_t held = 0;
  uint64_t peak = 0;
  uint64_t cap = 0;       // 0: none
  int64_t step = -1;
  int rank = -1;          // a job with ranks: the rank whose control block it was read from
};

enum class AttemptEnd {
  exited,       // exited by itself (see exit_code)
  signalled,    // killed by a signal it did not get from the runner
  timed_out,    // the runner stopped it at the job's timeout
  interrupted,  // the runner stopped it because the run was interrupted (Ctrl-C)
  failed_to_start,
};

struct Attempt;

// A fault the shim injected (its `inject` event) and whether the training code saw it as an out-of-memory
// error (Note [Visible faults] in trace.cpp).
struct InjectedFault {
  const Event* event = nullptr;
  bool visible = false;
};

// What the shims of an attempt's processes said about themselves, read from its control block when the
// attempt ended (Note [Armed record] in include/oomharness/control_block.h).
struct ShimRecord {
  uint32_t processes = 0;          // processes whose shim joined the attempt's control block
  uint32_t armed = 0;              // ... that accepted the fault plan and caps
  uint32_t rejected = 0;           // ... that rejected them (the reason: their shim_start event's plan_error)
  uint32_t ways_in = 0;            // kWayExport | kWayDlsym | kWayProcAddress
  bool driver_called = false;      // some process made a driver call the shim intercepted (a query counts)
  uint64_t allocations = 0;        // allocation calls the shims intercepted, on every device
  // Allocations the shims refused, by their counters in the control block (DeviceCounters' failures_injected
  // and cap_failures, every device): what is known when the event log lost the inject events (Note [An event
  // log replaced] in runner/src/exec/job_runner_attempts.cpp).
  uint64_t refused_by_rules = 0;
  uint64_t refused_by_cap = 0;
  // Note [A plan only the runner writes] in injector/engine/engine.h: what the shims found the job writing
  // that only the runner writes (ControlBlock::tampered), and the plan generation the block held at the end
  // (0: nobody wrote a plan into it).
  uint32_t tampered = 0;
  uint32_t plan_generation = 0;
};

// Note [Ranks]
// A job with `ranks: N` (N > 1) runs each attempt as N processes, one per distributed rank, started
// together and ended together: one attempt is all of them. Each rank has its own output log, event log
// and control block (so its own step, phase and held bytes); merge_ranks folds the N into the one Attempt
// the checks read: every event gets its rank (`rank` field), the samples and events of all ranks in time
// order, and the attempt ends as its deciding rank ended. The deciding rank is the one whose failure
// explains the attempt: an interrupted rank first, else the earliest one that failed (non-zero exit, a
// signal, no start), else the earliest one the runner stopped (a timeout or a hang), else rank 0. So a
// job whose rank 1 died of an OOM ends "exited with code 1" even though rank 0 finished, and `exit`,
// `completes` (every rank must reach the target) and restarts judge every rank.
struct RankEnd {
  int rank = 0;
  double start = 0, end = 0;
  AttemptEnd end_kind = AttemptEnd::exited;
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool ended_by_oom = false;
  int64_t last_step = -1;          // the highest step it completed
  std::string log_path;
  std::string stacks;              // what the rank's Python wrote when the runner asked for its stacks (a hang)
};

// Note [Measuring a leak] (checks_memory.cpp): the least-squares line through (step, held bytes), by
// Welford's running sums. The reader folding every step of a thinned log and held_growth fitting the kept
// steps of a whole one both fit with this, so that a slope is computed one way.
struct LineFit {
  uint64_t points = 0;
  double mx = 0, my = 0, sxx = 0, sxy = 0;
  void add(double x, double y) {
    const double n = static_cast<double>(++points);
    const double dx = x - mx;
    mx += dx / n;
    my += (y - my) / n;
    sxx += dx * (x - mx);
    sxy += dx * (y - my);
  }
  bool sloped() const { return sxx > 0; }  // false: every point at one x (retries of one step), no trend
  double slope() const { return sxy / sxx; }
  double at(double x) const { return my + slope() * (x - mx); }
};

// Note [Thinned event logs] (event_log_reader.cpp): what the reader folded from every line of a log whose routine
// events it thinned, so that the checks that need every step read them from here. Set on an Attempt
// only when the reader dropped some routine event.
struct LogFold {
  uint64_t routine = 0;            // routine events read (probe step, phase, samples, memory)
  uint64_t routine_dropped = 0;    // ... of them not kept
  uint64_t steps = 0;              // probe `step` events with a step
  uint64_t steps_dropped = 0;      // ... of them not kept
  uint64_t grads_asked = 0;        // probe steps that said whether the gradients were cleared
  uint64_t grads_uncleared = 0;    // ... and said they were not
  // The least-squares fit of Note [Measuring a leak], over every probe step (Welford's running sums).
  bool growth_complete = true;     // every probe step had `allocated` (else held bytes come from samples)
  uint64_t growth_points = 0;      // points after the warm-up steps
  double growth_mx = 0, growth_my = 0, growth_sxx = 0, growth_sxy = 0;
  int64_t growth_from = 0, growth_to = 0;
  double growth_t = 0;
  // The longest time between two consecutive probe steps.
  bool has_gap = false;
  double gap_from = 0, gap_to = 0;
  int64_t gap_after_step = -1;
  bool merged = false;             // folded from several ranks' logs: the fit and the gap are per log
  uint64_t windows_missed = 0;     // significant events whose neighbouring steps were not kept (over budget)

  LineFit growth_fit() const { return LineFit{growth_points, growth_mx, growth_my, growth_sxx, growth_sxy}; }
  void set_growth_fit(const LineFit& f) {
    growth_points = f.points;
    growth_mx = f.mx;
    growth_my = f.my;
    growth_sxx = f.sxx;
    growth_sxy = f.sxy;
  }
};

struct Attempt {
  int index = 0;                   // 0-based
  double start = 0, end = 0;       // wall-clock seconds
  AttemptEnd end_kind = AttemptEnd::exited;
  std::optional<int> exit_code;    // for `exited`
  std::optional<int> signal;       // for `signalled` (and the signal that finally stopped a timed-out job)
  bool oom_message = false;        // its output had an out-of-memory message (the runner's `oom` detector)
  bool faults_enabled = true;      // false when `clear_faults` dropped the faults for this attempt
  std::vector<Event> events;       // shim, probe and runner events, sorted by t
  std::vector<MemorySample> samples;  // in time order
  std::string output_tail;         // the last lines of stdout+stderr, for reports
  std::string log_path;            // the attempt's full output on disk
  std::optional<ShimRecord> shim;  // unset when the attempt never started (no control block to read)
  std::vector<RankEnd> ranks;      // a job with ranks: N > 1, one per rank (Note [Ranks]); empty otherwise
  std::optional<LogFold> thinned;  // the event log was thinned (Note [Thinned event logs] in event_log_reader.cpp)

  double duration() const { return end > start ? end - start : 0; }
  // Exited non-zero (or by SIGABRT) of an OOM the trace records: an uncaught probe `oom`, or an OOM message
  // after a shim refusal the code did not get past (Note [An OOM is an event] in trace.cpp).
  bool ended_by_oom() const;
  // The shim's last refusal (`inject`, by a rule or the cap) after which the attempt completed no step at or
  // after the refused one: the code did not get past it. nullptr when every refusal was followed by a step.
  const Event* unresolved_refusal() const;
  // Every injected fault of the attempt, in order, with whether the code saw it (Note [Visible faults]).
  std::vector<InjectedFault> injected_faults() const;
  // The highest step the attempt completed (completes_a_step), -1 when none: what results.json's
  // `last_step` and the terminal's "attempt 1 ended after step N" say.
  int64_t last_completed_step() const;
};

// The attempt of a distributed job from its ranks' attempts, ranks[k] being rank k's (Note [Ranks]).
Attempt merge_ranks(std::vector<Attempt> ranks);
// An attempt the runner ran as one process, whose probe events name two or more ranks (a job that starts
// torchrun itself; Note [Ranks seen in events] in python/oomharness/_job.py): gives each untagged shim
// and probe event the rank of the probe events of its pid, and fills `ranks` with one RankEnd per rank 0
// to the highest seen, each with the process's end (the launcher's), its own last step and whether its
// own events show it died of an OOM, so that the checks judge every rank as for `ranks: N`. Returns
// whether it did; an attempt with `ranks` already, or with fewer than two ranks seen, is left as it is.
bool split_ranks_from_events(Attempt& a);
// The attempt of a job on several nodes that runs one torchrun per node (Note [One torchrun per node] in
// runner/src/exec/node_group.h), from each node's attempt (nodes[k]: node k's torchrun and its ranks, one
// output log, event log and control block). Each node's shim events get the rank of their pid's probe events
// within that node's log (pids are the node's own); every rank a node's events name gets that node's
// torchrun's end, as a rank of a local torchrun job gets its launcher's (split_ranks_from_events); a rank no
// node named gets the end of node rank / ranks_per_node. What the ranks of a node share (the node's output,
// samples, shim record) goes with its first rank; then merge_ranks folds them all, and events of no rank (the
// torchruns' own, the runner's, observed values) are added as they are. A rank named by two nodes (their
// torchruns made separate worlds) is a warning event.
Attempt merge_node_torchruns(std::vector<Attempt> nodes, int ranks_per_node);
// The rank an event came from: its `rank` field, -1 when it has none (a job without ranks).
int rank_of(const Event& e);
// The lowest step every rank completed (the minimum of the ranks' last steps), or last_completed_step()
// for an attempt without ranks.
int64_t steps_all_ranks_completed(const Attempt& a);
// The innermost frame of the main thread (the last one listed) in a faulthandler dump:
// "all_reduce (distributed_c10d.py:1536)"; empty when there is none.
std::string innermost_frame(const std::string& stacks);

// Held memory at the end of each completed step of the attempt, as memory_stable reads it (the probe's
// `allocated` with the step, else the control-block sample nearest the step's end); steps without a
// figure are left out. `oomharness sweep` gives a golden run's to its faulted runs (Note [The golden level]
// in policies/src/checks_memory.cpp).
std::map<int64_t, uint64_t> held_at_steps(const Attempt& attempt);

struct Trace {
  std::string job;
  std::vector<Attempt> attempts;
  // The job run once more without faults, when a policy asked for a reference (checkpoint_resume's `reference`).
  std::vector<Attempt> reference;
  // What the job was asked to reach, when the suite says (`completes`' steps, or the job's `target_step`).
  std::optional<int64_t> target_step;
  bool simulated_device = false;   // ran on the CPU driver double, not a GPU
  // The number of the job's first step, 0 or 1: every step number in the trace is in that numbering
  // (Note [Step numbering] in runner/src/suite/job_fields.cpp).
  int step_base = 1;

  // All events of all attempts, in order, each with its attempt index.
  std::vector<std::pair<int, const Event*>> all_events() const;
};

// A completed training step: the probe's `step` event, or a `step` the runner read from the job's output
// (`observe:`), for jobs that run without a probe.
bool completes_a_step(const Event& e);
// The step such an event completed (its `step`, or the observed value), -1 for any other event.
int64_t completed_step(const Event& e);
// An OOM that a job without a probe printed, read by the suite's `observe:` regex with key `oom`.
bool printed_oom(const Event& e);
// The shim's refusal of an allocation (an `inject` event: by a rule or by the cap).
bool is_refusal(const Event& e);
// Note [Visible faults]: a step completed as `completed` (completed_step) gets the code past a refusal made
// during step `refused` when it is that step or a later one; any completed step does when the shim did not
// know the step (-1). Every reader of "did the code go on after this fault?" asks this one rule.
bool gets_past(int64_t refused, int64_t completed);

// The words every message uses for an attempt: "attempt 2" (counted from 1, as users count), and how it
// ended: "exited with code 1", "was killed by signal 9 (SIGKILL)", "timed out after 30s and was stopped".
std::string attempt_name(int index);
std::string attempt_end_text(const Attempt& attempt);

// Parses one JSON line of an event log. Returns nullopt for a line that is not a valid event, and for
// one nested deeper than kMaxEventDepth (the JSON parser recurses: 300,000 levels crashed it).
std::optional<Event> parse_event_line(const std::string& line);

// Note [Event log limits]
// A job writes its event log, and a job may misbehave by design. The reader folds the log line by line
// and keeps the trace bounded by what the reports and checks use:
// - a line longer than max_line_bytes is never held: the reader skips to the next newline and counts it;
// - a line nested deeper than max_depth is counted, not parsed;
// - the first max_injects `inject` events of the log are kept, later ones counted (the checks ask whether
//   some fault became visible, and the reports cap the faults they list, results_builder.cpp);
// - past max_routine routine events (steps, phases, samples, memory) the routine events are thinned, every
//   significant one kept with the steps around it, and what the checks need of every step folded into
//   LogFold (Note [Thinned event logs] in event_log_reader.cpp).
// What was skipped is said by `warning` events (EventLogReader::warnings), never silently dropped.
inline constexpr size_t kMaxEventLineBytes = size_t{1} << 20;
inline constexpr size_t kMaxEventDepth = 64;
inline constexpr size_t kMaxInjectEvents = 10000;
// Note [Thinned event logs] in event_log_reader.cpp.
inline constexpr size_t kMaxRoutineEvents = 65536;
inline constexpr size_t kMaxPinnedEvents = 131072;

struct EventLogLimits {
  size_t max_line_bytes = kMaxEventLineBytes;
  size_t max_depth = kMaxEventDepth;
  size_t max_injects = kMaxInjectEvents;
  size_t max_routine = kMaxRoutineEvents;  // routine events kept by the stride (0: never thin)
  size_t max_pinned = kMaxPinnedEvents;    // routine events kept around significant ones and at changes
  size_t units_before = 1;                 // steps kept before a significant event
  size_t units_after = 3;                  // ... and after it (1 after an `inject`)
  size_t max_unit_events = 1024;           // routine events held between two steps before samples are summed
};

// Whether the JSON text nests arrays and objects deeper than `depth` (strings are skipped).
bool nests_deeper_than(std::string_view json, size_t depth);

// Reads an event log fed in chunks of any size (Note [Event log limits]).
class EventLogReader {
 public:
  explicit EventLogReader(EventLogLimits limits = {}) : limits_(limits) {}
  void feed(std::string_view chunk);
  void finish();  // the last line, when the log does not end with a newline

  std::vector<Event>& events() { return events_; }
  size_t bad_lines() const { return bad_; }       // not valid events
  size_t long_lines() const { return long_; }     // over max_line_bytes, skipped
  size_t deep_lines() const { return deep_; }     // nested deeper than max_depth, skipped
  size_t injects_dropped() const { return injects_dropped_; }
  // What was folded from every line; thinned() when some routine event was not kept (Note [Thinned event logs]).
  const LogFold& fold() const { return fold_; }
  bool thinned() const { return fold_.routine_dropped > 0; }
  // One runner `warning` event per kind of skip (`source` names the log), at the latest time read.
  std::vector<Event> warnings(const std::string& source) const;

  struct Facts;  // what the reader reads of a routine line (event_scan.h)

 private:
  // A routine line held until its fate is known: the text, parsed only when kept.
  struct Raw {
    std::string line;
    uint64_t seq = 0;
    bool samples = false;
    int64_t count = 0;
    double t = 0;
    int pid = 0;
    bool step = false;  // a probe `step` with a step
  };
  // The routine events up to and including one step: kept or dropped together, so that a kept step keeps
  // the samples counted for it.
  struct Unit {
    std::vector<Raw> events;
    uint64_t ordinal = 0;
    bool pinned = false;
    bool forced = false;  // kept whatever the budget: it ends a unit begun before a significant event
  };
  void take();
  void routine(Raw raw, const Facts& f);
  void significant(Event e, uint64_t seq, bool is_inject);
  void close_unit(bool has_step);
  void leave_ring();
  void commit(Unit& u, bool pinned, bool force = false);
  void keep(const Raw& r, uint64_t tag);
  void prune();
  void fold_step(const Facts& f);
  EventLogLimits limits_;
  std::string line_;
  bool skipping_ = false;  // inside a line already over the limit
  bool finished_ = false;
  std::vector<Event> events_;
  std::vector<uint64_t> seq_;   // parallel to events_: the line's number in the log
  std::vector<uint64_t> tag_;   // parallel to events_: 0 pinned, else 1 + the unit's ordinal
  Unit pending_;
  std::vector<Unit> ring_;      // the last units_before closed units
  uint64_t lines_ = 0, units_ = 0, stride_ = 1, stride_kept_ = 0, pinned_kept_ = 0, after_units_ = 0;
  int64_t unit_samples_ = -1;   // samples counted in the pending unit, -1: none
  bool prev_step_known_ = false;
  int64_t prev_step_ = 0, prev_batch_ = 0, prev_samples_ = 0;
  uint64_t uncleared_pinned_ = 0;
  bool force_next_ = false;
  // The lines holding the largest step and memory figures, kept whatever the stride says.
  std::optional<Raw> max_step_, max_allocated_, max_reserved_;
  int64_t max_step_v_ = 0, max_allocated_v_ = 0, max_reserved_v_ = 0;
  uint64_t growth_seen_ = 0;
  double last_step_t_ = 0;
  int64_t last_step_no_ = -1;
  bool any_step_ = false;
  LogFold fold_;
  size_t bad_ = 0, long_ = 0, deep_ = 0, injects_ = 0, injects_dropped_ = 0;
  double last_t_ = 0;
};

void to_json(nlohmann::json& j, const Event& e);
void from_json(const nlohmann::json& j, Event& e);

}  // namespace oomh
