#pragma once
// Note [Suite templates]
// A suite's `name`, `run`, `env` values and `cwd` may name variables in braces: matrix variables
// (`{alloc}`), `{suite_dir}` (filled in when the suite loads), `{workdir}` and `{attempt}` (filled in by
// the launcher for each attempt, through substitute_runtime). `{{` and `}}` stand for literal braces;
// any other brace is an error, so that a typo like `{alloc` is reported rather than passed to the job.
//
// Loading leaves the strings that the launcher sees (argv, env, cwd) as *runtime templates*: the runtime
// variables and the brace escapes are still in them, and substitute_runtime removes both. A job's name
// has no runtime part and is fully resolved when the suite loads.
//
// `observe` patterns are regular expressions, which use braces for `{n}` quantifiers: they are never
// templated.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "oomharness/expected.h"

namespace oomh::suite {

// Finds the variables a template names, in order of appearance, repeats kept; or an Error (no path: the
// caller names the field) for a brace that is neither an escape nor a variable.
Expected<std::vector<std::string>> scan_template(std::string_view text);

// Replaces the variables found in `values`. With `runtime`, `{workdir}`, `{attempt}` and escapes stay for
// substitute_runtime (and braces inside substituted values are escaped for it); without, escapes become
// single braces. Variables found nowhere stay as written (the loader has reported them already).
std::string expand_template(std::string_view text, const std::map<std::string, std::string>& values, bool runtime);

// The variables the launcher fills in.
inline bool is_runtime_variable(std::string_view name) { return name == "workdir" || name == "attempt"; }

}  // namespace oomh::suite
