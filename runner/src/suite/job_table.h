#pragma once
// Note [One table of job fields]
// A job's fields were once spelled in about seven places that drifted apart (issue 30): JobSpec, JobFields,
// merge, build_job, the loader's key list and its chain of readers, exec's flags. Now each key of a job is
// one row of kJobKeys (job_table.cpp): its name as a suite writes it, what it takes and its default in
// words, the loader's reader for it, how a job's value is laid over the defaults' (merge), how it becomes
// the JobSpec's member (build), and the `exec` flags that set it, with their help. From the table come:
// - the keys a suite's job may have, and so the "did you mean" for a misspelt one (Reader::map);
// - which keys `defaults:` may not give (name, run);
// - merge and build_job (job_fields.cpp), walked row by row;
// - exec's job flags (and sweep's, budget's, predict's): cli.cpp binds each row's flags as their JobFlag
//   says they are written, with their help, and job_from_exec_args (run_command.cpp) hands each flag given
//   to its reader, so that a row with a flag is an `exec` flag at once;
// - `oomharness dev job-keys`, which prints the table as JSON for tests/python's check of the pytest
//   plugin's arguments.
// A row without a flag says why in `no_flag` (exec takes the command after --, runs in the current
// folder, ...); job_table_test.cpp fails for a row that has neither.
// Compile-time checks in job_table.cpp stop the build when JobFields or JobSpec gain a member that the
// table does not name (field_count, as the model codec does: Note [One codec per boundary type]), and
// tests/runner/suite/job_table_test.cpp checks that each row's build and merge carry its field.
// What a row cannot hold stays beside it: the checks across keys (reserve with leave) in make_job, and the
// members that follow from other fields (hang_stall, the target step from `completes`) in build_job.

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "suite/job_fields.h"

namespace oomh::suite {

class Loader;
struct Partial;
struct Entry;
struct Field;

// How a job flag is written on the command line; cli.cpp binds it so.
enum class FlagTakes {
  text,      // --cap 8GiB: one value
  integer,   // --restart 2: one whole number, taken as typed and checked by the row's reader (parse_integer)
  repeated,  // --env A=1 --env B=2: one value per use
  nothing,   // --clear-faults: a switch; its value reads "true"
};

// Reads one flag's values as written (one per use) into the fields. Returns the problem as the command
// says it after "oomharness exec: " ("bad --cap: ..."), or nullopt.
using FlagReader = std::optional<std::string> (*)(JobFields& fields, const std::vector<std::string>& values);

// One flag of `oomharness exec` (and sweep, budget, predict) that sets a job key.
struct JobFlag {
  std::string_view name;  // "--cap"; "" ends a row's list
  std::string_view help;
  FlagTakes takes;
  FlagReader read;        // nullptr for the flags of kFlagsReadByTheApp
};

// The job flags whose values the app layer reads, not a FlagReader: `--fault` and `--expect` are parsed by
// the command line's spec parsers (cli_specs.h: parse_fault_spec, parse_expect_spec), which translate
// their own compact syntax and name its keys as written on the command line. Their rows still give their
// name, help and how they are written; job_from_exec_args (run_command.cpp) reads them in the table's order.
inline constexpr std::string_view kFlagsReadByTheApp[] = {"--fault", "--expect"};

struct JobKey {
  std::string_view key;           // as a suite writes it: "timeout"
  std::string_view takes;         // what it takes, in words: "a duration (30s, 10m)"
  std::string_view default_text;  // the default in words; "" for a key every job must give
  std::string_view help;
  bool in_defaults;               // `defaults:` may give it (name and run are each job's own)
  void (Loader::*read)(Partial& p, const Entry& e, const Field& f);
  void (*merge)(JobFields& base, const JobFields& over);  // `over`'s value laid over `base`'s
  void (*build)(JobSpec& job, const JobFields& fields);   // the default applied once
  std::array<JobFlag, 3> flags;
  std::string_view no_flag;       // why exec has no flag for the key; "" when it has one
};

std::span<const JobKey> job_keys();
const JobKey* find_job_key(std::string_view key);
std::vector<std::string> job_key_names();

// One of exec's job flags ("--cap"), or nullptr.
const JobFlag* find_job_flag(std::string_view flag);

}  // namespace oomh::suite
