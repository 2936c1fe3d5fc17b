// Environment detection for the results file and the report's header.

#include "oomharness/runner/environment.h"

#include <unistd.h>

#include <regex>

#include "oomharness/version.h"

namespace oomh {

namespace {
std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}
}  // namespace

std::optional<std::string> parse_nvcc_version(const std::string& text) {
  static const std::regex re(R"(release ([0-9]+\.[0-9]+))");
  std::smatch m;
  if (std::regex_search(text, m, re)) return m[1].str();
  return std::nullopt;
}

std::string device_name(const EnvironmentOptions& options) {
  if (options.simulated) return "simulated (CPU driver double)";
  return options.gpu ? options.gpu->name : std::string();
}

Environment detect_environment(const EnvironmentOptions& options) {
  Environment env;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) env.hostname = host;
  env.harness_version = kVersion;
  env.command_line = options.command_line;
  env.simulated_device = options.simulated;
  env.gpu_name = device_name(options);
  if (!options.simulated && options.gpu) {
    env.driver_version = options.gpu->driver_version;
    env.cuda_version = options.gpu->cuda_version;
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
