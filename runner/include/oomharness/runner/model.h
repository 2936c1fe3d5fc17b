#pragma once
// The model layer: every type that crosses a process or a file boundary of the runner, with its JSON codec
// beside it (issue 30, "one definition per boundary").
//
// Note [One codec per boundary type]
// A Slurm job runs on a node under `oomharness agent` and comes back as a file: the job (JobSpec) goes out,
// the outcome (JobOutcome: the trace's attempts, their events, memory samples, rank ends, the shim's armed
// record and the folded figures of a thinned log) comes back, and the submitting side judges it with the
// same code as a local run. A field that the codec forgets is not an error anywhere: the node's outcome
// simply comes back without it, and a verdict changes (a thinned log judged as complete, per-rank memory
// timelines empty). That happened once (issue 30), so each type here has exactly one to_json/from_json pair,
// in model/codec.cpp, and two guards keep them whole:
// - each type's codec is one table of its members (name and member pointer, Fields<T> in codec.cpp) that
//   the writer and the reader both walk, and a static_assert checks that the table's length is the
//   struct's field_count: adding a member to the struct stops the build until the table names it
//   (field_count counts an aggregate's members, see below);
// - tests/runner/app/model_test.cpp fills every field of each type with a value that is not its default,
//   round-trips it, and checks that the JSON has one key per field and that what comes back is equal.
// The readers refuse what is not ours: a missing or mistyped member is a std::runtime_error that names its
// path ("attempts[1].samples[3].rank: missing"). The results file and the streamed jobs.jsonl carry another
// model (reports' RunResult/JobResult, built from these by results_builder), whose codecs sit beside it in
// reports/include/oomharness/reports/result.h; both files are written by that one codec.

#include <cstddef>
#include <utility>

#include <nlohmann/json.hpp>

#include "oomharness/policies/trace.h"
#include "oomharness/runner/job_runner.h"
#include "oomharness/runner/suite.h"

namespace oomh {

namespace model_detail {
// Converts to any member type, in an unevaluated brace initialiser only (the rvalue-qualified reference
// conversion keeps std::optional's converting constructor from making the initialisation ambiguous).
struct AnyField {
  template <class T>
  constexpr operator T&() const&& noexcept;
};
}  // namespace model_detail

// The number of members of an aggregate: the most initialisers `T{...}` accepts. A member that is itself
// an aggregate counts once (AnyField converts to it, so no brace elision happens).
template <class T, class... Fields>
constexpr std::size_t field_count() {
  if constexpr (requires { T{std::declval<Fields>()..., std::declval<model_detail::AnyField>()}; })
    return field_count<T, Fields..., model_detail::AnyField>();
  else
    return sizeof...(Fields);
}

// Names of AttemptEnd as the codec writes them ("exited", "timed_out", ...); nullopt for another text.
const char* attempt_end_name(AttemptEnd e);
std::optional<AttemptEnd> attempt_end_from_name(const std::string& name);

// The codecs (found by nlohmann::json through argument-dependent lookup: json(x), j.get<T>()). Enums go
// by name ("timed_out", "python", "virtual").
void to_json(nlohmann::json& j, const AttemptEnd& v);
void from_json(const nlohmann::json& j, AttemptEnd& v);
void to_json(nlohmann::json& j, const ProbeMode& v);
void from_json(const nlohmann::json& j, ProbeMode& v);
void to_json(nlohmann::json& j, const DeviceChoice& v);
void from_json(const nlohmann::json& j, DeviceChoice& v);
void to_json(nlohmann::json& j, const SourceLocation& v);
void from_json(const nlohmann::json& j, SourceLocation& v);
void to_json(nlohmann::json& j, const ObserveSpec& v);
void from_json(const nlohmann::json& j, ObserveSpec& v);
void to_json(nlohmann::json& j, const CapChange& v);
void from_json(const nlohmann::json& j, CapChange& v);
void to_json(nlohmann::json& j, const MemorySpec& v);
void from_json(const nlohmann::json& j, MemorySpec& v);
void to_json(nlohmann::json& j, const FaultSpec& v);
void from_json(const nlohmann::json& j, FaultSpec& v);
void to_json(nlohmann::json& j, const RestartSpec& v);
void from_json(const nlohmann::json& j, RestartSpec& v);
void to_json(nlohmann::json& j, const ExpectSpec& v);
void from_json(const nlohmann::json& j, ExpectSpec& v);
void to_json(nlohmann::json& j, const SweepSpec& v);
void from_json(const nlohmann::json& j, SweepSpec& v);
void to_json(nlohmann::json& j, const JobSpec& v);
void from_json(const nlohmann::json& j, JobSpec& v);

void to_json(nlohmann::json& j, const MemorySample& v);
void from_json(const nlohmann::json& j, MemorySample& v);
void to_json(nlohmann::json& j, const ShimRecord& v);
void from_json(const nlohmann::json& j, ShimRecord& v);
void to_json(nlohmann::json& j, const RankEnd& v);
void from_json(const nlohmann::json& j, RankEnd& v);
void to_json(nlohmann::json& j, const LogFold& v);
void from_json(const nlohmann::json& j, LogFold& v);
void to_json(nlohmann::json& j, const Attempt& v);
void from_json(const nlohmann::json& j, Attempt& v);
void to_json(nlohmann::json& j, const Trace& v);
void from_json(const nlohmann::json& j, Trace& v);
void to_json(nlohmann::json& j, const JobOutcome& v);
void from_json(const nlohmann::json& j, JobOutcome& v);
void to_json(nlohmann::json& j, const HarnessPaths& v);
void from_json(const nlohmann::json& j, HarnessPaths& v);

// Reads `j` as a T, turning nlohmann's errors into one std::runtime_error that names `what` and the path.
template <class T>
T model_from_json(const nlohmann::json& j, const char* what);

}  // namespace oomh
