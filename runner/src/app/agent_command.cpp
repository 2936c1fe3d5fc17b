// `oomharness agent PLAN`: a Slurm job's batch script runs this on the node (Note [Backends] in backend.h).
// It runs the plan's ONE job with the local backend (the shim, the control block, the probe, timeouts,
// restarts and faults, exactly as `oomharness run` does here) and writes the job's outcome where the
// submitting side reads it (Note [Agent plan and results] in agent_plan.h). A job on several nodes (Note
// [Ranks on several nodes] in runner/src/exec/node_group.h): this agent checks the nodes, starts one
// `oomharness agent --node PLAN` per node with srun, and gathers their outcomes into one.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/commands.h"
#include "app/interrupts.h"
#include "exec/launch.h"
#include "exec/node_group.h"
#include "exec/slurm_tools.h"
#include "oomharness/runner/agent_plan.h"
#include "oomharness/runner/backend.h"
#include "oomharness/events.h"
#include "oomharness/version.h"
#include "app/spec_text.h"

extern char** environ;

namespace oomh::app {

namespace {

namespace fs = std::filesystem;

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string self_executable() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// Where node k's agent writes its outcome.
std::string node_results_path(const std::string& results, int node) {
  fs::path p(results);
  return (p.parent_path() / ("results.node-" + std::to_string(node) + ".json")).string();
}

std::string nodes_dir(const std::string& plan_path) { return (fs::path(plan_path).parent_path() / "nodes").string(); }

ExitCode write_outcome(const AgentPlan& plan, const std::string& path, JobOutcome& outcome, std::ostream& out, std::ostream& err) {
  std::string json = to_json_value(outcome).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (auto problem = write_text_atomic(path, json)) {
    err << "oomharness agent: " << *problem << "\n";
    return ExitCode::internal_error;
  }
  out << "oomharness agent: " << plan.job.name << ": " << outcome.trace.attempts.size() << " attempt(s)"
      << (outcome.interrupted ? ", interrupted" : "") << (outcome.error.empty() ? "" : ", error: " + outcome.error)
      << "; results in " << path << "\n";
  return outcome.interrupted ? ExitCode::interrupted : ExitCode::ok;
}

// Note [Checking the nodes]
// Before any rank of a job on several nodes starts, one task per node (an srun step) says its host name,
// what it reads in a file this agent has just written into the shared folder, and the version of the
// oomharness it would run. A node that reads something else does not share the folder; a node whose
// oomharness says another version (or cannot run it) would run the job differently. Either is the job's
// error, naming the node; no rank is started.
std::optional<std::string> check_nodes(const AgentPlan& plan, const std::string& dir, const std::string& agent,
                                       const std::vector<std::string>& env, std::vector<std::string>& hosts) {
  using namespace exec;
  const int n = plan.job.nodes;
  const std::string token = std::to_string(getpid()) + "-" + std::to_string(events::now_seconds());
  const std::string token_path = (fs::path(dir) / "shared-check.txt").string();
  if (auto w = write_text_atomic(token_path, token + "\n")) return "cannot write " + token_path + ": " + *w;
  const char* script = "v=$(\"$2\" --version 2>&1 | head -n 1); t=$(cat \"$1\" 2>/dev/null || echo '(no such file)'); "
                       "printf '%s|%s|%s|%s\\n' \"$SLURM_NODEID\" \"$(hostname)\" \"$t\" \"$v\"";
  ToolResult r = run_tool({"srun", "--quiet", "--overlap", "--nodes=" + std::to_string(n), "--ntasks=" + std::to_string(n),
                           "--ntasks-per-node=1", "--job-name=oomh:node-check", "/bin/sh", "-c", script, "sh", token_path, agent},
                          env, 300);
  if (!r.ok()) return "the check of the job's " + std::to_string(n) + " nodes (one srun task per node) failed: " + r.why();
  const std::string mine = std::string("oomharness ") + kVersion;
  std::map<int, std::array<std::string, 3>> seen;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    for (size_t at = 0;;) {
      size_t bar = f.size() < 3 ? line.find('|', at) : std::string::npos;
      f.push_back(line.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
      if (bar == std::string::npos) break;
      at = bar + 1;
    }
    if (f.size() != 4) continue;
    if (auto k = parse_integer(f[0]); k && *k >= 0 && *k < n) seen[static_cast<int>(*k)] = {f[1], f[2], f[3]};
  }
  hosts.assign(static_cast<size_t>(n), "");
  for (auto& [k, v] : seen) hosts[static_cast<size_t>(k)] = v[0];
  for (int k = 0; k < n; ++k) {
    auto it = seen.find(k);
    std::string who = "node " + std::to_string(k + 1) + " of " + std::to_string(n);
    if (it == seen.end()) return "the check of the job's nodes got no answer from " + who + " (srun said: " + r.out + r.err + ")";
    const auto& [host, got, version] = it->second;
    who = host + " (" + who + ")";
    if (got != token)
      return "the output folder is not shared with " + who + ": it could not read " + token_path + " (it read: " + got +
             "). Give --out a folder every node mounts at the same path (docs/slurm.md)";
    if (version != mine)
      return who + " runs another oomharness: " + agent + " --version says '" + version + "' there, and '" + mine +
             "' here. Every node must run the same version (install it on a shared path, or name it with --slurm-agent)";
  }
  std::error_code ec;
  fs::remove(token_path, ec);
  return std::nullopt;
}

// The agent of a job on several nodes (Note [Ranks on several nodes]): check the nodes, run one node agent per
// node, gather their outcomes. Runs no rank itself.
ExitCode lead_nodes(const AgentPlan& plan, const std::string& plan_path, std::ostream& out, std::ostream& err) {
  using namespace exec;
  JobOutcome outcome;
  outcome.trace.job = plan.job.name;
  outcome.trace.target_step = plan.job.target_step;
  outcome.start = events::now_seconds();
  const int n = plan.job.nodes;
  const std::string dir = nodes_dir(plan_path);
  std::error_code ec;
  fs::remove_all(dir, ec);  // an earlier run's files into the same folder must not count
  fs::create_directories(dir, ec);
  for (int k = 0; k < n; ++k) fs::remove(node_results_path(plan.results_path, k), ec);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (std::string(*e).rfind("LD_PRELOAD=", 0) != 0) env.emplace_back(*e);
  const std::string agent = plan.agent.empty() ? self_executable() : plan.agent;  // what the batch script ran
  auto fail = [&](const std::string& why) {
    outcome.error = why;
    outcome.end = events::now_seconds();
    return write_outcome(plan, plan.results_path, outcome, out, err);
  };
  const std::string allocated = env_or("SLURM_JOB_NUM_NODES", env_or("SLURM_NNODES"));
  if (allocated != std::to_string(n))
    return fail("nodes: " + std::to_string(n) + ", and Slurm gave the job " + (allocated.empty() ? "no nodes it names" : allocated + " node(s)") +
                " (SLURM_JOB_NUM_NODES)");
  std::vector<std::string> hosts;
  if (auto problem = check_nodes(plan, dir, agent, env, hosts)) return fail(*problem);
  std::string host_list;
  for (const std::string& h : hosts) host_list += (host_list.empty() ? "" : ",") + h;
  env.push_back("OOMH_NODE_HOSTS=" + host_list);
  env.push_back("OOMH_NODE_PORT=" + std::to_string(free_local_port()));
  const JobSpec& job = plan.job;
  const double backstop = (job.restart.max + 2) * (job.timeout + job.grace + 10) + 120;
  // Note [Waiting for the node agents]
  // The node agents' results are what the job's outcome is made of; srun's own end may come much later: a
  // node that disappeared keeps its task "running" until slurmctld marks the node down (SlurmdTimeout, 300 s
  // by default), and then Slurm ends the whole job (NODE_FAIL), this agent included, before it wrote a thing.
  // So srun runs on a thread of its own, and this agent stops waiting once every node has written its
  // results or been named by another node as gone; a srun still running is left to Slurm, which ends it
  // with the job when this batch script exits.
  std::vector<std::string> srun = {"srun", "--quiet", "--overlap", "--kill-on-bad-exit=0", "--nodes=" + std::to_string(n),
                                   "--ntasks=" + std::to_string(n), "--ntasks-per-node=1", "--job-name=oomh:nodes",
                                   "--output=" + (fs::path(dir) / "agent-%n.out").string(), agent, "agent", "--node", plan_path};
  auto r = std::make_shared<ToolResult>();
  auto srun_done = std::make_shared<std::atomic<bool>>(false);
  std::thread step([r, srun_done, srun, env, backstop] {
    *r = run_tool(srun, env, backstop);
    srun_done->store(true);
  });
  for (;;) {
    if (srun_done->load()) break;
    int settled = 0;
    std::string errors;
    for (int k = 0; k < n; ++k) {
      std::ifstream f(node_results_path(plan.results_path, k), std::ios::binary);
      if (!f) continue;
      std::stringstream text;
      text << f.rdbuf();
      try {
        errors += job_outcome_from_json(nlohmann::json::parse(text.str())).error + "\n";
        ++settled;
      } catch (const std::exception&) {
      }
    }
    for (int k = 0; k < n; ++k)
      if (!fs::exists(node_results_path(plan.results_path, k), ec) &&
          errors.find("(node " + std::to_string(k + 1) + " of " + std::to_string(n) + ",") != std::string::npos)
        ++settled;  // named gone by another node
    if (settled >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // Every node wrote: srun ends within moments, unless a node is gone.
  for (int i = 0; i < 50 && !srun_done->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool waited = srun_done->load();
  if (waited) step.join();
  else step.detach();
  // Every node wrote the same attempts (they folded the same ranks); the first node's outcome, else the
  // first that wrote one, is the job's. A node without one is named.
  std::optional<JobOutcome> got;
  std::string missing, missing_hosts;
  for (int k = 0; k < n; ++k) {
    std::ifstream f(node_results_path(plan.results_path, k), std::ios::binary);
    std::string what = (k < static_cast<int>(hosts.size()) && !hosts[static_cast<size_t>(k)].empty() ? hosts[static_cast<size_t>(k)] : "node") +
                       " (node " + std::to_string(k + 1) + " of " + std::to_string(n) + ")";
    if (!f) {
      missing += (missing.empty() ? "" : ", ") + what;
      missing_hosts += k < static_cast<int>(hosts.size()) ? hosts[static_cast<size_t>(k)] : "";
      continue;
    }
    std::stringstream text;
    text << f.rdbuf();
    try {
      JobOutcome o = job_outcome_from_json(nlohmann::json::parse(text.str()));
      if (!got) got = std::move(o);
    } catch (const std::exception& e) {
      missing += (missing.empty() ? "" : ", ") + what + " (its results cannot be read: " + e.what() + ")";
    }
  }
  if (got) outcome = std::move(*got);
  outcome.trace.job = plan.job.name;
  // A node that another node already named as gone (Note [Ranks on several nodes]) is said once.
  const bool named = !missing_hosts.empty() && outcome.error.find(missing_hosts) != std::string::npos;
  if (!missing.empty() && !named) {
    std::string why = "the node agent of " + missing + " wrote no results: its node failed, or Slurm killed its task" +
                      (!waited || r->ok() ? std::string() : " (srun: " + r->why() + ")") +
                      "; a node failure, not an out-of-memory error";
    outcome.error = outcome.error.empty() ? why : outcome.error + "; " + why;
  }
  outcome.start = outcome.start > 0 ? outcome.start : events::now_seconds();
  if (outcome.end <= 0) outcome.end = events::now_seconds();
  ExitCode code = write_outcome(plan, plan.results_path, outcome, out, err);
  if (!waited) {
    // Note [Waiting for the node agents]: srun's thread cannot be joined; Slurm ends the step with the job.
    out.flush();
    err.flush();
    std::fflush(nullptr);
    _exit(to_int(code));
  }
  return code;
}

}  // namespace

ExitCode command_agent(const std::string& plan_path, bool node, std::ostream& out, std::ostream& err) {
  std::ifstream f(plan_path, std::ios::binary);
  if (!f) {
    err << "oomharness agent: cannot read the plan " << plan_path
        << " (is the output folder shared with this node? docs/slurm.md)\n";
    return ExitCode::internal_error;
  }
  std::stringstream text;
  text << f.rdbuf();
  AgentPlan plan;
  try {
    plan = agent_plan_from_json(nlohmann::json::parse(text.str()));
  } catch (const std::exception& e) {
    err << "oomharness agent: " << plan_path << ": " << e.what() << "\n";
    return ExitCode::internal_error;
  }
  if (plan.job.nodes > 1 && !node) return lead_nodes(plan, plan_path, out, err);
  // The submitter's own LD_PRELOAD was kept out of sbatch; the job gets it back, the shim after it.
  if (plan.ld_preload) setenv("LD_PRELOAD", plan.ld_preload->c_str(), 1);
  else unsetenv("LD_PRELOAD");

  RunOptions options;
  options.jobs = 1;
  options.out_dir = plan.jobs_dir;
  options.paths = plan.paths;
  // Slurm chose the job's GPUs and set CUDA_VISIBLE_DEVICES: the runner assigns none (an empty inventory)
  // and the job inherits Slurm's.
  options.gpu_inventory = std::vector<GpuInfo>{};
  options.threads_per_job = plan.threads ? ThreadsPerJob{ThreadsPerJob::Mode::fixed, *plan.threads}
                                         : ThreadsPerJob{ThreadsPerJob::Mode::off, 0};
  std::string results_path = plan.results_path;
  if (node) {
    // Note [Ranks on several nodes]: this node's share of the job's ranks.
    exec::NodeGroup::Setup setup;
    setup.nodes = plan.job.nodes;
    setup.ranks_per_node = plan.job.ranks_per_node;
    const auto id = parse_integer(env_or("SLURM_NODEID"));
    const std::string nnodes = env_or("SLURM_NNODES");
    if (!id || nnodes != std::to_string(setup.nodes) || *id < 0 || *id >= setup.nodes) {
      err << "oomharness agent --node: SLURM_NODEID '" << env_or("SLURM_NODEID") << "' and SLURM_NNODES '" << nnodes
          << "' do not name one of the job's " << setup.nodes << " nodes (run by the job's first agent through srun)\n";
      return ExitCode::internal_error;
    }
    setup.node = static_cast<int>(*id);
    setup.dir = nodes_dir(plan_path);
    setup.master_addr = env_or("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1");
    setup.base_port = static_cast<int>(parse_integer(env_or("OOMH_NODE_PORT")).value_or(29500));
    std::stringstream hosts(env_or("OOMH_NODE_HOSTS"));
    for (std::string h; std::getline(hosts, h, ',');) setup.hosts.push_back(h);
    // Read: the jobs must not inherit them (the shim and the probe warn about OOMH_ names they do not know).
    unsetenv("OOMH_NODE_HOSTS");
    unsetenv("OOMH_NODE_PORT");
    options.node_group = std::make_shared<exec::NodeGroup>(std::move(setup));
    results_path = node_results_path(plan.results_path, static_cast<int>(*id));
  }
  std::unique_ptr<Backend> backend = make_local_backend(std::move(options));
  std::vector<JobOutcome> outcomes;
  {
    InterruptHandlers handlers(*backend);
    outcomes = backend->run({plan.job});
  }
  JobOutcome outcome = outcomes.empty() ? JobOutcome{} : std::move(outcomes.front());
  if (backend->interrupted()) outcome.interrupted = true;
  // The job's GPU as Slurm gave it (the node's index), for the reports.
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd && *cvd) {
    if (auto n = parse_integer(cvd); n && *n >= 0 && *n < 1024) outcome.gpu = static_cast<int>(*n);
  }
  return write_outcome(plan, results_path, outcome, out, err);
}

}  // namespace oomh::app
