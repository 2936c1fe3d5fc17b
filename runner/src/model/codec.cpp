// The model layer's codecs (Note [One codec per boundary type] in oomharness/runner/model.h).

#include "oomharness/runner/model.h"

#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "oomharness/json_number.h"

namespace oomh {

using nlohmann::json;

namespace {

// A reader's error with the path of the member it was reading: "trace.attempts[1].samples[0].rank: missing".
class PathError : public std::runtime_error {
 public:
  PathError(std::string path, std::string problem)
      : std::runtime_error(path.empty() ? problem : path + ": " + problem), path_(std::move(path)), problem_(std::move(problem)) {}
  PathError under(const std::string& parent) const {
    if (path_.empty()) return PathError(parent, problem_);
    return PathError(parent + (path_[0] == '[' ? "" : ".") + path_, problem_);
  }

 private:
  std::string path_, problem_;
};

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <class T>
void read_value(const json& j, T& out);

template <class T>
void read_value(const json& j, std::vector<T>& out) {
  if (!j.is_array()) throw PathError("", std::string("not an array but ") + j.type_name());
  out.clear();
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    try {
      T v{};
      read_value(j[i], v);
      out.push_back(std::move(v));
    } catch (const PathError& e) {
      throw e.under("[" + std::to_string(i) + "]");
    }
  }
}

template <class T>
void read_value(const json& j, T& out) {
  if constexpr (IsOptional<T>::value) {
    if (j.is_null()) {
      out.reset();
      return;
    }
    typename T::value_type v{};
    read_value(j, v);
    out = std::move(v);
  } else {
    try {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) out = read_whole<T>(j);  // Note [Whole numbers from JSON]
      else out = j.get<T>();
    } catch (const PathError&) {
      throw;
    } catch (const json::exception& e) {
      std::string what = e.what();
      size_t cut = what.find("] ");  // "[json.exception.type_error.302] type must be ..."
      throw PathError("", cut == std::string::npos ? what : what.substr(cut + 2));
    } catch (const std::runtime_error& e) {
      throw PathError("", e.what());
    }
  }
}

// The member `key` of object `j` into `out`; every member is required (the writer writes them all, null
// for an unset optional).
template <class T>
void read(const json& j, const char* key, T& out) {
  if (!j.is_object()) throw PathError("", std::string("not an object but ") + j.type_name());
  auto it = j.find(key);
  if (it == j.end()) throw PathError(key, "missing");
  try {
    read_value(*it, out);
  } catch (const PathError& e) {
    throw e.under(key);
  }
}

}  // namespace

const char* attempt_end_name(AttemptEnd e) {
  switch (e) {
    case AttemptEnd::exited: return "exited";
    case AttemptEnd::signalled: return "signalled";
    case AttemptEnd::timed_out: return "timed_out";
    case AttemptEnd::interrupted: return "interrupted";
    case AttemptEnd::failed_to_start: return "failed_to_start";
  }
  return "exited";
}

std::optional<AttemptEnd> attempt_end_from_name(const std::string& s) {
  for (AttemptEnd e : {AttemptEnd::exited, AttemptEnd::signalled, AttemptEnd::timed_out, AttemptEnd::interrupted,
                       AttemptEnd::failed_to_start})
    if (s == attempt_end_name(e)) return e;
  return std::nullopt;
}

// ---- enums, by name -----------------------------------------------------------------------------------

void to_json(json& j, const AttemptEnd& v) { j = attempt_end_name(v); }
void from_json(const json& j, AttemptEnd& v) {
  auto e = attempt_end_from_name(j.get<std::string>());
  if (!e) throw PathError("", "unknown attempt end '" + j.get<std::string>() + "'");
  v = *e;
}
void to_json(json& j, const ProbeMode& v) { j = probe_mode_name(v); }
void from_json(const json& j, ProbeMode& v) {
  auto e = probe_mode_from_name(j.get<std::string>());
  if (!e) throw PathError("", "unknown probe '" + j.get<std::string>() + "'");
  v = *e;
}
void to_json(json& j, const DeviceChoice& v) { j = device_choice_name(v); }
void from_json(const json& j, DeviceChoice& v) {
  auto e = device_choice_from_name(j.get<std::string>());
  if (!e) throw PathError("", "unknown device '" + j.get<std::string>() + "'");
  v = *e;
}

// ---- one field table per type ----------------------------------------------------------------------
// Each type's members, in declaration order, with the key each has in JSON: the writer and the reader
// both walk this one list, and its length must be the struct's field_count.

namespace {

template <class T, class M>
struct Field {
  const char* name;
  M T::*member;
};
template <class T, class M>
constexpr Field<T, M> field(const char* name, M T::*member) {
  return {name, member};
}

template <class T>
struct Fields;

#define OOMH_FIELD(T, m) field(#m, &T::m)

template <>
struct Fields<SourceLocation> {
  static constexpr auto list = std::make_tuple(OOMH_FIELD(SourceLocation, file), OOMH_FIELD(SourceLocation, line),
                                               OOMH_FIELD(SourceLocation, column));
};
template <>
struct Fields<ObserveSpec> {
  static constexpr auto list =
      std::make_tuple(OOMH_FIELD(ObserveSpec, key), OOMH_FIELD(ObserveSpec, pattern), OOMH_FIELD(ObserveSpec, where));
};
template <>
struct Fields<CapChange> {
  static constexpr auto list =
      std::make_tuple(OOMH_FIELD(CapChange, at_step), OOMH_FIELD(CapChange, at_seconds), OOMH_FIELD(CapChange, limit));
};
template <>
struct Fields<MemorySpec> {
  static constexpr auto list = std::make_tuple(OOMH_FIELD(MemorySpec, limit), OOMH_FIELD(MemorySpec, counts_footprint),
                                               OOMH_FIELD(MemorySpec, schedule), OOMH_FIELD(MemorySpec, reserve),
                                               OOMH_FIELD(MemorySpec, leave), OOMH_FIELD(MemorySpec, reserve_chunk),
                                               OOMH_FIELD(MemorySpec, snapshot));
};
template <>
struct Fields<FaultSpec> {
  static constexpr auto list =
      std::make_tuple(OOMH_FIELD(FaultSpec, name), OOMH_FIELD(FaultSpec, rule), OOMH_FIELD(FaultSpec, where));
};
template <>
struct Fields<RestartSpec> {
  static constexpr auto list =
      std::make_tuple(OOMH_FIELD(RestartSpec, max), OOMH_FIELD(RestartSpec, on), OOMH_FIELD(RestartSpec, clear_faults));
};
template <>
struct Fields<ExpectSpec> {
  static constexpr auto list = std::make_tuple(OOMH_FIELD(ExpectSpec, policy), OOMH_FIELD(ExpectSpec, args),
                                               OOMH_FIELD(ExpectSpec, where), OOMH_FIELD(ExpectSpec, must_fail));
};
template <>
struct Fields<SweepSpec> {
  static constexpr auto list =
      std::make_tuple(OOMH_FIELD(SweepSpec, steps), OOMH_FIELD(SweepSpec, modes), OOMH_FIELD(SweepSpec, transient_times));
};
template <>
struct Fields<JobSpec> {
  static constexpr auto list = std::make_tuple(
      OOMH_FIELD(JobSpec, name), OOMH_FIELD(JobSpec, argv), OOMH_FIELD(JobSpec, shell), OOMH_FIELD(JobSpec, env),
      OOMH_FIELD(JobSpec, cwd), OOMH_FIELD(JobSpec, timeout), OOMH_FIELD(JobSpec, grace), OOMH_FIELD(JobSpec, probe),
      OOMH_FIELD(JobSpec, device), OOMH_FIELD(JobSpec, observe), OOMH_FIELD(JobSpec, memory), OOMH_FIELD(JobSpec, faults),
      OOMH_FIELD(JobSpec, restart), OOMH_FIELD(JobSpec, expect), OOMH_FIELD(JobSpec, target_step), OOMH_FIELD(JobSpec, step_base), OOMH_FIELD(JobSpec, ranks), OOMH_FIELD(JobSpec, nodes), OOMH_FIELD(JobSpec, ranks_per_node),
      OOMH_FIELD(JobSpec, hang_stall), OOMH_FIELD(JobSpec, sweep), OOMH_FIELD(JobSpec, matrix), OOMH_FIELD(JobSpec, where));
};
template <>
struct Fields<MemorySample> {
  static constexpr auto list = std::make_tuple(OOMH_FIELD(MemorySample, t), OOMH_FIELD(MemorySample, device),
                                               OOMH_FIELD(MemorySample, held), OOMH_FIELD(MemorySample, peak),
                                               OOMH_FIELD(MemorySample, cap), OOMH_FIELD(MemorySample, step),
                                               OOMH_FIELD(MemorySample, rank));
};
template <>
struct Fields<ShimRecord> {
  static constexpr auto list = std::make_tuple(OOMH_FIELD(ShimRecord, processes), OOMH_FIELD(ShimRecord, armed),
                                               OOMH_FIELD(ShimRecord, rejected), OOMH_FIELD(ShimRecord, ways_in),
                                               OOMH_FIELD(ShimRecord, driver_called), OOMH_FIELD(ShimRecord, allocations),
                                               OOMH_FIELD(ShimRecord, refused_by_rules), OOMH_FIELD(ShimRecord, refused_by_cap),
                                               OOMH_FIELD(ShimRecord, tampered), OOMH_FIELD(ShimRecord, plan_generation));
};
template <>
struct Fields<RankEnd> {
  static constexpr auto list = std::make_tuple(
      OOMH_FIELD(RankEnd, rank), OOMH_FIELD(RankEnd, start), OOMH_FIELD(RankEnd, end), OOMH_FIELD(RankEnd, end_kind),
      OOMH_FIELD(RankEnd, exit_code), OOMH_FIELD(RankEnd, signal), OOMH_FIELD(RankEnd, ended_by_oom),
      OOMH_FIELD(RankEnd, last_step), OOMH_FIELD(RankEnd, log_path), OOMH_FIELD(RankEnd, stacks));
};
template <>
struct Fields<LogFold> {
  static constexpr auto list = std::make_tuple(
      OOMH_FIELD(LogFold, routine), OOMH_FIELD(LogFold, routine_dropped), OOMH_FIELD(LogFold, steps),
      OOMH_FIELD(LogFold, steps_dropped), OOMH_FIELD(LogFold, grads_asked), OOMH_FIELD(LogFold, grads_uncleared),
      OOMH_FIELD(LogFold, growth_complete), OOMH_FIELD(LogFold, growth_points), OOMH_FIELD(LogFold, growth_mx),
      OOMH_FIELD(LogFold, growth_my), OOMH_FIELD(LogFold, growth_sxx), OOMH_FIELD(LogFold, growth_sxy),
      OOMH_FIELD(LogFold, growth_from), OOMH_FIELD(LogFold, growth_to), OOMH_FIELD(LogFold, growth_t),
      OOMH_FIELD(LogFold, has_gap), OOMH_FIELD(LogFold, gap_from), OOMH_FIELD(LogFold, gap_to),
      OOMH_FIELD(LogFold, gap_after_step), OOMH_FIELD(LogFold, merged), OOMH_FIELD(LogFold, windows_missed));
};
template <>
struct Fields<Attempt> {
  static constexpr auto list = std::make_tuple(
      OOMH_FIELD(Attempt, index), OOMH_FIELD(Attempt, start), OOMH_FIELD(Attempt, end), OOMH_FIELD(Attempt, end_kind),
      OOMH_FIELD(Attempt, exit_code), OOMH_FIELD(Attempt, signal), OOMH_FIELD(Attempt, oom_message),
      OOMH_FIELD(Attempt, faults_enabled), OOMH_FIELD(Attempt, events), OOMH_FIELD(Attempt, samples),
      OOMH_FIELD(Attempt, output_tail), OOMH_FIELD(Attempt, log_path), OOMH_FIELD(Attempt, shim),
      OOMH_FIELD(Attempt, ranks), OOMH_FIELD(Attempt, thinned));
};
template <>
struct Fields<Trace> {
  static constexpr auto list = std::make_tuple(OOMH_FIELD(Trace, job), OOMH_FIELD(Trace, attempts),
                                               OOMH_FIELD(Trace, reference), OOMH_FIELD(Trace, target_step), OOMH_FIELD(Trace, step_base),
                                               OOMH_FIELD(Trace, simulated_device));
};
template <>
struct Fields<JobOutcome> {
  static constexpr auto list = std::make_tuple(
      OOMH_FIELD(JobOutcome, trace), OOMH_FIELD(JobOutcome, gpu), OOMH_FIELD(JobOutcome, gpus),
      OOMH_FIELD(JobOutcome, interrupted), OOMH_FIELD(JobOutcome, not_started), OOMH_FIELD(JobOutcome, error),
      OOMH_FIELD(JobOutcome, start), OOMH_FIELD(JobOutcome, end), OOMH_FIELD(JobOutcome, argv), OOMH_FIELD(JobOutcome, work_dir));
};
template <>
struct Fields<HarnessPaths> {
  static constexpr auto list = std::make_tuple(
      OOMH_FIELD(HarnessPaths, inject_library), OOMH_FIELD(HarnessPaths, python_probe_dir),
      OOMH_FIELD(HarnessPaths, reserve_program), OOMH_FIELD(HarnessPaths, driver_library_dir),
      OOMH_FIELD(HarnessPaths, virtual_driver_dir));
};

#undef OOMH_FIELD

template <class M>
json to_value(const M& v) {
  if constexpr (IsOptional<M>::value) return v ? to_value(*v) : json(nullptr);
  else return json(v);
}

// The table must name every member: a field added to the struct and not to its table stops the build.
template <class T>
constexpr bool table_complete() {
  return std::tuple_size_v<std::remove_const_t<decltype(Fields<T>::list)>> == field_count<T>();
}

template <class T>
void write_fields(json& j, const T& v) {
  static_assert(table_complete<T>(), "a boundary type gained or lost a member: name it in its Fields<T> table");
  j = json::object();
  std::apply([&](const auto&... f) { ((j[f.name] = to_value(v.*(f.member))), ...); }, Fields<T>::list);
}

template <class T>
void read_fields(const json& j, T& v) {
  static_assert(table_complete<T>(), "a boundary type gained or lost a member: name it in its Fields<T> table");
  std::apply([&](const auto&... f) { (read(j, f.name, v.*(f.member)), ...); }, Fields<T>::list);
}

}  // namespace

#define OOMH_MODEL_CODEC(T)                                      \
  void to_json(json& j, const T& v) { write_fields(j, v); }      \
  void from_json(const json& j, T& v) { read_fields(j, v); }

OOMH_MODEL_CODEC(SourceLocation)
OOMH_MODEL_CODEC(ObserveSpec)
OOMH_MODEL_CODEC(CapChange)
OOMH_MODEL_CODEC(MemorySpec)
OOMH_MODEL_CODEC(FaultSpec)
OOMH_MODEL_CODEC(RestartSpec)
OOMH_MODEL_CODEC(ExpectSpec)
OOMH_MODEL_CODEC(SweepSpec)
OOMH_MODEL_CODEC(JobSpec)
OOMH_MODEL_CODEC(MemorySample)
OOMH_MODEL_CODEC(ShimRecord)
OOMH_MODEL_CODEC(RankEnd)
OOMH_MODEL_CODEC(LogFold)
OOMH_MODEL_CODEC(Attempt)
OOMH_MODEL_CODEC(Trace)
OOMH_MODEL_CODEC(JobOutcome)
OOMH_MODEL_CODEC(HarnessPaths)

#undef OOMH_MODEL_CODEC

template <class T>
T model_from_json(const json& j, const char* what) {
  T v{};
  try {
    read_value(j, v);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("not a valid ") + what + ": " + e.what());
  }
  return v;
}

template SourceLocation model_from_json<SourceLocation>(const json&, const char*);
template ObserveSpec model_from_json<ObserveSpec>(const json&, const char*);
template CapChange model_from_json<CapChange>(const json&, const char*);
template MemorySpec model_from_json<MemorySpec>(const json&, const char*);
template FaultSpec model_from_json<FaultSpec>(const json&, const char*);
template RestartSpec model_from_json<RestartSpec>(const json&, const char*);
template ExpectSpec model_from_json<ExpectSpec>(const json&, const char*);
template SweepSpec model_from_json<SweepSpec>(const json&, const char*);
template JobSpec model_from_json<JobSpec>(const json&, const char*);
template MemorySample model_from_json<MemorySample>(const json&, const char*);
template ShimRecord model_from_json<ShimRecord>(const json&, const char*);
template RankEnd model_from_json<RankEnd>(const json&, const char*);
template LogFold model_from_json<LogFold>(const json&, const char*);
template Attempt model_from_json<Attempt>(const json&, const char*);
template Trace model_from_json<Trace>(const json&, const char*);
template JobOutcome model_from_json<JobOutcome>(const json&, const char*);
template HarnessPaths model_from_json<HarnessPaths>(const json&, const char*);

}  // namespace oomh
