// Finding the harness's pieces: Note [Finding the harness's pieces] in paths.h.

#include "app/paths.h"

#include "oomharness/runner/command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;

namespace oomh::app {

namespace {

const char* source_dir() {
#ifdef OOMH_SOURCE_DIR
  return OOMH_SOURCE_DIR;
#else
  return "";
#endif
}

// The installed layout (cmake/OomhInstall.cmake), relative to the prefix.
#ifndef OOMH_INSTALL_PKGLIBDIR
#define OOMH_INSTALL_PKGLIBDIR "lib/oomharness"
#endif
#ifndef OOMH_INSTALL_PKGDATADIR
#define OOMH_INSTALL_PKGDATADIR "share/oomharness"
#endif
const std::string kLibDir = OOMH_INSTALL_PKGLIBDIR;
const std::string kDataDir = OOMH_INSTALL_PKGDATADIR;

// `relative` under the executable's folder and up to four folders above it.
std::vector<std::string> upward(const std::vector<std::string>& relatives) {
  std::vector<std::string> out;
  fs::path dir = executable_dir();
  for (int level = 0; level < 5 && !dir.empty(); ++level) {
    for (const auto& r : relatives) out.push_back((dir / r).lexically_normal().string());
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
  return out;
}

Found first_existing(const char* env_name, std::vector<std::string> candidates, bool want_dir) {
  Found f;
  if (const char* v = std::getenv(env_name); v && *v) candidates.insert(candidates.begin(), v);
  for (const auto& c : candidates) {
    f.tried.push_back(c);
    std::error_code ec;
    bool ok = want_dir ? fs::is_directory(c, ec) : fs::is_regular_file(c, ec);
    if (ok) {
      f.path = fs::absolute(c, ec).lexically_normal().string();
      return f;
    }
  }
  return f;
}

}  // namespace

std::string Found::tried_text() const {
  std::string s = "looked in ";
  for (size_t i = 0; i < tried.size(); ++i) s += (i ? ", " : "") + tried[i];
  return s;
}

std::string executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return exe.parent_path().string();
}

Found find_inject_library() {
  auto c = upward({"injector/liboomharness_inject.so", "liboomharness_inject.so", kLibDir + "/liboomharness_inject.so",
                   "lib/liboomharness_inject.so"});
  return first_existing("OOMH_INJECT_LIBRARY", c, false);
}

Found find_python_probe_dir() {
  // An installed tree's copy first: an install made from a source tree that still exists uses its own.
  std::vector<std::string> c = upward({kDataDir + "/python"});
  if (*source_dir()) c.push_back(std::string(source_dir()) + "/python");
  return first_existing("OOMH_PYTHON_DIR", c, true);
}

Found find_reserve_program() {
  return first_existing("OOMH_RESERVE_PROGRAM", upward({"oomh-reserve", "runner/oomh-reserve", kLibDir + "/oomh-reserve"}), false);
}

Found find_driver_double_dir() {
  Found f = first_existing("OOMH_CUDA_DOUBLE_DIR", upward({"cuda_double/libcuda.so.1", kLibDir + "/cuda_double/libcuda.so.1"}), false);
  if (f.path) f.path = fs::path(*f.path).parent_path().string();
  return f;
}

Found find_demo_suite(bool simulated) {
  // The same scenarios twice: real PyTorch trainers on a GPU, the emulated trainer on the driver double.
  const std::string file = simulated ? "suites/demo-simulated.yaml" : "suites/demo.yaml";
  std::vector<std::string> c;
  if (const char* home = std::getenv("OOMH_HOME"); home && *home) c.push_back(std::string(home) + "/" + file);
  for (auto& p : upward({kDataDir + "/" + file})) c.push_back(p);
  if (*source_dir()) c.push_back(std::string(source_dir()) + "/" + file);
  return first_existing("OOMH_DEMO_SUITE", c, false);
}

Found find_torch_python_dir() {
  Found f;
  std::vector<std::string> candidates;
  // The Python the wheel's console script ran under (Note [The command of the wheel] in
  // python/oomharness/__main__.py): the environment the user installed oomharness into.
  if (const char* wheel_python = std::getenv("OOMH_TORCH_PYTHON"); wheel_python && *wheel_python)
    candidates.push_back(wheel_python);
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t start = 0; start <= p.size();) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      const std::string candidate = (end > start ? p.substr(start, end - start) : std::string(".")) + "/python3";
      if (access(candidate.c_str(), X_OK) == 0) {
        candidates.push_back(candidate);
        break;
      }
      start = end + 1;
    }
  }
  candidates.push_back("/usr/bin/python3");
  // From a build tree: the environments scripts/venv.sh makes in the checkout's .venv/ (scripts/demo.sh and
  // scripts/test.sh make them), in name order (the CPU build first), so that `build/runner/oomharness demo` finds the torch
  // the README's commands installed.
  if (*source_dir()) {
    std::vector<std::string> envs;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(fs::path(source_dir()) / ".venv", ec))
      envs.push_back((entry.path() / "bin" / "python3").string());
    std::sort(envs.begin(), envs.end());  // torch-2.13.0-cpu before torch-2.14.1-cuda
    candidates.insert(candidates.end(), envs.begin(), envs.end());
  }
  for (const std::string& c : candidates) {
    f.tried.push_back(c);
    if (access(c.c_str(), X_OK) != 0) continue;
    if (run_command({c, "-c", "import torch"}, 60).exit_code == 0) {
      f.path = fs::path(c).parent_path().string();
      return f;
    }
  }
  return f;
}

Found find_emulated_trainer_dir() {
  Found f = first_existing("OOMH_EMULATED_TRAINER", upward({"tests/emulated_trainer/emulated_trainer", kLibDir + "/emulated_trainer"}), false);
  if (f.path) f.path = fs::path(*f.path).parent_path().string();
  return f;
}

std::optional<std::string> resolve_paths(bool simulate, HarnessPaths& paths, bool virtual_device) {
  Found inject = find_inject_library();
  if (!inject.path)
    return "cannot find the shim liboomharness_inject.so (build target oomharness_inject, or set OOMH_INJECT_LIBRARY); " +
           inject.tried_text();
  paths.inject_library = *inject.path;
  if (Found probe = find_python_probe_dir(); probe.path) paths.python_probe_dir = *probe.path;
  if (Found reserve = find_reserve_program(); reserve.path) paths.reserve_program = *reserve.path;
  if (simulate) {
    Found dbl = find_driver_double_dir();
    if (!dbl.path)
      return "--simulate needs the CPU driver double (build target oomh_cuda_double, or set OOMH_CUDA_DOUBLE_DIR); " +
             dbl.tried_text();
    paths.driver_library_dir = *dbl.path;
  }
  if (virtual_device) {
    Found dbl = find_driver_double_dir();
    if (!dbl.path)
      return "the virtual CUDA device needs the CPU driver double (build target oomh_cuda_double, or set OOMH_CUDA_DOUBLE_DIR); " +
             dbl.tried_text();
    if (paths.python_probe_dir.empty())
      return "the virtual CUDA device needs oomharness's Python package (python; set OOMH_HOME)";
    paths.virtual_driver_dir = *dbl.path;
  }
  return std::nullopt;
}

}  // namespace oomh::app
