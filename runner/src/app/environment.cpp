// Environment detection for the results file and the report's header.

#include "oomharness/runner/environment.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <regex>

#include "oomharness/version.h"

extern char** environ;

namespace oomh {

namespace {
std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}
}  // namespace

CommandOutput run_command(const std::vector<std::string>& argv, double timeout_seconds) {
  CommandOutput result;
  if (argv.empty()) return result;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return result;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = read(pipe_fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (result.out.size() < (1u << 20)) result.out.append(buf, static_cast<size_t>(got));
  }
  close(pipe_fds[0]);
  if (result.timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!result.timed_out && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

std::optional<std::string> parse_nvcc_version(const std::string& text) {
  static const std::regex re(R"(release ([0-9]+\.[0-9]+))");
  std::smatch m;
  if (std::regex_search(text, m, re)) return m[1].str();
  return std::nullopt;
}

std::optional<std::string> parse_smi_cuda_version(const std::string& text) {
  static const std::regex re(R"(CUDA Version:\s*([0-9]+\.[0-9]+))");
  std::smatch m;
  if (std::regex_search(text, m, re)) return m[1].str();
  return std::nullopt;
}

std::optional<GpuIdentity> detect_gpu(double timeout_seconds) {
  CommandOutput q = run_command({"nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"}, timeout_seconds);
  if (q.exit_code != 0) return std::nullopt;
  std::string first = q.out.substr(0, q.out.find('\n'));
  size_t comma = first.find(',');
  if (first.empty() || comma == std::string::npos) return std::nullopt;
  GpuIdentity gpu;
  gpu.name = trim(first.substr(0, comma));
  gpu.driver_version = trim(first.substr(comma + 1));
  CommandOutput banner = run_command({"nvidia-smi"}, timeout_seconds);
  if (banner.exit_code == 0)
    if (auto v = parse_smi_cuda_version(banner.out)) gpu.cuda_version = *v;
  return gpu;
}

Environment detect_environment(const EnvironmentOptions& options) {
  Environment env;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) env.hostname = host;
  env.harness_version = kVersion;
  env.command_line = options.command_line;
  env.simulated_device = options.simulated;
  if (options.simulated) {
    env.gpu_name = "simulated (CPU driver double)";
  } else if (auto gpu = detect_gpu()) {
    env.gpu_name = gpu->name;
    env.driver_version = gpu->driver_version;
    env.cuda_version = gpu->cuda_version;
  }
  // The toolkit is often installed without being on PATH.
  for (const char* nvcc_path : {"nvcc", "/usr/local/cuda/bin/nvcc"}) {
    if (!env.cuda_version.empty()) break;
    CommandOutput nvcc = run_command({nvcc_path, "--version"}, 10);
    if (nvcc.exit_code == 0)
      if (auto v = parse_nvcc_version(nvcc.out)) env.cuda_version = *v;
  }
  if (options.detect_torch) {
    CommandOutput torch = run_command({"python3", "-c", "import torch;print(torch.__version__)"}, 10);
    if (torch.exit_code == 0 && !trim(torch.out).empty()) env.frameworks["torch"] = trim(torch.out);
  }
  return env;
}

}  // namespace oomh
