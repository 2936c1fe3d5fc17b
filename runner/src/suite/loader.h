#pragma once
// The suite loader's state and passes (load.cpp: Note [Suite validation]), in a header so that the job
// table (job_table.cpp: Note [One table of job fields]) can name the reader of each job key.

#include <optional>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "oomharness/expected.h"
#include "oomharness/runner/suite.h"
#include "suite/fault_rule.h"
#include "suite/job_fields.h"
#include "suite/matrix.h"
#include "suite/reader.h"

namespace oomh::suite {

// A string that may name template variables, with where it came from.
struct Text {
  std::string text;
  SourceLocation where;
};

// One job's fields (or the defaults') as the file gives them (Note [Job fields]), with what only the
// reading needs: the command, split once `shell` is known (defaults may set it), and which keys were
// written and which had errors.
struct Partial {
  JobFields fields;
  std::optional<Entry> run;
  std::set<std::string> given;  // keys written, valid or not
  std::set<std::string> bad;    // keys whose value had an error (reported): later checks skip them
};

// `over` laid over `base`.
Partial merge(Partial base, const Partial& over);

class Loader {
 public:
  Loader(const std::string& file, const std::string& dir, const SuiteLimits& limits)
      : d_(file), r_(d_), dir_(dir), limits_(limits) {}

  Expected<Suite, std::vector<SuiteError>> load(const std::string& text, const std::string& default_name);

  // The YAML readers of the job table, one per key (job_table.cpp): each reads `e`, the key's entry, into
  // `p`, reporting its problems at `f` (the key's field, "timeout of job 'a'").
  void read_name(Partial& p, const Entry& e, const Field& f);
  void read_run(Partial& p, const Entry& e, const Field& f);
  void read_shell(Partial& p, const Entry& e, const Field& f);
  void read_cwd(Partial& p, const Entry& e, const Field& f);
  void read_env(Partial& p, const Entry& e, const Field& f);
  void read_timeout(Partial& p, const Entry& e, const Field& f);
  void read_grace(Partial& p, const Entry& e, const Field& f);
  void read_probe(Partial& p, const Entry& e, const Field& f);
  void read_device(Partial& p, const Entry& e, const Field& f);
  void read_observe(Partial& p, const Entry& e, const Field& f);
  void read_memory(Partial& p, const Entry& e, const Field& f);
  void read_faults(Partial& p, const Entry& e, const Field& f);
  void read_restart(Partial& p, const Entry& e, const Field& f);
  void read_expect(Partial& p, const Entry& e, const Field& f);
  void read_target_step(Partial& p, const Entry& e, const Field& f);
  void read_step_base(Partial& p, const Entry& e, const Field& f);
  void read_ranks(Partial& p, const Entry& e, const Field& f);
  void read_nodes(Partial& p, const Entry& e, const Field& f);
  void read_ranks_per_node(Partial& p, const Entry& e, const Field& f);
  void read_sweep(Partial& p, const Entry& e, const Field& f);

 private:
  // pass 1
  void read_matrix(const Entry& e);
  std::optional<Combination> read_combination(const YAML::Node& node, const SourceLocation& where, const Field& f,
                                              bool axes_only);
  // pass 2
  Partial read_fields(const YAML::Node& node, const SourceLocation& where, const std::string& owner, bool is_defaults);
  std::optional<CapChange> read_cap_change(const YAML::Node& node, const SourceLocation& where, const Field& f);
  std::optional<std::vector<FaultSpec>> fault_list(const Entry& e, const Field& f);
  void report_rule_problem(Error problem, const YAML::Node& item, const Field& f);
  std::optional<ExpectSpec> read_expect_item(const YAML::Node& item, const Field& f);
  // templates
  std::optional<Text> text(const Entry& e, const Field& f, bool runtime_allowed);
  bool check_template(const Text& t, const Field& f, bool runtime_allowed);
  // pass 3
  struct JobTemplate {
    std::string name;               // as written, templates unexpanded
    SourceLocation where;
    Partial fields;
    std::vector<Text> argv;         // run, split (or the sh -c form)
    bool shell = false;
  };
  std::optional<JobTemplate> make_job(Partial job, const SourceLocation& where, const std::string& owner);
  std::optional<std::vector<Text>> command(const Entry& run, bool shell, const Field& f);
  void expand_job(const JobTemplate& t, std::vector<JobSpec>& out);
  JobSpec instantiate(const JobTemplate& t, const Combination& values);
  void check_duplicates(const std::vector<JobSpec>& jobs, const std::vector<size_t>& origin);
  void check_file_names(const Suite& suite, const std::vector<size_t>& origin);
  bool check_name(const std::string& name, const SourceLocation& where, const std::string& what);

  std::vector<std::string> variables(bool runtime_allowed) const;

  Diagnostics d_;
  Reader r_;
  std::string dir_;
  SuiteLimits limits_;
  bool too_many_jobs_ = false;  // reported once; nothing more is expanded
  Matrix matrix_;
  std::vector<Combination> combinations_;
  std::vector<std::string> matrix_variables_;
};

}  // namespace oomh::suite
