// Launching an attempt: argv, environment, process group, working directory.

#include "exec/launch.h"

#include "oomharness/events.h"
#include "oomharness/process_ids.h"

#include <filesystem>
#include <csignal>
#include <map>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

extern char** environ;

namespace oomh::exec {

namespace {

// Note [The context on the virtual device]
constexpr const char* kVirtualDeviceMemory = "80GiB";
constexpr const char* kVirtualDeviceContext = "742MiB";
using EnvMap = std::map<std::string, std::string>;

EnvMap runner_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

void prepend_path(EnvMap& env, const std::string& name, const std::string& dir) {
  if (dir.empty()) return;
  auto it = env.find(name);
  env[name] = (it == env.end() || it->second.empty()) ? dir : dir + ":" + it->second;
}

void append_path(EnvMap& env, const std::string& name, const std::string& item) {
  if (item.empty()) return;
  auto it = env.find(name);
  env[name] = (it == env.end() || it->second.empty()) ? item : it->second + ":" + item;
}

// The variables srun gives task `procid` of a step of `nodes` x `per_node` tasks (Note [Slurm's task
// variables for each rank]).
void slurm_task_variables(EnvMap& env, int procid, int localid, int node, int nodes, int per_node) {
  const std::string tasks_per_node = std::to_string(per_node) + (nodes > 1 ? "(x" + std::to_string(nodes) + ")" : "");
  env["SLURM_PROCID"] = std::to_string(procid);
  env["SLURM_LOCALID"] = std::to_string(localid);
  env["SLURM_NODEID"] = std::to_string(node);
  env["SLURM_NNODES"] = std::to_string(nodes);
  env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = env["SLURM_STEP_NUM_TASKS"] = std::to_string(nodes * per_node);
  env["SLURM_NTASKS_PER_NODE"] = std::to_string(per_node);
  env["SLURM_TASKS_PER_NODE"] = env["SLURM_STEP_TASKS_PER_NODE"] = tasks_per_node;
}

std::vector<std::string> flatten(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}
}  // namespace

std::string saved_steps(const std::vector<Attempt>& earlier) {
  constexpr size_t kMostSaves = 64;
  std::vector<std::pair<std::string, int64_t>> saves;  // in order
  for (const Attempt& a : earlier)
    for (const Event& e : a.events) {
      if (e.src != events::kSrcProbe || e.kind != events::kSave) continue;
      std::string digest = e.text("digest");
      int64_t completed = e.integer("completed", -1);
      bool hex = digest.size() == 16 && digest.find_first_not_of("0123456789abcdef") == std::string::npos;
      if (hex && completed >= 0) saves.emplace_back(std::move(digest), completed);
    }
  if (saves.size() > kMostSaves) saves.erase(saves.begin(), saves.end() - kMostSaves);
  std::map<std::string, std::optional<int64_t>> count;  // nullopt: saved at two different counts
  for (const auto& [digest, completed] : saves) {
    auto [it, fresh] = count.try_emplace(digest, completed);
    if (!fresh && it->second != completed) it->second.reset();
  }
  std::string out;
  for (const auto& [digest, completed] : saves) {
    auto it = count.find(digest);
    if (it == count.end() || !it->second) continue;
    out += (out.empty() ? "" : ",") + digest + ":" + std::to_string(*it->second);
    count.erase(it);  // once each
  }
  return out;
}

std::vector<std::string> job_environment(const JobSpec& job, const HarnessPaths& paths, const AttemptContext& ctx) {
  EnvMap env = runner_environment();
  for (const auto& [k, v] : job.env) env[k] = substitute_runtime(v, ctx.workdir, ctx.attempt);
  append_path(env, "LD_PRELOAD", paths.inject_library);
  env["OOMH_CONTROL"] = ctx.control_name;
  env["OOMH_EVENTS"] = ctx.events_path;
  env["OOMH_PLAN"] = ctx.plan_json;
  env["OOMH_JOB"] = ctx.job;
  env["OOMH_ATTEMPT"] = std::to_string(ctx.attempt);
  // `memory: {snapshot: true}`: the Python probe records PyTorch's memory history and dumps a snapshot at
  // the first OOM into the attempt's folder (docs/diagnosis.md); the job's own OOMH_SNAPSHOT wins.
  if (job.memory.snapshot && !ctx.events_path.empty())
    env.try_emplace("OOMH_SNAPSHOT", (std::filesystem::path(ctx.events_path).parent_path() / "snapshots").string());
  if (job.probe != ProbeMode::none && !paths.python_probe_dir.empty()) {
    prepend_path(env, "PYTHONPATH", paths.python_probe_dir);
    env.insert_or_assign("OOMH_PROBE", std::string("1"));
  }
  if (job.device == DeviceChoice::virtual_device) {
    // The virtual CUDA device (python/oomharness/virtual_device/) installs itself when the job
    // imports torch, and asks the driver double for its segments: the shim sees them as a GPU's.
    if (job.probe == ProbeMode::none) prepend_path(env, "PYTHONPATH", paths.python_probe_dir);
    env["OOMH_DEVICE"] = "virtual";
    env["CUDA_VISIBLE_DEVICES"] = "";  // a CUDA build of torch must not reach a real GPU (or the double) itself
    prepend_path(env, "LD_LIBRARY_PATH", paths.virtual_driver_dir);
    // Note [The context on the virtual device]
    // The device stands for the GPU its figures were checked against, an H100 80GB: the driver double gets
    // its memory, and a CUDA context of the size NVML measured for PyTorch 2.11 there once cuBLAS and a
    // transformer step had loaded their kernels (742 MiB; docs/compatibility.md). The context is no
    // allocation: mem_get_info shows it as a GPU's does, and a cap that counts the footprint counts it,
    // through the NVML double (nvml/ beside the driver double), as the shim counts a GPU's. A job's own env
    // may set either figure.
    env.try_emplace("CUDA_DOUBLE_MEMORY", std::string(kVirtualDeviceMemory));
    env.try_emplace("CUDA_DOUBLE_CONTEXT_MEMORY", std::string(kVirtualDeviceContext));
    prepend_path(env, "LD_LIBRARY_PATH", paths.virtual_driver_dir + "/nvml");
    // Note [Triton kernels on the virtual device]
    // Code that launches its own Triton kernels when a tensor's device is CUDA (TRL's SFTTrainer computes its
    // loss with the fused kernels of trl/kernels/chunked_logprob.py) met Triton's CUDA launcher, which needs a
    // GPU: an ImportError from Triton's cache, nothing tested. Triton's own interpreter runs the same kernels on
    // the CPU (each argument's storage copied to the host and back: no device memory), so the job's kernels
    // run as written; Inductor honours it too. A job's own env may set it otherwise.
    env.try_emplace("TRITON_INTERPRET", "1");
  }
  // For the Python probe and for C++ code using oomh::recover::begin_step alike.
  if (!ctx.flush_steps.empty()) {
    std::string steps;
    for (int64_t s : ctx.flush_steps) steps += (steps.empty() ? "" : ",") + std::to_string(s);
    env["OOMH_FLUSH_AT_STEPS"] = steps;
  }
  if (!ctx.saved_steps.empty()) env["OOMH_SAVED_STEPS"] = ctx.saved_steps;  // Note [A resume numbered by what it loaded]
  if (job.step_base != 1) env["OOMH_STEP_BASE"] = std::to_string(job.step_base);  // Note [Step numbering]
  // Note [A probe that pays for what is checked] (include/oomharness/evidence.h): the job's own env may ask
  // for more ("all").
  env.try_emplace("OOMH_EVIDENCE", job.evidence());
  if (ctx.rank) {
    // The job's own env may not override these: each rank must know which it is.
    env["RANK"] = std::to_string(*ctx.rank);
    env["LOCAL_RANK"] = std::to_string(ctx.local_rank.value_or(*ctx.rank));
    env["WORLD_SIZE"] = std::to_string(ctx.world_size);
    env["LOCAL_WORLD_SIZE"] = std::to_string(ctx.local_world_size > 0 ? ctx.local_world_size : ctx.world_size);
    env["GROUP_RANK"] = std::to_string(ctx.node);
    env["MASTER_ADDR"] = ctx.master_addr.empty() ? std::string("127.0.0.1") : ctx.master_addr;
    env["MASTER_PORT"] = std::to_string(ctx.master_port);
    env["OOMH_STACKS"] = ctx.stacks_path;
    // Note [Slurm's task variables for each rank]
    // Under Slurm the runner (a node agent, one srun task per node, or the batch script) passes on its own
    // task's variables: every rank of a node would read the agent's SLURM_PROCID and SLURM_NTASKS (the node's
    // index and the number of nodes). Code that takes its rank from Slurm (`srun python train.py` style, and
    // Lightning's SLURMEnvironment, which reads SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID and SLURM_NODEID)
    // would then start every rank as the same one. So a rank run under Slurm gets the variables srun would
    // give the task it stands for: one task per rank, ranks_per_node per node.
    if (env.count("SLURM_JOB_ID") && env.count("SLURM_PROCID")) {
      const int world = ctx.world_size;
      const int per_node = ctx.local_world_size > 0 ? ctx.local_world_size : world;
      const int nodes = per_node > 0 ? (world + per_node - 1) / per_node : 1;
      slurm_task_variables(env, *ctx.rank, ctx.local_rank.value_or(*ctx.rank), ctx.node, nodes, per_node);
    }
  } else if (ctx.torchrun_node) {
    // Note [One torchrun per node] in node_group.h: what `srun --ntasks-per-node=1 torchrun ...` gives each
    // node's torchrun: the node's task, and the rendezvous; torchrun gives its ranks RANK and the rest.
    env["MASTER_ADDR"] = ctx.master_addr.empty() ? std::string("127.0.0.1") : ctx.master_addr;
    env["MASTER_PORT"] = std::to_string(ctx.master_port);
    slurm_task_variables(env, *ctx.torchrun_node, 0, *ctx.torchrun_node, ctx.nodes, 1);
  }
  prepend_path(env, "LD_LIBRARY_PATH", paths.driver_library_dir);
  if (!ctx.gpus.empty() && job.device != DeviceChoice::virtual_device) {
    // Note [One GPU per rank] in gpu_packing.h: every rank sees every rank's GPU; LOCAL_RANK picks its own.
    std::string visible;
    for (int g : ctx.gpus) visible += (visible.empty() ? "" : ",") + std::to_string(g);
    env["CUDA_VISIBLE_DEVICES"] = visible;
  }
  // Note [NVLink multicast off]
  // NCCL's NVLS algorithms (NVLink SHARP, multicast objects) fail or hang on machines whose fabric manager
  // or driver does not offer multicast, which includes the GPU machines this project is tested on (their
  // notes ask for it off). A job that sets NCCL_NVLS_ENABLE itself, or whose runner has it set, keeps that.
  env.try_emplace("NCCL_NVLS_ENABLE", std::string("0"));
  if (ctx.threads) env.try_emplace("OMP_NUM_THREADS", std::to_string(*ctx.threads));  // Note [CPU share of packed jobs]
  return flatten(env);
}

int free_local_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::vector<std::string> sidecar_environment(const JobSpec& job, const HarnessPaths& paths, std::optional<int> gpu) {
  EnvMap env = runner_environment();
  for (const auto& [k, v] : job.env) env[k] = v;
  prepend_path(env, "LD_LIBRARY_PATH", paths.driver_library_dir);
  if (gpu) env["CUDA_VISIBLE_DEVICES"] = std::to_string(*gpu);
  return flatten(env);
}

std::vector<std::string> attempt_argv(const JobSpec& job, const std::string& workdir, int attempt) {
  std::vector<std::string> argv;
  argv.reserve(job.argv.size());
  for (const std::string& a : job.argv) argv.push_back(substitute_runtime(a, workdir, attempt));
  return argv;
}

std::string resolve_program(const std::string& argv0, const std::vector<std::string>& env) {
  if (argv0.empty()) return {};
  if (argv0.find('/') != std::string::npos) return argv0;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& kv : env)
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string candidate = (end > start ? path.substr(start, end - start) : std::string(".")) + "/" + argv0;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

JobSetup::JobSetup(const std::vector<std::string>& env, std::string cwd) : cwd_(std::move(cwd)), parent_(process_ids().pid) {
  envp_.reserve(env.size() + 1);
  for (const std::string& kv : env) envp_.push_back(kv.c_str());
  envp_.push_back(nullptr);
}

boost::system::error_code JobSetup::on_setup(boost::process::v2::posix::default_launcher& launcher,
                                             const boost::process::v2::filesystem::path&, const char* const*) {
  launcher.env = envp_.data();
  return {};
}

// Runs in the child between fork and exec: async-signal-safe calls only.
boost::system::error_code JobSetup::on_exec_setup(boost::process::v2::posix::default_launcher&,
                                                  const boost::process::v2::filesystem::path&, const char* const*) {
  // Its own session (and so its own process group): Note [Signals a job may send] in signals.h.
  if (setsid() < 0) return {errno, boost::system::system_category()};
  // Note [Nothing left behind] in job_runner_reaping.cpp: the job's leader dies with the runner, even one killed
  // with SIGKILL. The runner may have died between fork and prctl: then our parent is no longer it. In the
  // run's PID namespace getppid() is 0 (the runner is outside it): /proc names the parent as the runner does
  // (Note [Pids the runner can see] in include/oomharness/process_ids.h).
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return {errno, boost::system::system_category()};
  if (process_ids().ppid != parent_) _exit(127);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP, SIGQUIT}) signal(sig, SIG_DFL);
  if (!cwd_.empty() && chdir(cwd_.c_str()) != 0) return {errno, boost::system::system_category()};
  return {};
}

}  // namespace oomh::exec
