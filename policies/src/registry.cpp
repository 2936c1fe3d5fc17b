// The policy registry: every check by name, its arguments, their normalisation, and evaluation.
//
// Note [Absorbed faults]
// The recovery checks (batch_halving, empty_cache_retry, checkpoint_resume, graceful_exit) are about what
// the code did after an OOM. When the trace has no OOM the code saw, there is nothing to judge: the verdict
// is inconclusive, never pass (a suite would otherwise go green while testing nothing) and never fail (the
// code did nothing wrong). The reason says which of the two cases it was: faults were injected but the
// caching allocator absorbed them (use a persistent fault or a cap), or nothing was injected at all. An OOM
// is one the trace records (Note [An OOM is an event] in trace.cpp): a line of output that mentions one,
// with no refusal of the shim and no probe `oom`, leaves the check inconclusive, never passed.
// The rule lives here, wrapped around each recovery check, so that every route to a check applies it.

#include "oomharness/names.h"
#include "oomharness/policies/oom_kinds.h"
#include "oomharness/policies/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <re2/re2.h>
#include <set>

#include "checks.h"
#include "oomharness/units.h"
#include "trace_view.h"

namespace oomh {

namespace {

using Check = Verdict (*)(const Trace&, const nlohmann::json&);

std::optional<Verdict> absorbed(const Trace& trace) {
  if (!view::ooms_of(trace).empty()) return std::nullopt;
  Verdict v;
  v.status = VerdictStatus::inconclusive;
  size_t injected = view::injection_count(trace);
  if (injected == 0) {
    v.reason = view::nothing_happened_reason(trace);
    return v;
  }
  v.reason = view::absorbed_reason(injected);
  for (const Attempt& a : trace.attempts)
    for (const Event* e : view::injections_of(a))
      if (v.evidence.size() < 3)
        v.evidence.push_back({a.index, e->t, "fault injected into " + e->text("entry", "an allocation") + " (" +
                                                 format_bytes(static_cast<uint64_t>(std::max<int64_t>(0, e->integer("size", 0)))) + ")"});
  return v;
}

std::function<Verdict(const Trace&, const nlohmann::json&)> recovery(Check check) {
  return [check](const Trace& trace, const nlohmann::json& args) {
    if (auto v = absorbed(trace)) return *v;
    return check(trace, args);
  };
}

std::vector<PolicyInfo> make_policies() {
  using nlohmann::json;
  std::vector<PolicyInfo> p;
  p.push_back({"exit", "the last attempt exited with this code",
               {{"code", ArgType::integer, false, "the expected exit code", 0}},
               true, false, checks::exit_code});
  p.push_back({"completes", "the last attempt reached this step (or the job's target_step)",
               {{"steps", ArgType::integer, false, "the step to reach; default: the job's target_step", nullptr}},
               true, false, checks::completes});
  p.push_back({"oom_visible", "an injected fault reached the training code as an out-of-memory error",
               {}, false, false, checks::oom_visible});
  p.push_back({"batch_halving", "after each OOM the next step ran at a smaller batch and training reached its target",
               {{"factor", ArgType::number, false, "the next batch is at most this fraction of the failed one", 0.5},
                {"min", ArgType::integer, false, "the smallest batch the code may go down to", 1},
                {"no_sample_loss", ArgType::boolean, false, "the failed step's samples were processed afterwards", false}},
               false, false, recovery(checks::batch_halving), {EvidenceKind::batches, EvidenceKind::data}});
  p.push_back({"empty_cache_retry", "after an OOM the code emptied the cache and the same step then completed",
               {{"max_retries", ArgType::integer, false, "the most OOMs one step may take", 3}},
               false, false, recovery(checks::empty_cache_retry), {EvidenceKind::batches, EvidenceKind::data}});
  p.push_back({"checkpoint_resume", "the job died of the OOM, restarted from its newest checkpoint and reached its target",
               {{"max_lost_steps", ArgType::integer, false, "the most steps the restart may redo; default: no limit", nullptr},
                {"reference", ArgType::object, false,
                 "compare a metric with an uninterrupted run: {metric: loss, rtol: 1e-5, atol: 0}", nullptr}},
               false, true, recovery(checks::checkpoint_resume),
               {EvidenceKind::batches, EvidenceKind::data, EvidenceKind::losses, EvidenceKind::checkpoints}});
  p.push_back({"graceful_exit", "the job exited non-zero with an out-of-memory message, in time",
               {{"within", ArgType::duration, false, "the longest the exit may take after the first injected failure", nullptr},
                {"message", ArgType::string, false,
                 "a regular expression the output must match; default: the words of the OOM table (oom_kinds.h)",
                 oom::message_pattern()}},
               false, false, recovery(checks::graceful_exit)});
  p.push_back({"memory_stable", "memory held at step boundaries does not grow steadily, and returns to its level after recovery",
               {{"share", ArgType::number, false,
                 "steady growth that adds this share of the held memory by the job's end (or reaches its cap) is a leak "
                 "(Note [A leak is a trend])", view::kLeakShare},
                {"steps", ArgType::integer, false,
                 "the training length to extrapolate the growth to; default: the job's target step", nullptr},
                {"growth_per_step", ArgType::bytes, false,
                 "an absolute limit of average growth per step; given, it alone decides (whatever the model's size)", nullptr},
                {"after_recovery", ArgType::boolean, false, "also check that memory returns after the last OOM", true},
                {"golden", ArgType::object, false,
                 "held bytes at the end of each step in a run without faults ({step: bytes}; `oomharness sweep` sets "
                 "it): the last such step the job completed must hold no more than that plus golden_tolerance",
                 nullptr},
                {"golden_tolerance", ArgType::bytes, false, "how far above the golden level counts as the same", 64 * 1024}},
               false, false, checks::memory_stable, {EvidenceKind::memory}});
  p.push_back({"peak_below", "peak memory held stayed at or under this budget",
               {{"bytes", ArgType::bytes, true, "the budget", nullptr}},
               true, false, checks::peak_below});
  p.push_back({"no_hang", "the job never went longer than `stall` without a step",
               {{"stall", ArgType::duration, false, "the longest gap allowed between steps", 60}},
               false, false, checks::no_hang});
  p.push_back({"ranks_recover_together",
               "after an OOM on any rank of a distributed job, every rank ran the next steps at the same batch size, "
               "or every rank ended within `within`",
               {{"within", ArgType::duration, false, "the longest the other ranks may run on after a rank died of the OOM", 30}},
               false, false, recovery(checks::ranks_recover_together), {EvidenceKind::batches}});
  p.push_back({"zero_grad", "the gradients were cleared before every optimizer step (the Python probe tells)",
               {}, false, false, checks::zero_grad, {EvidenceKind::grads}});
  p.push_back({"eval_no_grad", "evaluation forwards ran without building an autograd graph (under no_grad)",
               {}, false, false, checks::eval_no_grad, {EvidenceKind::evaluation}});
  p.push_back({"effective_batch", "after an OOM every optimizer step still took the samples of the first step (gradient accumulation)",
               {{"samples", ArgType::integer, false, "the samples per optimizer step; default: the first step's", nullptr}},
               false, false, recovery(checks::effective_batch), {EvidenceKind::batches, EvidenceKind::data}});
  return p;
}


std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string quoted(const nlohmann::json& v) { return v.is_string() ? "'" + v.get<std::string>() + "'" : v.dump(); }

// A YAML scalar may reach us as text ("0.5", "true"); these accept both forms.
std::optional<double> as_number(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string s = v.get<std::string>();
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}

std::optional<bool> as_bool(const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "true") return true;
    if (s == "false") return false;
  }
  return std::nullopt;
}

const char* type_words(ArgType t) {
  switch (t) {
    case ArgType::integer: return "a whole number";
    case ArgType::number: return "a number";
    case ArgType::boolean: return "true or false";
    case ArgType::string: return "text";
    case ArgType::bytes: return "a size (8GiB, 512MiB or a number of bytes)";
    case ArgType::duration: return "a duration (30s, 5m, 250ms or a number of seconds)";
    case ArgType::object: return "a mapping";
  }
  return "a value";
}

// Normalises one value to its type. Returns an error message, empty on success.
std::string normalise_value(const std::string& where, ArgType type, nlohmann::json& v) {
  auto wrong = [&] { return where + " must be " + type_words(type) + ", got " + quoted(v); };
  auto negative = [&] { return where + " cannot be negative, got " + quoted(v); };
  switch (type) {
    case ArgType::integer: {
      auto d = as_number(v);
      if (!d || std::floor(*d) != *d || std::fabs(*d) > 9.0e15) return wrong();
      if (*d < 0) return negative();
      v = static_cast<int64_t>(*d);
      return {};
    }
    case ArgType::number: {
      auto d = as_number(v);
      if (!d) return wrong();
      if (*d < 0) return negative();
      v = *d;
      return {};
    }
    case ArgType::boolean: {
      auto b = as_bool(v);
      if (!b) return wrong();
      v = *b;
      return {};
    }
    case ArgType::string:
      if (!v.is_string()) return wrong();
      return {};
    case ArgType::bytes: {
      if (v.is_number_unsigned()) return {};  // 0 to 2^64-1, exactly as written
      if (v.is_number()) {
        double d = v.get<double>();
        if (d < 0) return negative();
        if (std::floor(d) != d) return wrong();
        if (!(d < 18446744073709551616.0)) return where + " is too large: " + quoted(v) + " is past 2^64-1 bytes";
        v = static_cast<uint64_t>(d);
        return {};
      }
      if (!v.is_string()) return wrong();
      Expected<double> r = parse_bytes(v.get<std::string>());
      if (!r) return where + ": " + r.error().str();
      v = static_cast<uint64_t>(*r);
      return {};
    }
    case ArgType::duration: {
      if (v.is_number()) {
        if (v.get<double>() < 0) return negative();
        v = v.get<double>();
        return {};
      }
      if (!v.is_string()) return wrong();
      Expected<double> r = parse_duration(v.get<std::string>());
      if (!r) return where + ": " + r.error().str();
      v = *r;
      return {};
    }
    case ArgType::object:
      if (!v.is_object()) return wrong();
      return {};
  }
  return wrong();
}

// Checks `args` (an object) against `specs`, fills defaults. `owner` names the whole ("batch_halving",
// "checkpoint_resume's reference"), `prefix` is put before argument names in the Error's path.
std::optional<Error> normalise_object(const std::string& owner, const std::vector<ArgSpec>& specs,
                                      nlohmann::json& args, const std::vector<std::string>& prefix) {
  auto at = [&](const std::string& name) {
    std::vector<std::string> path = prefix;
    path.push_back(name);
    return path;
  };
  std::vector<std::string> names;
  for (const ArgSpec& s : specs) names.push_back(s.name);
  for (auto it = args.begin(); it != args.end(); ++it) {
    const std::string& key = it.key();
    if (std::find(names.begin(), names.end(), key) != names.end()) continue;
    if (names.empty()) return Error::of(owner + " takes no arguments, got '" + key + "'", at(key));
    // The one suggestion rule (include/oomharness/names.h): a name too far from every argument gets none.
    const std::string hint = nearest_name(key, names);
    return Error::of(owner + " has no argument '" + key + "'" +
                         (hint.empty() ? std::string() : ": did you mean '" + hint + "'?") + " (arguments: " +
                         joined(names) + ")",
                     at(key));
  }
  for (const ArgSpec& s : specs) {
    auto it = args.find(s.name);
    if (it == args.end() || it->is_null()) {
      if (s.required)
        return Error::of(owner + " needs '" + s.name + "' (" + type_words(s.type) + "): " + s.help, at(s.name));
      if (it != args.end()) args.erase(it);
      if (!s.default_value.is_null()) args[s.name] = s.default_value;
      continue;
    }
    std::string error = normalise_value(owner + "'s '" + s.name + "'", s.type, *it);
    if (!error.empty()) return Error::of(error, at(s.name));
  }
  return std::nullopt;
}

const std::vector<ArgSpec>& reference_specs() {
  static const std::vector<ArgSpec> specs = {
      {"metric", ArgType::string, false, "the per-step value to compare", "loss"},
      {"rtol", ArgType::number, false, "relative tolerance", 1e-5},
      {"atol", ArgType::number, false, "absolute tolerance", 0.0},
  };
  return specs;
}

// Checks that need more than a type: ranges, regular expressions, nested objects.
std::optional<Error> check_policy_args(const PolicyInfo& policy, nlohmann::json& args) {
  // An exit status holds 8 bits: a process that calls exit(256) is seen as exiting 0, so `exit: 256` could
  // never pass (and -1 neither: a signal is no exit code).
  if (policy.name == "exit" && args.contains("code")) {
    const int64_t code = args["code"].get<int64_t>();
    if (code < 0 || code > 255)
      return Error::of("exit's 'code' must be from 0 to 255 (an exit status holds 8 bits), got " + args["code"].dump(), {"code"});
  }
  if (policy.name == "batch_halving") {
    double f = args["factor"].get<double>();
    if (!(f > 0 && f <= 1))
      return Error::of("batch_halving's 'factor' must be above 0 and at most 1, got " + args["factor"].dump(), {"factor"});
  }
  if (policy.name == "graceful_exit") {
    RE2::Options options;  // as checks_recovery.cpp matches it
    options.set_log_errors(false);
    options.set_case_sensitive(false);
    const RE2 re(args["message"].get<std::string>(), options);
    if (!re.ok())
      return Error::of("graceful_exit's 'message' is not a valid regular expression: " + quoted(args["message"]) +
                           " (" + re.error() + ")",
                       {"message"});
  }
  if (policy.name == "memory_stable" && !(args["share"].get<double>() > 0))
    return Error::of("memory_stable's 'share' must be above 0, got " + args["share"].dump(), {"share"});
  if (policy.name == "memory_stable" && args.contains("golden")) {
    nlohmann::json normalised = nlohmann::json::object();
    for (auto it = args["golden"].begin(); it != args["golden"].end(); ++it) {
      const std::string& key = it.key();
      if (key.empty() || key.size() > 12 || key.find_first_not_of("0123456789") != std::string::npos)
        return Error::of("memory_stable's 'golden' maps step numbers to bytes; '" + key + "' is not a step number",
                         {"golden", key});
      nlohmann::json value = it.value();
      std::string error = normalise_value("memory_stable's golden step " + key, ArgType::bytes, value);
      if (!error.empty()) return Error::of(error, {"golden", key});
      normalised[std::to_string(std::stoll(key))] = value;
    }
    args["golden"] = std::move(normalised);
  }
  if (policy.name == "checkpoint_resume" && args.contains("reference"))
    return normalise_object("checkpoint_resume's reference", reference_specs(), args["reference"], {"reference"});
  return std::nullopt;
}

// Shorthands, expanded before the type checks: `reference: true` asks for the default comparison,
// `reference: false` for none.
std::optional<Error> expand_shorthands(const PolicyInfo& policy, nlohmann::json& args) {
  if (policy.name != "checkpoint_resume" || !args.contains("reference")) return std::nullopt;
  nlohmann::json& ref = args["reference"];
  if (ref.is_object() || ref.is_null()) return std::nullopt;
  auto b = as_bool(ref);
  if (!b) return Error::of("checkpoint_resume's 'reference' must be a mapping or true, got " + quoted(ref), {"reference"});
  if (*b) ref = nlohmann::json::object();
  else args.erase("reference");
  return std::nullopt;
}

}  // namespace

const std::vector<PolicyInfo>& policies() {
  static const std::vector<PolicyInfo> all = make_policies();
  return all;
}

const PolicyInfo* find_policy(const std::string& name) {
  for (const PolicyInfo& p : policies())
    if (p.name == name) return &p;
  return nullptr;
}

Expected<nlohmann::json> normalise_args(const PolicyInfo& policy, nlohmann::json args) {
  using Result = Expected<nlohmann::json>;
  if (args.is_null()) args = nlohmann::json::object();
  if (!args.is_object()) {
    if (!policy.scalar_arg || policy.args.empty()) {
      std::vector<std::string> names;
      for (const ArgSpec& s : policy.args) names.push_back(s.name);
      if (names.empty()) return Result::failure(Error::of(policy.name + " takes no arguments, got " + quoted(args)));
      return Result::failure(
          Error::of(policy.name + " takes named arguments (" + joined(names) + "), not a bare value " + quoted(args)));
    }
    args = nlohmann::json{{policy.args.front().name, args}};
  }
  if (auto e = expand_shorthands(policy, args)) return Result::failure(std::move(*e));
  if (auto e = normalise_object(policy.name, policy.args, args, {})) return Result::failure(std::move(*e));
  if (auto e = check_policy_args(policy, args)) return Result::failure(std::move(*e));
  return Result::success(std::move(args));
}

Verdict evaluate(const PolicyInfo& policy, const Trace& trace, const nlohmann::json& args) {
  Verdict v;
  try {
    v = policy.evaluate(trace, args);
  } catch (const std::exception& e) {
    // A check reading arguments that normalise_args did not produce; say so rather than crash the run.
    v = Verdict{};
    v.status = VerdictStatus::inconclusive;
    v.reason = "could not evaluate " + policy.name + ": " + e.what();
  }
  // Note [Thinned event logs] in event_log_reader.cpp: past its budget the reader kept significant events without
  // the steps around them, so a pass may rest on steps it never saw. Only the exit code needs no event.
  // Each rank's log keeps the steps around its own events: the steps another rank took around them may be
  // gone, so a check that compares steps around an OOM across ranks cannot pass on a distributed attempt
  // whose steps were thinned.
  static const std::set<std::string> across_ranks = {"batch_halving", "empty_cache_retry", "checkpoint_resume",
                                                     "memory_stable", "effective_batch", "ranks_recover_together"};
  if (v.status == VerdictStatus::pass && policy.name != "exit") {
    for (const Attempt& a : trace.attempts) {
      if (!a.thinned) continue;
      std::string why;
      if (a.thinned->windows_missed > 0)
        why = "the event log of " + attempt_name(a.index) + " was thinned past its budget (the steps around " +
              std::to_string(a.thinned->windows_missed) + " significant events were not kept)";
      else if (a.thinned->merged && a.thinned->steps_dropped > 0 && across_ranks.count(policy.name))
        why = "the event logs of " + attempt_name(a.index) + "'s ranks were thinned, each keeping the steps around its own events";
      if (why.empty()) continue;
      v.status = VerdictStatus::inconclusive;
      v.reason = "could not judge: " + why + "; on what was kept, " + v.reason;
      break;
    }
  }
  v.policy = policy.name;
  v.args = args.is_null() ? nlohmann::json::object() : args;
  return v;
}

bool wants_reference(const PolicyInfo& policy, const nlohmann::json& args) {
  return policy.needs_reference && args.is_object() && args.contains("reference") && !args["reference"].is_null();
}

}  // namespace oomh
