#pragma once
// A fluent builder for hand-written traces: each call appends one event to the current attempt and moves
// the clock on by one second (or by `wait`), so tests read like the story of a job:
//
//   TraceBuilder().attempt().step(4, 64).inject().oom(5, 64).step(6, 32).exit(0).build();

#include <cmath>
#include <string>

#include "oomharness/policies/trace.h"

namespace oomh::testing {

class TraceBuilder {
 public:
  TraceBuilder& attempt() {
    auto& list = to_reference_ ? trace_.reference : trace_.attempts;
    Attempt a;
    a.index = static_cast<int>(list.size());
    a.start = now_;
    list.push_back(a);
    current_ = &list.back();
    now_ += 1;
    return *this;
  }
  // The following attempts go to Trace::reference (the uninterrupted run).
  TraceBuilder& reference() { to_reference_ = true; return *this; }
  TraceBuilder& target(int64_t step) { trace_.target_step = step; return *this; }
  TraceBuilder& wait(double seconds) { now_ += seconds; return *this; }

  TraceBuilder& inject(const std::string& entry = "cuMemAlloc_v2", int64_t size = 1 << 20) {
    return add("shim", "inject", {{"entry", entry}, {"size", size}, {"device", 0}, {"rule", "r"}, {"reason", "rule"}});
  }
  // An injection during `step` (the step in progress, as the shim reads it from the control block).
  TraceBuilder& inject_at(int64_t step) {
    inject();
    current_->events.back().fields["step"] = step;
    return *this;
  }
  TraceBuilder& oom(int64_t step, int64_t batch, bool caught = true, const std::string& phase = "forward") {
    return add("probe", "oom", {{"step", step}, {"batch_size", batch}, {"phase", phase},
                                {"message", "CUDA out of memory"}, {"caught", caught}});
  }
  TraceBuilder& step(int64_t step, int64_t batch = -1, double loss = NAN, int64_t allocated = -1) {
    nlohmann::json f{{"step", step}};
    if (batch >= 0) f["batch_size"] = batch;
    if (!std::isnan(loss)) f["loss"] = loss;
    if (allocated >= 0) f["allocated"] = allocated;
    return add("probe", "step", f);
  }
  // One stdout line that the suite's `observe:` regexes matched: one event per key, same line, same time.
  TraceBuilder& observed_line(const std::string& line, const nlohmann::json& values) {
    for (auto it = values.begin(); it != values.end(); ++it)
      current_->events.push_back(make("runner", "observed", {{"key", it.key()}, {"value", *it}, {"stream", "stdout"}, {"line", line}}));
    now_ += 1;
    return *this;
  }
  // Any event, for what the other calls do not cover.
  TraceBuilder& event(const std::string& src, const std::string& kind, nlohmann::json fields = nlohmann::json::object()) {
    return add(src, kind, std::move(fields));
  }
  TraceBuilder& phase(const std::string& name) { return add("probe", "phase", {{"phase", name}}); }
  // allocated / freeable: the probe's allocated_before and freeable_before; -1 leaves them out (older probes).
  TraceBuilder& empty_cache(int64_t before, int64_t after, int64_t allocated = -1, int64_t freeable = -1) {
    nlohmann::json f{{"reserved_before", before}, {"reserved_after", after}};
    if (allocated >= 0) f["allocated_before"] = allocated;
    if (freeable >= 0) f["freeable_before"] = freeable;
    return add("probe", "empty_cache", f);
  }
  TraceBuilder& save(const std::string& path, int64_t step) { return add("probe", "checkpoint_save", {{"path", path}, {"step", step}}); }
  TraceBuilder& load(const std::string& path, int64_t step) { return add("probe", "checkpoint_load", {{"path", path}, {"step", step}}); }
  TraceBuilder& samples(int64_t count) { return add("probe", "samples", {{"count", count}}); }
  // A control-block sample at the current time (does not move the clock).
  TraceBuilder& sample(uint64_t held, uint64_t peak = 0) {
    MemorySample s;
    s.t = now_;
    s.held = held;
    s.peak = peak ? peak : held;
    current_->samples.push_back(s);
    return *this;
  }
  TraceBuilder& output(const std::string& text) { current_->output_tail += text; return *this; }

  TraceBuilder& exit(int code, bool oom_message = false) {
    current_->end_kind = AttemptEnd::exited;
    current_->exit_code = code;
    current_->oom_message = oom_message;
    return end();
  }
  TraceBuilder& killed(int sig) {
    current_->end_kind = AttemptEnd::signalled;
    current_->signal = sig;
    return end();
  }
  TraceBuilder& timed_out() {
    current_->end_kind = AttemptEnd::timed_out;
    current_->signal = 9;
    return end();
  }

  Trace build() const { return trace_; }

 private:
  Event make(const std::string& src, const std::string& kind, nlohmann::json fields) const {
    Event e;
    e.t = now_;
    e.pid = 100;
    e.src = src;
    e.kind = kind;
    e.fields = std::move(fields);
    return e;
  }
  TraceBuilder& add(const std::string& src, const std::string& kind, nlohmann::json fields) {
    current_->events.push_back(make(src, kind, std::move(fields)));
    now_ += 1;
    return *this;
  }
  TraceBuilder& end() {
    current_->end = now_;
    now_ += 1;
    return *this;
  }

  Trace trace_;
  Attempt* current_ = nullptr;
  double now_ = 1000;
  bool to_reference_ = false;
};

}  // namespace oomh::testing
