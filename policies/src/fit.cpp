// Note [Fits means no OOM] in oomharness/policies/fit.h.

#include "oomharness/policies/fit.h"

#include "trace_view.h"

namespace oomh {

std::optional<OomMet> first_oom_met(const Trace& trace) {
  const std::vector<view::OomPoint> ooms = view::ooms_of(trace);
  if (ooms.empty()) return std::nullopt;
  const view::OomPoint& first = ooms.front();
  OomMet met;
  met.attempt = first.attempt;
  met.step = first.step;
  met.batch = first.batch;
  met.phase = first.phase;
  met.caught = first.caught;
  met.exception = first.exception;
  // The steps completed after it: in its attempt after its time, and every step of a later attempt.
  for (const Attempt& a : trace.attempts) {
    if (a.index < first.attempt) continue;
    for (const view::StepPoint& s : view::steps_of(a)) {
      if (a.index == first.attempt && s.t <= first.t) continue;
      ++met.steps_after;
      met.last_batch = s.batch > 0 ? s.batch : -1;
    }
  }
  return met;
}

std::string oom_met_text(const OomMet& oom) {
  std::string s = "out of memory at " + view::step_text(oom.step);
  std::string detail;
  if (oom.batch > 0) detail = "batch " + std::to_string(oom.batch);
  if (!oom.phase.empty()) detail += (detail.empty() ? "" : ", ") + oom.phase;
  if (!detail.empty()) s += " (" + detail + ")";
  return s + (oom.caught ? ", caught" : ", not caught");
}

std::string recovered_text(const OomMet& oom) {
  return oom.last_batch > 0 ? "recovered at batch " + std::to_string(oom.last_batch) : std::string("recovered");
}

}  // namespace oomh
