// Loading a suite: YAML -> checked fields -> defaults merged -> matrix expanded -> JobSpecs.
//
// Note [Suite validation]
// Every key of a suite is checked, and a problem never stops the reading of the rest: the author sees
// every mistake of the file at once, each as file:line:col with the field named and the value quoted, in
// file order (Diagnostics::take). A value with an error is left out of the result, and a suite with any
// error yields no Suite at all, so that nothing half-checked reaches the launcher.
//
// The reading happens in three passes. (1) The matrix is read first, whatever its place in the file,
// because templates anywhere may name its variables. (2) `defaults` and each job are read into a Partial:
// every field optional, every value already typed and checked. (3) Each job's Partial is laid over the
// defaults' (maps such as env, observe, memory and restart merge key by key; other values replace), its
// command is split once `shell` is known, and it is expanded over the matrix combinations of the
// variables it uses.

#include <algorithm>
#include <climits>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <unordered_map>

#include <re2/re2.h>
#include <yaml-cpp/yaml.h>

#include "oomharness/policies/registry.h"
#include "oomharness/runner/suite.h"
#include "oomharness/runner/name_tables.h"
#include "suite/fault_rule.h"
#include "suite/items.h"
#include "suite/job_fields.h"
#include "suite/job_table.h"
#include "suite/loader.h"
#include "suite/limits.h"
#include "suite/torchrun_command.h"
#include "suite/matrix.h"
#include "suite/names.h"
#include "suite/reader.h"
#include "suite/shell_words.h"
#include "suite/templates.h"

namespace oomh::suite {
namespace {

const std::vector<std::string> top_keys = {"version", "name", "backend", "defaults", "matrix", "jobs"};
const std::vector<std::string> memory_keys = {"limit", "counts", "schedule", "reserve", "leave", "reserve_chunk", "snapshot", "per"};
// What a cap bounds: `rank`, each process of a job with ranks on its own (the only one there is, and what a
// job without ranks has); `job`, the ranks together, is named so that asking for it gets a clear refusal.
const std::vector<std::string> cap_scopes = {"rank", "job"};
const std::vector<std::string> schedule_keys = {"at", "limit"};
const std::vector<std::string> at_keys = {"step", "after"};
const std::vector<std::string> restart_keys = {"max", "on", "clear_faults", "scope"};
// `scope: all` restarts every rank of an attempt together (torchelastic's behaviour, and the only one there
// is); `rank`, restarting the failed rank alone, is named so that asking for it gets a clear refusal.
const std::vector<std::string> restart_scopes = {"all", "rank"};
const std::vector<std::string> restart_reasons = names_of(kRestartReasons);
const std::vector<std::string> probe_modes = {"auto", "python", "none"};
const std::vector<std::string> sweep_keys = {"step", "modes", "transient_times"};
const std::vector<std::string> sweep_modes = {"transient", "persistent"};
const std::vector<std::string> reserved_variables = {"suite_dir", "workdir", "attempt"};


// The options the runner matches `observe:` patterns with (exec/output.cpp says the same).
const RE2::Options& observe_options() {
  static const RE2::Options options = [] {
    RE2::Options o;
    o.set_log_errors(false);
    return o;
  }();
  return options;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> out;
  for (const auto& p : policies()) out.push_back(p.name);
  return out;
}

}  // namespace

Partial merge(Partial base, const Partial& over) {
  base.fields = merge(std::move(base.fields), over.fields);
  if (over.run) base.run = over.run;
  base.given.insert(over.given.begin(), over.given.end());
  base.bad.insert(over.bad.begin(), over.bad.end());
  return base;
}


// ---------------------------------------------------------------------------------------------------
// The top level.

Expected<Suite, std::vector<SuiteError>> Loader::load(const std::string& text, const std::string& default_name) {
  using Result = Expected<Suite, std::vector<SuiteError>>;
  // Limits first, building nothing (Note [Suite limits]); then one document, never LoadAll.
  if (auto problem = suite::check_document(text, d_.file())) return Result::failure({std::move(*problem)});
  std::vector<YAML::Node> documents;
  try {
    documents.push_back(YAML::Load(text));
  } catch (const YAML::ParserException& e) {
    // yaml-cpp's marks are 0-based, like the nodes'.
    SourceLocation where = d_.at(e.mark);
    if (where.line == 0) where = SourceLocation{d_.file(), 1, 1};
    const std::string message = suite::explain_syntax_error(text, e.mark.line, "YAML syntax error: " + e.msg, where);
    return Result::failure({SuiteError{where, message}});
  } catch (const YAML::Exception& e) {
    return Result::failure({SuiteError{d_.at(e.mark), "YAML error: " + e.msg}});
  }
  const SourceLocation start{d_.file(), 1, 1};
  if (documents.empty() || documents[0].IsNull())
    return Result::failure({SuiteError{start, "the suite is empty: it needs at least 'version: 1' and 'jobs:'"}});
  const YAML::Node& root = documents[0];
  const SourceLocation root_at = d_.at(root);

  Suite suite;
  suite.file = d_.file();
  suite.dir = dir_;
  suite.name = default_name;
  auto entries = r_.map(root, root_at, Field{"the suite", ""}, top_keys);
  if (!entries) return Result::failure(d_.take());

  const Entry* defaults = nullptr;
  const Entry* jobs = nullptr;
  bool has_version = false;
  for (const auto& e : *entries) {
    if (e.key == "version") {
      has_version = true;
      auto v = r_.integer(e, Field{"", "version"});
      if (v && *v != 1)
        d_.error(e.value_at, "version: unsupported suite version '" + e.value.Scalar() +
                                 "' (this oomharness reads version 1)");
    } else if (e.key == "name") {
      if (auto n = r_.string(e, Field{"", "name"}); n && check_name(*n, e.value_at, "name: the suite's name"))
        suite.name = *n;
    } else if (e.key == "backend") {
      // Where `oomharness run` sends the jobs unless --backend says (Note [Backends] in backend.h).
      if (auto b = r_.string(e, Field{"", "backend"})) {
        if (value_named(kBackends, *b)) suite.backend = *b;
        else d_.error(e.value_at, "backend: unknown backend '" + *b + "' (" + names_text(kBackends, ", ", " or ") + ")");
      }
    } else if (e.key == "matrix") {
      read_matrix(e);
    } else if (e.key == "defaults") {
      defaults = &e;
    } else if (e.key == "jobs") {
      jobs = &e;
    }
  }
  // A misspelt 'jobs' or 'version' has been reported as an unknown key with a suggestion; saying that the
  // key is missing as well would only repeat it.
  auto misspelt = [&](const std::string& key) {
    for (auto it = root.begin(); it != root.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() != key && suite::nearest_name(it->first.Scalar(), top_keys) == key) return true;
    return false;
  };
  if (!has_version && !misspelt("version")) d_.error(root_at, "missing 'version: 1' at the top of the suite");

  Partial base;
  if (defaults) base = read_fields(defaults->value, defaults->value_at, "defaults", true);

  std::vector<JobTemplate> templates;
  if (!jobs) {
    if (!misspelt("jobs")) d_.error(root_at, "missing 'jobs:' (the list of jobs to run)");
  } else if (auto items = r_.list(jobs->value, jobs->value_at, Field{"", "jobs"})) {
    if (items->empty()) d_.error(jobs->value_at, "jobs: the list is empty; a suite needs at least one job");
    for (size_t i = 0; i < items->size(); ++i) {
      const YAML::Node& item = (*items)[i];
      const SourceLocation at = d_.at(item);
      std::string owner = "job #" + std::to_string(i + 1);
      if (item.IsMap() && item["name"] && item["name"].IsScalar()) owner = "job '" + item["name"].Scalar() + "'";
      Partial job = read_fields(item, at, owner, false);
      if (!item.IsMap()) continue;
      if (auto t = make_job(merge(base, job), at, owner)) templates.push_back(std::move(*t));
    }
  }

  std::vector<size_t> origin;
  for (size_t i = 0; i < templates.size(); ++i) {
    const size_t before = suite.jobs.size();
    expand_job(templates[i], suite.jobs);
    origin.resize(suite.jobs.size(), i);
    (void)before;
  }
  check_duplicates(suite.jobs, origin);
  check_file_names(suite, origin);

  std::vector<SuiteError> errors = d_.take();
  if (!errors.empty()) return Result::failure(std::move(errors));
  return Result::success(std::move(suite));
}

// ---------------------------------------------------------------------------------------------------
// The matrix (Note [Matrix expansion]).

std::optional<Combination> Loader::read_combination(const YAML::Node& node, const SourceLocation& where, const Field& f,
                                                    bool axes_only) {
  auto entries = r_.map(node, where, f, {});
  if (!entries) return std::nullopt;
  Combination c;
  bool ok = true;
  for (const auto& e : *entries) {
    std::vector<std::string> axes;
    for (const auto& [name, values] : matrix_.axes) axes.push_back(name);
    if (axes_only && std::find(axes.begin(), axes.end(), e.key) == axes.end()) {
      d_.error(e.key_at, "unknown matrix variable '" + e.key + "' in " + f.str() + suite::suggestion(e.key, axes, "variables"));
      ok = false;
      continue;
    }
    if (!is_variable_name(e.key) || std::count(reserved_variables.begin(), reserved_variables.end(), e.key)) {
      d_.error(e.key_at, f.str() + ": '" + e.key + "' cannot be a matrix variable (use letters, digits and _, "
                                                    "not suite_dir, workdir or attempt)");
      ok = false;
      continue;
    }
    if (!e.value.IsScalar()) {
      d_.error(e.value_at, (f / e.key).str() + ": expected a single value, got " + suite::describe(e.value));
      ok = false;
      continue;
    }
    c[e.key] = e.value.Scalar();
  }
  if (!ok) return std::nullopt;
  return c;
}

void Loader::read_matrix(const Entry& e) {
  const Field f{"", "matrix"};
  auto entries = r_.map(e.value, e.value_at, f, {});
  if (!entries) return;
  // Lists first: include and exclude refer to their variables wherever they are written.
  for (const auto& v : *entries) {
    if (v.key == "include" || v.key == "exclude") continue;
    if (!is_variable_name(v.key) || std::count(reserved_variables.begin(), reserved_variables.end(), v.key)) {
      d_.error(v.key_at, "matrix: '" + v.key + "' cannot be a matrix variable (use letters, digits and _, "
                                                "not suite_dir, workdir or attempt)");
      continue;
    }
    auto items = r_.list(v.value, v.value_at, f / v.key);
    if (!items) continue;
    if (items->empty()) {
      d_.error(v.value_at, (f / v.key).str() + ": the list is empty");
      continue;
    }
    std::vector<std::string> values;
    for (size_t i = 0; i < items->size(); ++i) {
      const YAML::Node& item = (*items)[i];
      if (!item.IsScalar()) {
        d_.error(d_.at(item), (f / v.key)[i].str() + ": expected a single value, got " + suite::describe(item));
        continue;
      }
      values.push_back(item.Scalar());
    }
    matrix_.axes.emplace_back(v.key, std::move(values));
  }
  for (const auto& v : *entries) {
    if (v.key != "include" && v.key != "exclude") continue;
    auto items = r_.list(v.value, v.value_at, f / v.key);
    if (!items) continue;
    for (size_t i = 0; i < items->size(); ++i) {
      const YAML::Node& item = (*items)[i];
      auto c = read_combination(item, d_.at(item), (f / v.key)[i], v.key == "exclude");
      if (!c) continue;
      (v.key == "include" ? matrix_.include : matrix_.exclude).push_back(std::move(*c));
    }
  }
  // The product is counted before it is built: ten lists of ten values are 10^10 jobs (Note [Suite limits]).
  uint64_t product = 1;
  std::string sizes;
  for (const auto& [name, values] : matrix_.axes) {
    product = values.size() && product > UINT64_MAX / values.size() ? UINT64_MAX : product * values.size();
    sizes += (sizes.empty() ? "" : " x ") + std::to_string(values.size());
  }
  const uint64_t total = product + matrix_.include.size();
  if (total > limits_.max_jobs) {
    d_.error(e.value_at, "matrix: " + (product == UINT64_MAX ? std::string("more than 2^64") : std::to_string(product)) +
                             " combinations (" + sizes + ") exceed the limit of " + std::to_string(limits_.max_jobs) +
                             " jobs; split the suite, or raise the limit with --max-jobs");
    too_many_jobs_ = true;
    matrix_variables_ = matrix_.variables();
    return;
  }
  combinations_ = suite::expand(matrix_);
  matrix_variables_ = matrix_.variables();
  if (combinations_.empty()) d_.error(e.value_at, "matrix: every combination is excluded; nothing would run");
}

// ---------------------------------------------------------------------------------------------------
// Job fields.

Partial Loader::read_fields(const YAML::Node& node, const SourceLocation& where, const std::string& owner, bool is_defaults) {
  Partial p;
  const Field f{owner, ""};
  // The keys, their readers and which belong to each job alone: the job table (Note [One table of job fields]).
  auto entries = r_.map(node, where, f, job_key_names());
  if (!entries) return p;
  for (const auto& e : *entries) {
    const JobKey* key = find_job_key(e.key);
    if (!key) continue;  // reported by map
    if (is_defaults && !key->in_defaults) {
      d_.error(e.key_at, "'" + e.key + "' cannot be in defaults: each job gives its own");
      continue;
    }
    const size_t before = d_.count();
    p.given.insert(e.key);
    (this->*key->read)(p, e, f / e.key);
    if (d_.count() > before) p.bad.insert(e.key);
  }
  return p;
}

void Loader::read_name(Partial& p, const Entry& e, const Field& f) {
  if (auto t = text(e, f, false)) p.fields.name = t->text;
}

void Loader::read_run(Partial& p, const Entry& e, const Field& f) {
  if (!e.value.IsScalar() && !e.value.IsSequence())
    d_.error(e.value_at, f.str() + ": expected a command (a string or a list of strings), got " + describe(e.value));
  else p.run = e;
}

void Loader::read_shell(Partial& p, const Entry& e, const Field& f) { p.fields.shell = r_.boolean(e, f); }

void Loader::read_cwd(Partial& p, const Entry& e, const Field& f) {
  if (auto t = text(e, f, true)) p.fields.cwd = t->text;
}

void Loader::read_timeout(Partial& p, const Entry& e, const Field& f) {
  auto v = r_.duration(e, f);
  if (v && *v <= 0) {
    d_.error(e.value_at, f.str() + ": must be longer than 0, got '" + e.value.Scalar() + "'");
    v.reset();
  }
  p.fields.timeout = v;
}

void Loader::read_grace(Partial& p, const Entry& e, const Field& f) { p.fields.grace = r_.duration(e, f); }

void Loader::read_device(Partial& p, const Entry& e, const Field& f) {
  if (auto m = r_.choice(e.value, e.value_at, f, names_of(kDevices), "device"))
    p.fields.device = device_choice_from_name(*m);
}

void Loader::read_probe(Partial& p, const Entry& e, const Field& f) {
  if (auto m = r_.choice(e.value, e.value_at, f, probe_modes, "probe mode")) p.fields.probe = probe_mode_from_name(*m);
}

void Loader::read_faults(Partial& p, const Entry& e, const Field& f) { p.fields.faults = fault_list(e, f); }

void Loader::read_expect(Partial& p, const Entry& e, const Field& f) {
  auto items = r_.list(e.value, e.value_at, f);
  if (!items) {
    p.fields.expect.reset();
    return;
  }
  std::vector<ExpectSpec> out;
  for (size_t i = 0; i < items->size(); ++i)
    if (auto spec = read_expect_item((*items)[i], f[i])) out.push_back(std::move(*spec));
  p.fields.expect = std::move(out);
}

void Loader::read_target_step(Partial& p, const Entry& e, const Field& f) { p.fields.target_step = r_.integer(e, f, 0); }

void Loader::read_step_base(Partial& p, const Entry& e, const Field& f) {  // Note [Step numbering] in job_fields.cpp
  if (auto b = r_.integer(e, f, 0)) {
    if (*b > 1) d_.error(e.value_at, f.str() + ": the number of the code's first step is 0 or 1, got '" + e.value.Scalar() + "'");
    else p.fields.step_base = static_cast<int>(*b);
  }
}

void Loader::read_ranks(Partial& p, const Entry& e, const Field& f) {
  if (auto n = r_.integer(e, f, 1)) {
    if (*n > kMaxRanks) d_.error(e.value_at, f.str() + ": at most " + std::to_string(kMaxRanks) + " ranks, got '" + e.value.Scalar() + "'");
    else p.fields.ranks = static_cast<int>(*n);
  }
}

// Note [Ranks on several nodes] in runner/src/exec/node_group.h: a job's ranks spread over `nodes`, each node
// running `ranks_per_node` of them (the Slurm backend only).
void Loader::read_nodes(Partial& p, const Entry& e, const Field& f) {
  if (auto n = r_.integer(e, f, 1)) {
    if (*n > kMaxNodes) d_.error(e.value_at, f.str() + ": at most " + std::to_string(kMaxNodes) + " nodes, got '" + e.value.Scalar() + "'");
    else p.fields.nodes = static_cast<int>(*n);
  }
}

void Loader::read_ranks_per_node(Partial& p, const Entry& e, const Field& f) {
  if (auto n = r_.integer(e, f, 1)) {
    if (*n > kMaxRanks)
      d_.error(e.value_at, f.str() + ": at most " + std::to_string(kMaxRanks) + " ranks per node, got '" + e.value.Scalar() + "'");
    else p.fields.ranks_per_node = static_cast<int>(*n);
  }
}

void Loader::read_env(Partial& p, const Entry& e, const Field& f) {
  auto entries = r_.map(e.value, e.value_at, f, {});
  if (!entries) return;
  for (const auto& v : *entries) {
    if (!is_variable_name(v.key)) {
      d_.error(v.key_at, f.str() + ": '" + v.key + "' is not a valid environment variable name");
      continue;
    }
    // Numbers and booleans are kept as written (`1`, `true`): the environment holds text.
    if (!v.value.IsScalar() || v.value.IsNull()) {
      d_.error(v.value_at, (f / v.key).str() + ": expected a value (text, a number or true/false), got " +
                               suite::describe(v.value) + (v.value.IsNull() ? " (write \"\" for an empty value)" : ""));
      continue;
    }
    if (auto t = text(v, f / v.key, true)) p.fields.env[v.key] = t->text;
  }
}

void Loader::read_observe(Partial& p, const Entry& e, const Field& f) {
  auto entries = r_.map(e.value, e.value_at, f, {});
  if (!entries) return;
  for (const auto& v : *entries) {
    const Field vf = f / v.key;
    if (!check_name(v.key, v.key_at, f.str() + ": the key")) continue;
    auto pattern = r_.string(v, vf);
    if (!pattern) continue;
    // The runner matches with RE2 (exec/output.cpp), so the same engine, with the same options, checks
    // the pattern here.
    if (pattern->size() > suite::kMaxPatternBytes) {
      d_.error(v.value_at, vf.str() + ": the pattern is " + std::to_string(pattern->size()) + " bytes; a pattern has at most " +
                               std::to_string(suite::kMaxPatternBytes));
      continue;
    }
    const RE2 re(*pattern, observe_options());
    if (!re.ok()) {
      d_.error(v.value_at, vf.str() + ": bad regular expression '" + suite::printable(*pattern) + "': " +
                               suite::printable(re.error(), 200));
      continue;
    }
    if (re.NumberOfCapturingGroups() != 1) {
      d_.error(v.value_at, vf.str() + ": the pattern '" + suite::printable(*pattern) + "' has " +
                               std::to_string(re.NumberOfCapturingGroups()) +
                               " capture groups; it needs exactly one, around the value (use (?:...) for other groups)");
      continue;
    }
    p.fields.observe.push_back(ObserveSpec{v.key, *pattern, v.value_at});
  }
}

std::optional<CapChange> Loader::read_cap_change(const YAML::Node& node, const SourceLocation& where, const Field& f) {
  auto entries = r_.map(node, where, f, schedule_keys);
  if (!entries) return std::nullopt;
  CapChange c;
  bool has_at = false, has_limit = false, ok = true;
  for (const auto& e : *entries) {
    if (e.key == "limit") {
      has_limit = true;
      if (auto v = r_.size(e, f / "limit")) c.limit = *v;
      else ok = false;
      continue;
    }
    has_at = true;
    auto at = r_.map(e.value, e.value_at, f / "at", at_keys);
    if (!at) { ok = false; continue; }
    if (at->size() != 1) {
      d_.error(e.value_at, (f / "at").str() + ": give exactly one of 'step' and 'after'");
      ok = false;
      continue;
    }
    const Entry& a = (*at)[0];
    if (a.key == "step") {
      if (auto s = r_.integer(a, f / "at" / "step", 0)) c.at_step = *s;
      else ok = false;
    } else if (auto t = r_.duration(a, f / "at" / "after")) {
      c.at_seconds = *t;
    } else {
      ok = false;
    }
  }
  if (!has_at) d_.error(where, f.str() + ": missing 'at' (write at: {step: N} or at: {after: 30s})");
  if (!has_limit) d_.error(where, f.str() + ": missing 'limit'");
  if (!ok || !has_at || !has_limit) return std::nullopt;
  return c;
}

void Loader::read_memory(Partial& p, const Entry& e, const Field& f) {
  auto entries = r_.map(e.value, e.value_at, f, memory_keys);
  if (!entries) return;
  for (const auto& v : *entries) {
    const Field vf = f / v.key;
    if (v.key == "limit") p.fields.memory.limit = r_.size(v, vf);
    else if (v.key == "counts") {
      if (auto c = r_.choice(v.value, v.value_at, vf, suite::cap_counting_names(), "way of counting a cap"))
        p.fields.memory.counts_footprint = suite::cap_counts_footprint(*c);
    } else if (v.key == "reserve") p.fields.memory.reserve = r_.size(v, vf);
    else if (v.key == "leave") p.fields.memory.leave = r_.size(v, vf);
    else if (v.key == "reserve_chunk") {
      auto& chunk = p.fields.memory.reserve_chunk;
      chunk = r_.size(v, vf);
      if (chunk && *chunk == 0) {
        d_.error(v.value_at, vf.str() + ": must be larger than 0");
        chunk.reset();
      }
    } else if (v.key == "snapshot") p.fields.memory.snapshot = r_.boolean(v, vf);
    else if (v.key == "per") {
      auto per = r_.choice(v.value, v.value_at, vf, cap_scopes, "cap scope");
      if (per && *per == "job")
        d_.error(v.value_at, vf.str() + ": a cap for the job's ranks together is not supported: each rank's shim counts its "
                                        "own bytes against `limit`; give each rank its share of the job's memory (`per: rank`)");
    }
    else if (v.key == "schedule") {
      auto items = r_.list(v.value, v.value_at, vf);
      if (!items) continue;
      std::vector<CapChange> schedule;
      for (size_t i = 0; i < items->size(); ++i)
        if (auto c = read_cap_change((*items)[i], d_.at((*items)[i]), vf[i])) schedule.push_back(*c);
      p.fields.memory.schedule = std::move(schedule);
    }
  }
}

// Note [One rule schema]: the YAML is only translated into the rule's JSON; the shim's parser decides,
// and its problem is reported at the node it names.
std::optional<std::vector<FaultSpec>> Loader::fault_list(const Entry& e, const Field& f) {
  auto items = r_.list(e.value, e.value_at, f);
  if (!items) return std::nullopt;
  std::vector<FaultSpec> faults;
  std::unordered_map<std::string, int> fault_lines;  // name -> line, for a repeated name
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const SourceLocation at = d_.at(item);
    const Field ff = f[i];
    auto entries = r_.map(item, at, ff, suite::rule_keys_at({}));
    if (!entries) continue;
    FaultSpec spec;
    spec.name = "fault-" + std::to_string(i + 1);
    spec.where = at;
    nlohmann::json rule = nlohmann::json::object();
    bool ok = true;
    for (const auto& v : *entries) {
      if (v.key == "name") {
        auto n = r_.string(v, ff / "name");
        if (!n || !check_name(*n, v.value_at, (ff / "name").str())) { ok = false; continue; }
        spec.name = *n;
        auto [dup, fresh] = fault_lines.emplace(*n, at.line);
        if (!fresh)
          d_.error(v.value_at, (ff / "name").str() + ": another fault is already named '" + *n + "' (at line " +
                                   std::to_string(dup->second) + ")");
      } else {
        // Repeated keys are lost in translation: the reader reports them first.
        if (v.value.IsMap() && !r_.map(v.value, v.value_at, ff / v.key, {})) { ok = false; continue; }
        rule[v.key] = suite::to_json(v.value);
      }
    }
    if (!ok) continue;
    rule["name"] = spec.name;
    Expected<nlohmann::json> checked = check_fault_rule(rule);
    if (!checked) {
      report_rule_problem(std::move(checked.error()), item, ff);
      continue;
    }
    spec.rule = std::move(checked.value());
    faults.push_back(std::move(spec));
  }
  return faults;
}

// Points at the node the shim's parser named (its path is data: Note [One result type]): the misspelt key
// itself, or the deepest value on its path.
void Loader::report_rule_problem(Error problem, const YAML::Node& item, const Field& f) {
  const bool unknown_key = problem.kind == Error::Kind::unknown_key && !problem.path.empty();
  const size_t depth = problem.path.size() - (unknown_key ? 1 : 0);
  YAML::Node node(item);  // rebound with reset(), never assigned (Note [yaml-cpp assignment])
  Field field = f;
  for (size_t i = 0; i < depth; ++i) {
    const std::string& part = problem.path[i];
    const bool index = !part.empty() && std::isdigit(static_cast<unsigned char>(part[0]));
    if (index && node.IsSequence() && std::stoul(part) < node.size()) {
      YAML::Node next = node[std::stoul(part)];
      node.reset(next);
      field = field[std::stoul(part)];
    } else if (!index && node.IsMap() && node[part]) {
      YAML::Node next = node[part];
      node.reset(next);
      field = field / part;
    } else {
      break;
    }
  }
  if (unknown_key && node.IsMap()) {
    const std::string& key = problem.path.back();
    for (auto it = node.begin(); it != node.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == key) {
        d_.error(d_.at(it->first), "unknown key '" + key + "' in " + field.str() + problem.suggestion);
        return;
      }
  }
  d_.error(d_.at(node), field.str() + ": " + problem.message + problem.suggestion);
}

void Loader::read_restart(Partial& p, const Entry& e, const Field& f) {
  auto entries = r_.map(e.value, e.value_at, f, restart_keys);
  if (!entries) return;
  for (const auto& v : *entries) {
    const Field vf = f / v.key;
    if (v.key == "max") {
      if (auto n = r_.integer(v, vf, 0)) {
        if (*n > 1000) d_.error(v.value_at, vf.str() + ": at most 1000 restarts, got '" + v.value.Scalar() + "'");
        else p.fields.restart.max = static_cast<int>(*n);
      }
    } else if (v.key == "clear_faults") {
      p.fields.restart.clear_faults = r_.boolean(v, vf);
    } else if (v.key == "scope") {
      auto scope = r_.choice(v.value, v.value_at, vf, restart_scopes, "restart scope");
      if (scope && *scope == "rank")
        d_.error(v.value_at, vf.str() + ": restarting one rank alone is not supported (its peers would wait in a collective "
                                        "for a process that starts over); 'all' restarts every rank together");
    } else {
      std::vector<YAML::Node> reasons;
      if (v.value.IsSequence()) for (const auto& n : v.value) reasons.push_back(n);
      else reasons.push_back(v.value);
      std::vector<std::string> on;
      bool ok = true;
      for (size_t i = 0; i < reasons.size(); ++i) {
        const SourceLocation at = v.value.IsSequence() ? d_.at(reasons[i]) : v.value_at;
        auto reason = r_.choice(reasons[i], at, v.value.IsSequence() ? vf[i] : vf, restart_reasons, "restart reason");
        if (reason) on.push_back(*reason);
        else ok = false;
      }
      if (ok) p.fields.restart.on = on;
    }
  }
}

// `sweep:` {step: 3 | "2,5" | "2..4", modes: [transient, persistent], transient_times: 2} (docs/sweep.md).
void Loader::read_sweep(Partial& p, const Entry& e, const Field& f) {
  auto entries = r_.map(e.value, e.value_at, f, sweep_keys);
  if (!entries) return;
  SweepSpec spec;
  bool ok = true, has_step = false;
  for (const auto& v : *entries) {
    const Field vf = f / v.key;
    if (v.key == "step") {
      has_step = true;
      std::string text = v.value.IsScalar() ? v.value.Scalar() : std::string();
      // Steps from 1: "3", "2,5", "2..4", "2..4,7".
      static const std::regex steps(R"(^ *[1-9][0-9]{0,11}( *\.\. *[1-9][0-9]{0,11})?( *, *[1-9][0-9]{0,11}( *\.\. *[1-9][0-9]{0,11})?)* *$)");
      if (text.size() > 200 || !std::regex_match(text, steps)) {  // bounded: std::regex recurses per character
        d_.error(v.value_at, vf.str() + ": expected a step from 1, or steps like 2,5 or 2..4, got '" + text + "'");
        ok = false;
      } else {
        spec.steps = text;
      }
    } else if (v.key == "modes") {
      std::vector<YAML::Node> items;
      if (v.value.IsSequence()) for (const auto& n : v.value) items.push_back(n);
      else items.push_back(v.value);
      for (size_t i = 0; i < items.size(); ++i) {
        const SourceLocation at = v.value.IsSequence() ? d_.at(items[i]) : v.value_at;
        auto mode = r_.choice(items[i], at, v.value.IsSequence() ? vf[i] : vf, sweep_modes, "sweep mode");
        if (mode) spec.modes.push_back(*mode);
        else ok = false;
      }
    } else {
      auto n = r_.integer(v, vf, 1);
      if (n && *n > 1000) {
        d_.error(v.value_at, vf.str() + ": at most 1000 failures in a row, got '" + v.value.Scalar() + "'");
        ok = false;
      } else if (n) {
        spec.transient_times = static_cast<int>(*n);
      } else {
        ok = false;
      }
    }
  }
  if (!has_step) {
    d_.error(e.value_at, f.str() + ": needs `step`, the training step whose allocation sites are swept");
    ok = false;
  }
  if (ok) p.fields.sweep = spec;
}

// `expect:` items: `- policy`, `- policy: scalar` (when the policy takes one), `- policy: {arg: value}`.
std::optional<ExpectSpec> Loader::read_expect_item(const YAML::Node& item, const Field& f) {
  const SourceLocation at = d_.at(item);
  // Rebound with reset(), never assigned (Note [yaml-cpp assignment]).
  YAML::Node name_node(item), args_node;
  SourceLocation name_at = at, args_at = at;
  bool must_fail = false;
  if (item.IsMap()) {
    // Besides the policy, an item may say `must_fail: true` (a broken trainer kept to show the check
    // catches it: suites/self-test.yaml).
    std::vector<std::string> keys;
    YAML::Node policy_key, policy_value;
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (key == "must_fail") {
        bool ok = false;
        if (it->second.IsScalar()) {
          const std::string& v = it->second.Scalar();
          if (v == "true" || v == "false") { must_fail = v == "true"; ok = true; }
        }
        if (!ok) {
          d_.error(d_.at(it->second), f.str() + ": must_fail: expected true or false, got " + suite::describe(it->second));
          return std::nullopt;
        }
        continue;
      }
      keys.push_back("'" + key + "'");
      policy_key.reset(it->first);
      policy_value.reset(it->second);
    }
    if (keys.size() != 1) {
      d_.error(at, f.str() + ": each item names one policy (and may add must_fail), got " + std::to_string(keys.size()) +
                       " policy keys (" + suite::join(keys) +
                       "); write them as separate items, or indent the arguments under the policy");
      return std::nullopt;
    }
    name_node.reset(policy_key);
    args_node.reset(policy_value);
    name_at = d_.at(name_node);
    args_at = args_node.IsNull() ? name_at : d_.at(args_node);
  }
  if (!name_node.IsScalar() || name_node.IsNull()) {
    d_.error(at, f.str() + ": expected a policy name or 'policy: arguments', got " + suite::describe(item));
    return std::nullopt;
  }
  const std::string name = name_node.Scalar();
  const PolicyInfo* policy = find_policy(name);
  if (!policy) {
    d_.error(name_at, "unknown policy '" + name + "' in " + f.str() + suite::suggestion(name, policy_names(), "policies"));
    return std::nullopt;
  }
  ExpectSpec spec{name, nlohmann::json::object(), at, must_fail};
  std::vector<std::string> arg_names;
  for (const auto& a : policy->args) arg_names.push_back(a.name);
  std::map<std::string, SourceLocation> arg_at;
  if (args_node && args_node.IsMap()) {
    auto entries = r_.map(args_node, args_at, f, {});
    if (!entries) return std::nullopt;
    if (entries->size() != args_node.size()) return std::nullopt;  // a repeated argument, reported
    bool ok = true;
    for (const auto& e : *entries) {
      if (std::find(arg_names.begin(), arg_names.end(), e.key) == arg_names.end()) {
        d_.error(e.key_at, "unknown argument '" + e.key + "' for policy '" + name + "' in " + f.str() +
                               (arg_names.empty() ? std::string(" (it takes none)")
                                                  : suite::suggestion(e.key, arg_names, "arguments")));
        ok = false;
        continue;
      }
      spec.args[e.key] = suite::to_json(e.value);
      arg_at[e.key] = e.value_at;
    }
    if (!ok) return std::nullopt;
  } else if (args_node && !args_node.IsNull()) {
    // A bare value: the registry takes it as the first argument when the policy allows (`- exit: 0`).
    spec.args = suite::to_json(args_node);
    if (!arg_names.empty()) arg_at[arg_names[0]] = args_at;
  }
  Expected<nlohmann::json> normalised = normalise_args(*policy, std::move(spec.args));
  if (!normalised) {
    // {"reference", "metric"}: point at the outermost argument written in the file (Note [A policy
    // argument's error] in registry.h: the message names the argument already).
    const Error& err = normalised.error();
    auto it = err.path.empty() ? arg_at.end() : arg_at.find(err.path.front());
    d_.error(it != arg_at.end() ? it->second : args_at, f.str() + ": " + err.message);
    return std::nullopt;
  }
  spec.args = std::move(normalised).value();
  return spec;
}

// ---------------------------------------------------------------------------------------------------
// Templates (Note [Suite templates]).

std::vector<std::string> Loader::variables(bool runtime_allowed) const {
  std::vector<std::string> out = matrix_variables_;
  out.push_back("suite_dir");
  if (runtime_allowed) {
    out.push_back("workdir");
    out.push_back("attempt");
  }
  return out;
}

bool Loader::check_template(const Text& t, const Field& f, bool runtime_allowed) {
  const Expected<std::vector<std::string>> scan = suite::scan_template(t.text);
  if (!scan) {
    d_.error(t.where, f.str() + ": " + scan.error().str());
    return false;
  }
  const std::vector<std::string> known = variables(runtime_allowed);
  for (const auto& v : *scan) {
    if (std::find(known.begin(), known.end(), v) != known.end()) continue;
    if (!runtime_allowed && suite::is_runtime_variable(v)) {
      d_.error(t.where, f.str() + ": '{" + v + "}' is only known while the job runs, so it cannot be used here");
      return false;
    }
    const std::string near = suite::nearest_name(v, known);
    std::string message = "unknown variable '{" + v + "}' in " + f.str();
    if (!near.empty()) message += " (did you mean '{" + near + "}'?)";
    std::vector<std::string> braced;
    for (const auto& k : known) braced.push_back("{" + k + "}");
    d_.error(t.where, message + "; variables: " + suite::join(braced));
    return false;
  }
  return true;
}

std::optional<Text> Loader::text(const Entry& e, const Field& f, bool runtime_allowed) {
  auto s = r_.string(e, f);
  if (!s) return std::nullopt;
  Text t{*s, e.value_at};
  if (!check_template(t, f, runtime_allowed)) return std::nullopt;
  return t;
}

// ---------------------------------------------------------------------------------------------------
// Jobs.

std::optional<std::vector<Text>> Loader::command(const Entry& run, bool shell, const Field& f) {
  std::vector<Text> argv;
  if (run.value.IsSequence()) {
    if (shell) {
      d_.error(run.value_at, f.str() + ": with 'shell: true', run must be one string, not a list");
      return std::nullopt;
    }
    size_t i = 0;
    bool ok = true;
    for (const auto& item : run.value) {
      const SourceLocation at = d_.at(item);
      if (!item.IsScalar() || item.IsNull()) {
        d_.error(at, f[i].str() + ": expected a string, got " + suite::describe(item));
        ok = false;
      } else {
        Text t{item.Scalar(), at};
        ok = check_template(t, f[i], true) && ok;
        argv.push_back(t);
      }
      ++i;
    }
    if (!ok) return std::nullopt;
  } else {
    Text t{run.value.Scalar(), run.value_at};
    if (!check_template(t, f, true)) return std::nullopt;
    if (shell) {
      argv = {Text{"/bin/sh", t.where}, Text{"-c", t.where}, t};
    } else {
      const Expected<std::vector<std::string>> words = suite::split_shell_words(t.text);
      if (!words) {
        d_.error(t.where, f.str() + ": " + words.error().str() + " in \"" + t.text + "\"");
        return std::nullopt;
      }
      for (const auto& w : *words) argv.push_back(Text{w, t.where});
    }
  }
  if (argv.empty() || (shell && argv[2].text.find_first_not_of(" \t\n") == std::string::npos)) {
    d_.error(run.value_at, f.str() + ": the command is empty");
    return std::nullopt;
  }
  return argv;
}

std::optional<Loader::JobTemplate> Loader::make_job(Partial job, const SourceLocation& where, const std::string& owner) {
  const Field f{owner, ""};
  bool ok = !job.bad.count("name");
  if (!job.given.count("name")) {
    d_.error(where, owner + ": missing 'name'");
    ok = false;
  }
  if (!job.given.count("run")) d_.error(where, owner + ": missing 'run' (the command to run, e.g. run: python train.py)");
  // `reserve` and `leave` are two ways to say how much the sidecar holds (either may come from defaults).
  const suite::JobFields::Memory& memory = job.fields.memory;
  if (memory.reserve && *memory.reserve > 0 && memory.leave) {
    d_.error(where, owner + ": memory: give 'reserve' (bytes to hold) or 'leave' (bytes to keep free), not both");
    ok = false;
  }
  // `ranks` is the job's ranks in all, nodes x ranks_per_node (Note [Ranks on several nodes] in
  // runner/src/exec/node_group.h): the three made to agree here, once, so that each row builds its own member.
  suite::JobFields& jf = job.fields;
  if (jf.nodes || jf.ranks_per_node) {
    const int nodes = jf.nodes.value_or(1);
    if (jf.ranks && jf.ranks_per_node && *jf.ranks != nodes * *jf.ranks_per_node) {
      d_.error(where, owner + ": ranks: " + std::to_string(*jf.ranks) + " is not nodes x ranks_per_node (" + std::to_string(nodes) +
                          " x " + std::to_string(*jf.ranks_per_node) + "): give nodes and ranks_per_node, or ranks alone");
      ok = false;
    } else if (jf.ranks_per_node) {
      jf.ranks = nodes * *jf.ranks_per_node;
    } else if (jf.ranks && *jf.ranks % nodes == 0) {
      jf.ranks_per_node = *jf.ranks / nodes;
    } else {
      d_.error(where, owner + ": nodes: " + std::to_string(nodes) + " needs ranks_per_node (the ranks each node runs)" +
                          (jf.ranks ? ": ranks: " + std::to_string(*jf.ranks) + " cannot be spread evenly over them" : ""));
      ok = false;
    }
  }
  if (memory.leave && memory.reserve_chunk) {
    d_.error(where, owner + ": memory.reserve_chunk fragments a 'reserve'; with 'leave' nothing is left to fragment into");
    ok = false;
  }
  // Note [Step numbering]: a fault's steps are in the job's numbering, which `defaults` may set.
  if (job.fields.faults)
    for (size_t i = 0; i < job.fields.faults->size(); ++i) {
      const FaultSpec& fault = (*job.fields.faults)[i];
      if (auto problem = steps_before_first(fault.rule, job.fields.step_base.value_or(1))) {
        Field at = (f / "faults")[i];
        for (const std::string& part : problem->path) at = at / part;
        d_.error(fault.where, at.str() + ": " + problem->message);
        ok = false;
      }
    }
  if (!job.run || job.bad.count("run") || job.bad.count("shell")) return std::nullopt;
  auto argv = command(*job.run, job.fields.shell.value_or(false), f / "run");
  if (!argv || !ok) return std::nullopt;
  // Note [A command that starts torchrun]: on several nodes, what torchrun is asked for must be the job's.
  if (jf.nodes && *jf.nodes > 1) {
    std::vector<std::string> words;
    for (const Text& a : *argv) words.push_back(a.text);
    if (auto tr = suite::torchrun_command(words))
      if (auto problem = suite::torchrun_contradiction(*tr, *jf.nodes, jf.ranks_per_node.value_or(1), jf.env.count("PET_NNODES") > 0,
                                                       jf.env.count("PET_NPROC_PER_NODE") > 0)) {
        d_.error(job.run->value_at, (f / "run").str() + ": " + *problem);
        return std::nullopt;
      }
  }
  JobTemplate t;
  t.name = *job.fields.name;
  t.where = where;
  t.shell = job.fields.shell.value_or(false);
  t.argv = std::move(*argv);
  t.fields = std::move(job);
  return t;
}

JobSpec Loader::instantiate(const JobTemplate& t, const Combination& combination) {
  std::map<std::string, std::string> values(combination.begin(), combination.end());
  values["suite_dir"] = dir_;
  // Only the templated fields change per combination; build_job does the rest (Note [Job fields]).
  suite::JobFields f = t.fields.fields;
  f.name = suite::expand_template(t.name, values, false);
  f.argv.emplace();
  for (const auto& a : t.argv) f.argv->push_back(suite::expand_template(a.text, values, true));
  f.shell = t.shell;
  for (auto& [key, value] : f.env) value = suite::expand_template(value, values, true);
  if (f.cwd) {
    std::string cwd = suite::expand_template(*f.cwd, values, true);
    // A relative cwd is the suite's directory's child; `{workdir}...` is absolute once the launcher fills it.
    if (!cwd.empty() && cwd[0] != '/' && cwd.rfind("{workdir}", 0) != 0)
      cwd = (std::filesystem::path(suite::expand_template("{suite_dir}", values, true)) / cwd).lexically_normal().string();
    f.cwd = cwd;
  }
  JobSpec job = suite::build_job(f);
  job.matrix = combination;
  job.where = t.where;
  return job;
}

void Loader::expand_job(const JobTemplate& t, std::vector<JobSpec>& out) {
  std::set<std::string> used;
  auto collect = [&](const std::string& s) {
    const Expected<std::vector<std::string>> scan = suite::scan_template(s);
    if (!scan) return;  // reported by check_template
    for (const auto& v : *scan)
      if (std::find(matrix_variables_.begin(), matrix_variables_.end(), v) != matrix_variables_.end()) used.insert(v);
  };
  collect(t.name);
  for (const auto& a : t.argv) collect(a.text);
  for (const auto& [key, value] : t.fields.fields.env) collect(value);
  if (t.fields.fields.cwd) collect(*t.fields.fields.cwd);
  if (too_many_jobs_) return;
  std::vector<Combination> combinations = used.empty() ? std::vector<Combination>{{}} : suite::project(combinations_, used);
  if (out.size() + combinations.size() > limits_.max_jobs) {
    d_.error(t.where, "the suite expands to more than " + std::to_string(limits_.max_jobs) +
                          " jobs; split the suite, or raise the limit with --max-jobs");
    too_many_jobs_ = true;
    return;
  }
  for (const auto& c : combinations) {
    out.push_back(instantiate(t, c));
    if (!check_name(out.back().name, t.where, "the job's name")) {
      out.pop_back();
      break;  // one message per job entry: the other combinations say the same
    }
    // Every rule was checked alone; the plan as the shim gets it is checked whole, once per job entry.
    if (&c == &combinations.front())
      if (auto problem = suite::check_fault_plan(out.back().plan()))
        d_.error(t.where, "the job's fault plan is not one the shim accepts: " + *problem);
  }
}

namespace {
std::string describe_combination(const Combination& c) {
  std::string out;
  for (const auto& [key, value] : c) out += (out.empty() ? "" : ", ") + key + "='" + value + "'";
  return out;
}
}  // namespace

bool Loader::check_name(const std::string& name, const SourceLocation& where, const std::string& what) {
  auto problem = suite::name_problem(name);
  if (!problem) return true;
  d_.error(where, what + " '" + suite::printable(name) + "' " + *problem);
  return false;
}

// A job's folder is OUT/jobs/SUITE::JOB (one file name, job_dir_name in job_runner.h keeps its length): a
// suite name and a job name each within kMaxNameBytes can still make it longer than the system allows,
// and then every job errs with "File name too long" at run time. Said here, at the job, once per entry.
void Loader::check_file_names(const Suite& suite, const std::vector<size_t>& origin) {
  constexpr size_t kMaxFileName = NAME_MAX;  // 255 bytes on Linux's file systems
  constexpr size_t kSuffix = 4;              // room for run's "#N" when two suites share a name
  std::set<size_t> reported;
  for (size_t i = 0; i < suite.jobs.size(); ++i) {
    const JobSpec& job = suite.jobs[i];
    const size_t length = suite.name.size() + kSuffix + 2 + job.name.size();
    if (length <= kMaxFileName) continue;
    if (i < origin.size() && !reported.insert(origin[i]).second) continue;
    d_.error(job.where, "the job's name '" + suite::printable(job.name) + "' with the suite's name '" +
                            suite::printable(suite.name) + "' makes its folder's name (jobs/SUITE::JOB) " +
                            std::to_string(length - kSuffix) + " bytes long, over the " + std::to_string(kMaxFileName - kSuffix) +
                            " bytes a file name may have here: shorten one of them");
  }
}

// One pass with a map from each name to its first job: 40,000 jobs took 19.6 s comparing every pair.
void Loader::check_duplicates(const std::vector<JobSpec>& jobs, const std::vector<size_t>& origin) {
  std::set<size_t> reported;  // one message per job entry, not one per combination
  std::unordered_map<std::string_view, size_t> first;
  first.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto [it, fresh] = first.emplace(jobs[i].name, i);
    if (fresh || reported.count(origin[i])) continue;
    const size_t j = it->second;
    reported.insert(origin[i]);
    std::string message = "duplicate job name '" + jobs[i].name + "'";
    if (origin[i] == origin[j])
      message += ": the matrix gives it twice (" + describe_combination(jobs[j].matrix) + " and " +
                 describe_combination(jobs[i].matrix) + "); put the matrix variables in the name";
    else
      message += " (first at line " + std::to_string(jobs[j].where.line) + ")";
    d_.error(jobs[i].where, message);
  }
  // Note [One job, one folder] in limits.h: names that differ only where a folder name cannot keep them
  // ("train ok", "train_ok") would get folders told apart by a hash alone.
  std::unordered_map<std::string, size_t> keys;
  keys.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto [it, fresh] = keys.emplace(suite::folder_key(jobs[i].name), i);
    const size_t j = it->second;
    if (fresh || jobs[j].name == jobs[i].name || reported.count(origin[i])) continue;
    reported.insert(origin[i]);
    std::string message = "job name '" + suite::printable(jobs[i].name) + "' is the same as '" + suite::printable(jobs[j].name) +
                          "' once made a folder name ('" + suite::printable(it->first) + "')";
    if (origin[i] == origin[j])
      message += ": the matrix gives both (" + describe_combination(jobs[j].matrix) + " and " +
                 describe_combination(jobs[i].matrix) + "); put values that differ in more than punctuation in the name";
    else
      message += " (first at line " + std::to_string(jobs[j].where.line) + "); rename one of them";
    d_.error(jobs[i].where, message);
  }
}

}  // namespace oomh::suite

namespace oomh {

Expected<Suite, std::vector<SuiteError>> load_suite_text(const std::string& text, const std::string& file_name,
                                                         const std::string& dir, const SuiteLimits& limits) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(dir.empty() ? "." : dir, ec);
  const std::string abs_dir = ec ? dir : absolute.lexically_normal().string();
  std::string stem = std::filesystem::path(file_name).stem().string();
  suite::Loader loader(file_name, abs_dir.size() > 1 && abs_dir.back() == '/' ? abs_dir.substr(0, abs_dir.size() - 1) : abs_dir,
                limits);
  return loader.load(text, stem);
}

Expected<Suite, std::vector<SuiteError>> load_suite(const std::string& path, const SuiteLimits& limits) {
  // A regular file within the size limit, opened once (no is_directory() that throws on a symlink loop).
  suite::FileText file = suite::read_suite_file(path);
  if (file.error) return Expected<Suite, std::vector<SuiteError>>::failure({std::move(*file.error)});
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return load_suite_text(*file.text, path, dir, limits);
}

}  // namespace oomh
