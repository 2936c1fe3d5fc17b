// The command line: CLI11 parses, commands.h does. Options go before or after positional arguments (suite
// files), and a repeatable option takes one value per occurrence, as pytest's do. Only CLI11 API common
// to 2.1 (Debian 12) and 2.4 is used. docs/cli.md documents every command and flag; keep the two in step.

// GCC 12 reports a -Wnull-dereference inside CLI11's own string splitting (a false positive in
// libstdc++'s vector growth); our code is checked with the warning on.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <CLI/CLI.hpp>
#pragma GCC diagnostic pop

#include <algorithm>
#include <exception>
#include <iostream>
#include <map>

#include "app/commands.h"
#include "app/predict_command.h"
#include "exec/signals.h"
#include "oomharness/names.h"
#include "oomharness/runner/app.h"
#include "oomharness/runner/name_tables.h"
#include "oomharness/version.h"
#include "suite/job_table.h"

namespace oomh {

namespace {

// The exit codes in kExitCodes' words (the man page's EXIT STATUS is checked against the same table), then
// what the table cannot say; wrapped at 104 columns as the rest of --help.
std::string footer_text() {
  std::string text = "Exit codes:";
  for (const auto& e : kExitCodes)
    text += " " + std::to_string(static_cast<int>(e.value)) + " " + std::string(e.help) + ",";
  text.back() = '.';
  text += " Inconclusive jobs beside passed ones do not fail a run unless --strict. docs/cli.md has every flag and example.";
  std::string out, line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > 104) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  return out + line;
}
const std::string kFooter = footer_text();
// The largest batch --batch and --max-batch take (predict, budget).
constexpr int64_t kMaxBatch = int64_t{1} << 40;

void add_report_flags(CLI::App* cmd, app::ReportFlags& f) {
  cmd->add_option("--junit", f.junit, "Also write JUnit XML here");
  cmd->add_option("--json", f.json, "Also write the results JSON here");
  cmd->add_option("--html", f.html, "Also write the HTML report here");
  cmd->add_option("--markdown", f.markdown, "Also write a Markdown summary here");
  cmd->add_option("--perfetto", f.perfetto, "Also write a Perfetto / chrome://tracing trace here");
}

// -q and -v, as pytest's: less (no per-job lines, only the jobs that did not pass in the table) or more
// (every verdict's sentence in the table).
struct Verbosity {
  bool quiet = false, verbose = false;
  int level() const { return quiet ? -1 : verbose ? 1 : 0; }
};
void add_verbosity_flags(CLI::App* cmd, Verbosity& v) {
  auto* q = cmd->add_flag("-q,--quiet", v.quiet, "Less output: no per-job lines; the table lists only jobs that did not pass");
  cmd->add_flag("-v,--verbose", v.verbose, "More output: every verdict's sentence in the table")->excludes(q);
}

// One flag of the job table on `cmd`, storing what it was given in `given` under its name. A number is taken
// as typed: the row's reader checks it (parse_integer refuses one out of range), so that `--restart
// 99999999999999999999` is quoted as typed, not as the int64 CLI11 saturates it to.
void add_job_flag(CLI::App* cmd, const suite::JobFlag& f, std::map<std::string, std::vector<std::string>, std::less<>>& given) {
  const std::string name(f.name), help(f.help);
  switch (f.takes) {
    case suite::FlagTakes::text:
    case suite::FlagTakes::integer:
      cmd->add_option_function<std::string>(name, [&given, name](const std::string& x) { given[name] = {x}; }, help);
      break;
    case suite::FlagTakes::repeated:
      cmd->add_option_function<std::vector<std::string>>(name, [&given, name](const std::vector<std::string>& x) { given[name] = x; }, help)
          ->allow_extra_args(false);
      break;
    case suite::FlagTakes::nothing:
      cmd->add_flag_function(name, [&given, name](int64_t n) { given[name] = {n > 0 ? "true" : "false"}; }, help);
      break;
  }
}

// The flags that describe one job (exec, sweep, budget, predict), bound from the job table as each row's
// flags are written (Note [One table of job fields] in suite/job_table.h): a row given a flag is a flag
// of these commands at once. Each stores what it was given in ExecArgs::job_flags, which
// job_from_exec_args reads. Sweep, budget and predict make their own faults: no --fault.
void add_job_flags(CLI::App* cmd, app::ExecArgs& a, Verbosity& v, bool with_faults) {
  for (const suite::JobKey& k : suite::job_keys())
    for (const suite::JobFlag& f : k.flags)
      if (!f.name.empty() && (with_faults || f.name != "--fault")) add_job_flag(cmd, f, a.job_flags);
  add_report_flags(cmd, a.reports);
  cmd->add_flag("--summary", a.summary, "Append the Markdown summary to $GITHUB_STEP_SUMMARY");
  cmd->add_option("-o,--out", a.out_dir, "Output folder (default " + a.out_dir + ")");
  cmd->add_flag("--simulate", a.simulate, "Run on the CPU driver double instead of a GPU");
  cmd->add_flag("--strict", a.strict, "An inconclusive job fails the run");
  add_verbosity_flags(cmd, v);
}

// Note [Flags that mean something for a prediction] (app/predict_command.h): the job flags of kPredictJobFlags,
// --json and the output folder.
void add_predict_flags(CLI::App* cmd, app::ExecArgs& a) {
  for (const suite::JobKey& k : suite::job_keys())
    for (const suite::JobFlag& f : k.flags)
      if (std::find(std::begin(app::kPredictJobFlags), std::end(app::kPredictJobFlags), f.name) != std::end(app::kPredictJobFlags))
        add_job_flag(cmd, f, a.job_flags);
  cmd->add_option("--json", a.reports.json, "Also write the prediction as JSON here");
  cmd->add_option("-o,--out", a.out_dir, "Output folder of the runs (default " + a.out_dir + ")");
}

// Note [Did you mean, on the command line]
// CLI11 says "The following arguments were not expected: --simulte" or "A subcommand is required" for a
// misspelt flag or command; the suite reader, --fault and --expect name the word they meant. After a failed
// parse this looks at the words given: the first that is not an option must be a command (`oomharness
// rnu` -> "did you mean 'run'?"), and each `--long` option must be one of that command's (or the top
// level's) (`--simulte` -> "did you mean '--simulate'?"). The one suggestion function decides
// (Note [One typo threshold] in include/oomharness/names.h). Words after a command's `--` are never ours.
std::string command_line_suggestion(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* where = &app;
  bool command_seen = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") break;
    if (word.rfind("--", 0) == 0 && word.size() > 2) {
      std::string name = word.substr(0, word.find('='));
      std::vector<std::string> known;
      for (const CLI::App* a : {where, &app})
        for (const CLI::Option* o : a->get_options())
          for (const std::string& l : o->get_lnames()) known.push_back("--" + l);
      if (std::find(known.begin(), known.end(), name) != known.end()) continue;
      std::string near = nearest_name(name, known);
      if (!near.empty()) return "unknown option '" + name + "' (did you mean '" + near + "'?)";
      continue;
    }
    if (word[0] == '-' || command_seen) continue;
    command_seen = true;
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App* a) { return !a->get_group().empty(); }))
      commands.push_back(sub->get_name());
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->get_name() == word) where = sub;
    if (where != &app) continue;
    std::string near = nearest_name(word, commands);
    if (!near.empty()) return "unknown command '" + word + "' (did you mean '" + near + "'?)";
    return "";
  }
  return "";
}

int parse_and_run(std::vector<std::string> args) {
  // `exec ... -- CMD ARGS`: everything after the first `--` is the job's command, untouched by CLI11
  // (its flags are the job's, not ours).
  std::vector<std::string> command;
  auto dashdash = std::find(args.begin(), args.end(), "--");
  auto exec_word = std::find_if(args.begin() + (args.empty() ? 0 : 1), dashdash, [](const std::string& a) {
    return a == "exec" || a == "sweep" || a == "budget" || a == "predict";
  });
  if (dashdash != args.end() && exec_word != dashdash) {
    command.assign(dashdash + 1, args.end());
    args.erase(dashdash, args.end());
  }

  CLI::App app{"oomharness: tests whether GPU training code survives running out of memory", "oomharness"};
  app.set_version_flag("--version", std::string("oomharness ") + kVersion);
  app.require_subcommand(1);
  app.footer(kFooter);

  app::RunArgs run_args;
  run_args.command_line = args;
  CLI::App* run = app.add_subcommand("run", "Run suites: every job under the shim, checked by its expect: policies");
  run->add_option("suites", run_args.suites, "Suite files (YAML)")->required();
  run->add_option("-k", run_args.filters,
                  "Only jobs whose suite::job name matches: substring or glob, with and/or/not (like pytest -k)")
      ->allow_extra_args(false);  // `-k EXPR suite.yaml`: the suite file is not a second expression
  run->add_option("-j,--jobs", run_args.jobs, "How many jobs run at once (default 1)");
  run->add_option("--threads-per-job", run_args.threads_per_job,
                  "OMP_NUM_THREADS for each job when jobs run at once: auto (its share of the cores; the default), off, or N");
  run->add_option("--gpus", run_args.gpus, "GPUs to use, like 0,1 (default: all found)");
  add_report_flags(run, run_args.reports);
  run->add_flag("--summary", run_args.summary, "Append the Markdown summary to $GITHUB_STEP_SUMMARY");
  run->add_option("-o,--out", run_args.out_dir, "Output folder: results.json, report.html, job logs (default oomh-out)");
  run->add_flag("--simulate", run_args.simulate, "Run on the CPU driver double instead of a GPU");
  run->add_flag("--strict", run_args.strict, "An inconclusive job fails the run");
  std::string run_device;
  run->add_option("--device", run_device,
                  "Where every job's CUDA work runs: gpu, virtual (PyTorch on the CPU, a modelled caching allocator) "
                  "or auto (each job's device:, by default virtual for Python jobs under --simulate)");
  run->add_option("--max-jobs", run_args.max_jobs, "Refuse a suite that expands to more jobs than this (default 10000)")
      ->check(CLI::Range(size_t{1}, size_t{100'000'000}));
  bool run_exitfirst = false;
  run->add_flag("-x,--exitfirst", run_exitfirst, "Start no new job after the first failed or erred one (--maxfail 1)");
  run->add_option("--maxfail", run_args.maxfail, "Start no new job after N failed or erred ones")
      ->check(CLI::Range(1, 1'000'000));
  run->add_flag("--lf,--last-failed", run_args.last_failed,
                "Only the jobs that failed, erred or were left unfinished by an interrupt in the last runs of these suites "
                "(.oomharness-cache/ in this folder, or $OOMH_CACHE_DIR); all when there are none");
  run->add_flag("--collect-only", run_args.collect_only,
                "List the jobs that would run (after -k and --lf) and run none; exit 5 when none is selected");
  run_args.keep_state = true;
  Verbosity run_verbosity;
  add_verbosity_flags(run, run_verbosity);
  std::string run_backend;
  run->add_option("--backend", run_backend,
                  "Where the jobs run: local (this machine; the default) or slurm (one Slurm job each; docs/slurm.md). "
                  "Default: the suite's backend:");
  run->add_option("--slurm-partition", run_args.slurm.partition, "Slurm: the partition (default: the cluster's)");
  run->add_option("--slurm-gres", run_args.slurm.gres,
                  "Slurm: GPUs per job: auto (gpu:1 on a GPU, none under --simulate), none, gpu, shard (capped jobs share a card)");
  run->add_option("--slurm-cpus", run_args.slurm.cpus, "Slurm: CPUs per job (default 1)")->check(CLI::Range(1, 4096));
  run->add_option("--slurm-mem", run_args.slurm.mem, "Slurm: host memory per job in sbatch's form (4G); default: the partition's");
  run->add_option("--slurm-arg", run_args.slurm.sbatch_args, "Slurm: one more sbatch argument, passed as it is, such as an account or a QOS (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--slurm-poll", run_args.slurm.poll_interval, "Slurm: seconds between squeue calls (default 1)")
      ->check(CLI::Range(0.05, 600.0));
  run->add_option("--slurm-agent", run_args.slurm.agent_program,
                  "Slurm: the oomharness the nodes run (default: this one, which must be on a shared path)");
  run->footer(kFooter);

  // exec, sweep and budget share the flags that describe the job.
  auto job_command_line = [&] {
    std::vector<std::string> line = args;
    line.push_back("--");
    line.insert(line.end(), command.begin(), command.end());
    return line;
  };
  app::ExecArgs exec_args;
  exec_args.command_line = job_command_line();
  exec_args.out_dir = "oomh-exec";  // its own: an exec never overwrites a suite's results (Note [Run state])
  CLI::App* exec = app.add_subcommand("exec", "Stress one command: oomharness exec [flags] -- CMD ARGS...");
  Verbosity exec_verbosity;
  add_job_flags(exec, exec_args, exec_verbosity, true);
  // Several execs at once (pytest -n: one per worker) share the cores as run's jobs do.
  exec->add_option("--threads-per-job", exec_args.threads_per_job,
                   "OMP_NUM_THREADS for the job: N (its share of the cores when several execs run at once), or off (the default)");
  exec->footer(kFooter);

  app::SweepArgs sweep_args;
  sweep_args.exec.command_line = job_command_line();
  CLI::App* sweep = app.add_subcommand(
      "sweep", "Fail every allocation site of a step, transiently and persistently: oomharness sweep --step N [flags] -- CMD ARGS...");
  Verbosity sweep_verbosity;
  add_job_flags(sweep, sweep_args.exec, sweep_verbosity, false);
  sweep->add_option("suite", sweep_args.suite, "A suite file whose job to sweep, instead of a command after --");
  sweep->add_option("-k", sweep_args.filter, "With a suite: the job to sweep (substring or glob, as run's -k)")
      ->allow_extra_args(false);
  sweep->add_option("--step", sweep_args.steps, "The training step whose allocation sites are swept: 3, 2,5 or 2..4 (required)");
  sweep->add_option("-j,--jobs", sweep_args.jobs, "How many faulted runs run at once (default 1)")
      ->check(CLI::Range(1, 4096));
  sweep->add_option("--threads-per-job", sweep_args.threads_per_job,
                    "OMP_NUM_THREADS for each run when runs go at once: auto (the default), off, or N");
  sweep->add_option("--transient-times", sweep_args.transient_times,
                    "Failures in a row of a transient fault (default 2: past PyTorch's own retry)");
  sweep->add_option("--modes", sweep_args.modes, "Which faults per site: transient, persistent (default both)");
  sweep->footer(kFooter);

  app::BudgetArgs budget_args;
  budget_args.exec.command_line = job_command_line();
  CLI::App* budget = app.add_subcommand(
      "budget", "Find the smallest cap in which the job completes: oomharness budget [flags] -- CMD ARGS...");
  Verbosity budget_verbosity;
  add_job_flags(budget, budget_args.exec, budget_verbosity, false);
  budget->add_option("--low", budget_args.low, "The smallest cap to consider (default 0)");
  budget->add_option("--high", budget_args.high, "A cap the job completes in (default: its peak in an uncapped run)");
  budget->add_option("--tolerance", budget_args.tolerance, "Stop when the bounds are this close (default 1MiB)");
  budget->add_option("--batch-under", budget_args.batch_under,
                     "Instead: the largest batch that completes under this cap; the command says where with {batch}");
  budget->add_option("--max-batch", budget_args.max_batch, "With --batch-under: the largest batch tried (default 4096)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch));
  budget->footer(kFooter);

  app::PredictArgs predict_args;
  predict_args.exec.command_line = job_command_line();
  CLI::App* predict = app.add_subcommand(
      "predict", "Predict the memory the job needs from one shape-only run on the virtual device: oomharness predict [flags] -- CMD ARGS...");
  add_predict_flags(predict, predict_args.exec);
  predict->add_option("--steps", predict_args.steps,
                      "Stop the run after N training steps (optimizer steps), for a trainer with no step limit of its own")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  // CLI11 saturates a number out of int64's range (99999999999999999999 became 9223372036854775807, and
  // ran); its Range check reads the text as typed and refuses it, quoting it (exit 4).
  predict->add_option("--batch", predict_args.batch, "With {batch} in the command: the batch to predict (default 1)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch));
  predict->add_option("--batch-under", predict_args.batch_under,
                      "With {batch} in the command: also find the largest batch that completes under this cap");
  predict->add_option("--max-batch", predict_args.max_batch, "With --batch-under: the largest batch tried (default 4096)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch));
  predict->footer(kFooter);

  std::vector<std::string> validate_suites;
  CLI::App* validate = app.add_subcommand("validate", "Check suite files without running them");
  validate->add_option("suites", validate_suites, "Suite files (YAML)")->required();
  SuiteLimits validate_limits;
  validate->add_option("--max-jobs", validate_limits.max_jobs,
                       "Refuse a suite that expands to more jobs than this (default 10000)")
      ->check(CLI::Range(size_t{1}, size_t{100'000'000}));

  std::string results_file;
  app::ReportFlags report_flags;
  CLI::App* report = app.add_subcommand("report", "Write reports again from a results file");
  report->add_option("results", results_file, "A results.json written by oomharness run, or its jobs.jsonl when the run was killed")->required();
  add_report_flags(report, report_flags);
  // Note [Bounded results files] in reports/writers.h.
  const char* max_size_help = "Read a results file of at most this size (default 64MiB)";
  std::string report_max_size, explain_max_size;
  report->add_option("--max-file-size", report_max_size, max_size_help);

  std::string explain_file;
  std::vector<std::string> explain_filters;
  CLI::App* explain = app.add_subcommand("explain", "Say what held the memory at each OOM and why (findings, breakdowns)");
  explain->add_option("results", explain_file, "A results.json written by oomharness run")->required();
  explain->add_option("-k", explain_filters, "Only jobs whose suite::job name matches (as run's -k)")
      ->allow_extra_args(false);
  explain->add_option("--max-file-size", explain_max_size, max_size_help);

  app::CompareArgs compare_args;
  CLI::App* compare = app.add_subcommand("compare", "Compare two runs; exit 1 on a regression");
  compare->add_option("base", compare_args.base, "The base results.json")->required();
  compare->add_option("new", compare_args.now, "The new results.json")->required();
  compare->add_option("--fail-on", compare_args.fail_on,
                      "What counts as a regression: verdict, removed, peak:+5%, recovery:+2s, faults_visible:-0 "
                      "(repeatable; default verdict)")
      ->allow_extra_args(false);
  compare->add_option("--markdown", compare_args.markdown, "Also write the comparison as Markdown here");
  compare->add_option("--max-file-size", compare_args.max_file_size, max_size_help);

  std::string demo_out = "oomh-out";
  CLI::App* demo = app.add_subcommand("demo", "Run the demo suite (simulated when no GPU is found)");
  demo->add_option("-o,--out", demo_out, "Output folder (default oomh-out)");

  std::string agent_plan;
  CLI::App* agent = app.add_subcommand("agent", "(internal) Run one job of a Slurm run on its node: what the batch script runs");
  agent->add_option("plan", agent_plan, "The agent's plan (plan.json in the run's output folder)")->required();
  bool agent_node = false;
  agent->add_flag("--node", agent_node, "One node's share of a job on several nodes (what the job's first agent starts with srun)");
  agent->group("");  // not listed in --help: users never type it

  std::string dev_what;
  CLI::App* dev = app.add_subcommand("dev", "(internal) What the project's own tests and the bash completion ask of the runner");
  dev->add_option("what", dev_what,
                  "job-keys: the job table as JSON; backends: --backend's values; python-abi: python/oomharness/_abi.py")
      ->required()
      ->check(CLI::IsMember({"job-keys", "backends", "python-abi"}));
  dev->group("");

  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, the version, or the error with a hint
    if (code != 0) {
      std::string hint = command_line_suggestion(app, args);  // Note [Did you mean, on the command line]
      if (!hint.empty()) std::cerr << "oomharness: " << hint << "\n";
    }
    return code == 0 ? 0 : to_int(ExitCode::usage_error);
  }
  if (!command.empty() && !exec->parsed() && !sweep->parsed() && !budget->parsed() && !predict->parsed()) {
    std::cerr << "oomharness: '--' and a command belong to `oomharness exec`, `sweep`, `budget` or `predict`\n";
    return to_int(ExitCode::usage_error);
  }

  std::ostream& out = std::cout;
  std::ostream& err = std::cerr;
  if (run->parsed()) {
    if (!run_device.empty()) {
      run_args.device = device_choice_from_name(run_device);
      if (!run_args.device) {
        std::cerr << "oomharness run: bad --device '" << run_device << "': " << names_text(kDevices, ", ", " or ") << "\n";
        return to_int(ExitCode::usage_error);
      }
      if (*run_args.device == DeviceChoice::automatic) run_args.device.reset();
    }
    if (run_exitfirst) run_args.maxfail = 1;
    run_args.verbosity = run_verbosity.level();
    if (!run_backend.empty()) {
      run_args.backend = backend_from_name(run_backend);
      if (!run_args.backend) {
        std::cerr << "oomharness run: bad --backend '" << run_backend << "': " << names_text(kBackends, ", ", " or ") << "\n";
        return to_int(ExitCode::usage_error);
      }
    }
    if (run_args.slurm.gres != "auto" && run_args.slurm.gres != "none" && run_args.slurm.gres != "gpu" &&
        run_args.slurm.gres != "shard") {
      std::cerr << "oomharness run: bad --slurm-gres '" << run_args.slurm.gres << "': auto, none, gpu or shard\n";
      return to_int(ExitCode::usage_error);
    }
    return to_int(app::command_run(run_args, out, err));
  }
  if (exec->parsed()) {
    exec_args.command = command;
    exec_args.verbosity = exec_verbosity.level();
    return to_int(app::command_exec(exec_args, out, err));
  }
  if (sweep->parsed()) {
    sweep_args.exec.command = command;
    sweep_args.exec.verbosity = sweep_verbosity.level();
    return to_int(app::command_sweep(sweep_args, out, err));
  }
  if (predict->parsed()) {
    predict_args.exec.command = command;
    return to_int(app::command_predict(predict_args, out, err));
  }
  if (budget->parsed()) {
    budget_args.exec.command = command;
    budget_args.exec.verbosity = budget_verbosity.level();
    return to_int(app::command_budget(budget_args, out, err));
  }
  if (validate->parsed()) return to_int(app::command_validate(validate_suites, out, err, validate_limits));
  if (report->parsed()) return to_int(app::command_report(results_file, report_flags, out, err, report_max_size));
  if (explain->parsed()) return to_int(app::command_explain(explain_file, explain_filters, out, err, explain_max_size));
  if (compare->parsed()) return to_int(app::command_compare(compare_args, out, err));
  if (agent->parsed()) return to_int(app::command_agent(agent_plan, agent_node, out, err));
  if (dev->parsed()) {
    if (dev_what == "backends") return to_int(app::command_dev_backends(out));
    if (dev_what == "python-abi") return to_int(app::command_dev_python_abi(out));
    return to_int(app::command_dev_job_keys(out));
  }
  if (demo->parsed()) return to_int(app::command_demo(demo_out, args, out, err));
  return to_int(ExitCode::usage_error);
}

}  // namespace

// Note [A closed pipe]
// `oomharness run ... | head -1` closes the runner's stdout early. SIGPIPE is caught (Note [Signals a job
// may send] in exec/signals.h), so the write fails with EPIPE instead of killing the process: the stream
// goes bad and prints nothing more, and the run goes on, writes its results and reports, and exits with
// the run's own code. The same holds for stderr and for every other command.
int app_main(const std::vector<std::string>& args) {
  exec::install_signal_guards();
  try {
    return parse_and_run(args);
  } catch (const std::exception& e) {
    std::cerr << "oomharness: internal error: " << e.what() << "\n"
              << "(this is a bug in oomharness: please report it with the command line above)\n";
  } catch (...) {
    std::cerr << "oomharness: internal error (unknown exception)\n";
  }
  return to_int(ExitCode::internal_error);
}

int app_main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return app_main(args);
}

}  // namespace oomh
