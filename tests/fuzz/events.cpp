// Fuzz target: a job's event log, as the runner reads it, through to its results: each line through
// oomh::parse_event_line (policies/include/oomharness/policies/trace.h), the events into attempts of a
// Trace, every policy of the registry on it, and build_job_result, as `oomharness run` does per job.
// An event log is written by the job (the shim, the probe, or training code that misbehaves by design),
// so nothing in it may crash the runner.
//
// Input: JSON lines. A line "---" starts the next attempt. A line "#args {...}" gives the policies'
// arguments ({"policy": {args}}), checked by normalise_args as a suite's `expect:` is; a policy without
// them runs with its defaults (required arguments get a plain value). A line "#target N" sets the
// trace's target step.

#include <oomharness/events.h>
#include <oomharness/policies/registry.h>
#include <oomharness/policies/trace.h>
#include <oomharness/reports/result.h>
#include <oomharness/runner/results_builder.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"

namespace {

nlohmann::json plain_value(oomh::ArgType type) {
  switch (type) {
    case oomh::ArgType::integer: return 2;
    case oomh::ArgType::number: return 0.5;
    case oomh::ArgType::boolean: return true;
    case oomh::ArgType::string: return "loss";
    case oomh::ArgType::bytes: return "1GiB";
    case oomh::ArgType::duration: return "30s";
    case oomh::ArgType::object: return nlohmann::json::object();
  }
  return nullptr;
}

// How an attempt ended, from its runner `attempt_exit` event when the log has one, as the runner sets it.
void set_end(oomh::Attempt& a) {
  for (const oomh::Event& e : a.events) {
    if (e.src != oomh::events::kSrcRunner || e.kind != oomh::events::kAttemptExit) continue;
    if (e.flag("timed_out")) a.end_kind = oomh::AttemptEnd::timed_out;
    else if (e.flag("interrupted")) a.end_kind = oomh::AttemptEnd::interrupted;
    else if (e.has("signal")) {
      a.end_kind = oomh::AttemptEnd::signalled;
      a.signal = static_cast<int>(e.integer("signal", 9));
    }
    if (e.has("code")) a.exit_code = static_cast<int>(e.integer("code", 1));
    a.oom_message = e.flag("oom_message");
    return;
  }
  a.exit_code = 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);

  oomh::JobOutcome outcome;
  oomh::Trace& trace = outcome.trace;
  trace.job = "fuzz";
  trace.simulated_device = true;
  nlohmann::json args_by_policy = nlohmann::json::object();
  trace.attempts.emplace_back();

  size_t from = 0;
  while (from <= input.size()) {
    size_t nl = input.find('\n', from);
    if (nl == std::string::npos) nl = input.size();
    const std::string line = input.substr(from, nl - from);
    from = nl + 1;
    if (line == "---") {
      trace.attempts.emplace_back();
      trace.attempts.back().index = static_cast<int>(trace.attempts.size()) - 1;
    } else if (line.rfind("#args ", 0) == 0) {
      args_by_policy = nlohmann::json::parse(line.substr(6), nullptr, false);
    } else if (line.rfind("#target ", 0) == 0) {
      try {
        trace.target_step = std::stoll(line.substr(8));
      } catch (const std::exception&) {
      }
    } else if (!line.empty()) {
      if (auto e = oomh::parse_event_line(line)) trace.attempts.back().events.push_back(std::move(*e));
    }
  }

  for (oomh::Attempt& a : trace.attempts) {
    std::stable_sort(a.events.begin(), a.events.end(), [](const oomh::Event& x, const oomh::Event& y) { return x.t < y.t; });
    if (!a.events.empty()) {
      a.start = a.events.front().t;
      a.end = a.events.back().t;
    }
    set_end(a);
    a.shim = oomh::ShimRecord{1, 1, 0, 1, true, a.events.size()};
  }
  outcome.start = trace.attempts.front().start;
  outcome.end = trace.attempts.back().end;

  (void)trace.all_events();
  for (const oomh::Attempt& a : trace.attempts) {
    (void)a.injected_faults();
    (void)a.last_completed_step();
    (void)a.ended_by_oom();
    (void)oomh::attempt_end_text(a);
  }

  // Every policy, as the runner's judge() calls it (an exception becomes an internal-error verdict there).
  std::vector<oomh::Verdict> verdicts;
  for (const oomh::PolicyInfo& policy : oomh::policies()) {
    nlohmann::json args = nlohmann::json::object();
    if (args_by_policy.is_object() && args_by_policy.contains(policy.name)) args = args_by_policy[policy.name];
    if (!args.is_object()) args = nlohmann::json::object();
    for (const oomh::ArgSpec& spec : policy.args)
      if (spec.required && !args.contains(spec.name)) args[spec.name] = plain_value(spec.type);
    auto normalised = oomh::normalise_args(policy, std::move(args));
    if (!normalised) continue;
    args = std::move(normalised).value();
    try {
      verdicts.push_back(oomh::evaluate(policy, trace, args));
    } catch (const std::exception&) {
    }
  }

  oomh::JobResult result = oomh::build_job_result("fuzz", outcome, std::move(verdicts));
  // results.json: written, then read back as `oomharness report` and `compare` read it.
  nlohmann::json j = result;
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  try {
    (void)nlohmann::json::parse(text).get<oomh::JobResult>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "results.json of this job does not read back: %s\n%s\n", e.what(), text.c_str());
    OOMH_FUZZ_CHECK(false, "a job result does not read back from its own JSON");
  }
  return 0;
}
