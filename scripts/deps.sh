#!/usr/bin/env bash
# Installs what oomharness needs to build and test, from Debian's packages (12 or 13), and only what is
# missing: on a machine that has everything (the GPU machine, a warm CI runner) it never calls apt. Python
# packages (PyTorch, pytest, the ecosystem's libraries) never come from here: scripts/venv.sh puts them
# into virtual environments from the pinned files in python/requirements/.
#
#   scripts/deps.sh build   # compilers, CMake, libraries, and a Python that can make a virtual environment
#   scripts/deps.sh test    # build + GoogleTest, Google Benchmark, Chromium, Slurm, clang/libFuzzer
set -euo pipefail

what=${1:-build}
missing=()

# Package names that differ between Debian 12 (bookworm) and 13 (trixie): Boost.Process v2 needs Boost 1.80
# or newer (12's default is 1.74: 1.81 is packaged beside it; 13's default is 1.83), and libFuzzer's runtime
# comes with the default clang's version (14 on 12, 19 on 13).
debian_version=$(. /etc/os-release 2>/dev/null; echo "${VERSION_ID:-}")
case "$debian_version" in
  13*) boost=libboost1.83-dev; llvm=19 ;;
  *)   boost=libboost1.81-dev; llvm=14 ;;
esac

need_file() {  # need_file PACKAGE FILE...: the package is needed unless one of the files exists
  local pkg=$1; shift
  for f in "$@"; do [ -e "$f" ] && return 0; done
  missing+=("$pkg")
}
need_cmd() {   # need_cmd PACKAGE COMMAND
  command -v "$2" >/dev/null 2>&1 || missing+=("$1")
}

optional=()
want_file() {  # like need_file, for what only some tests use: those tests skip without it
  local pkg=$1; shift
  for f in "$@"; do [ -e "$f" ] && return 0; done
  optional+=("$pkg")
}
want_cmd() {
  command -v "$2" >/dev/null 2>&1 || optional+=("$1")
}

need_cmd g++ g++
need_cmd cmake cmake
need_cmd ninja-build ninja
need_cmd python3 python3
# scripts/venv.sh makes the Python environments with `python3 -m venv` (Debian's python3 needs python3-venv;
# a pyenv or python.org Python has it).
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
need_file libyaml-cpp-dev /usr/include/yaml-cpp/yaml.h
need_file nlohmann-json3-dev /usr/include/nlohmann/json.hpp
need_file libcli11-dev /usr/include/CLI/CLI.hpp
need_file libre2-dev /usr/include/re2/re2.h
need_file "$boost" /usr/include/boost/process/v2/process.hpp
need_file libgtest-dev /usr/include/gtest/gtest.h
need_file libgmock-dev /usr/include/gmock/gmock.h
if [ "$what" = test ]; then
  want_file libbenchmark-dev /usr/include/benchmark/benchmark.h /usr/local/include/benchmark/benchmark.h
  # The wheel's test (tests/install/check_wheel.sh) builds the C++ again in a sibling folder; through ccache
  # (scripts/test.sh uses it where installed) that build takes its objects from the main one.
  want_cmd ccache ccache
  # Reports' screenshot test renders the HTML report in headless Chromium.
  want_cmd chromium chromium
  # The Slurm backend's end-to-end tests bring up a one-node Slurm (scripts/slurm-local.sh; auth/none, no munge).
  want_cmd slurmctld slurmctld
  want_cmd slurmd slurmd
  want_cmd slurm-client sbatch
  # ... and a multi-node one, each slurmd in its own network namespace (scripts/slurm-multinode.sh).
  want_cmd iproute2 ip
  # scripts/fuzz.sh: the libFuzzer targets of tests/fuzz build with clang and its libFuzzer runtime.
  want_cmd clang clang++
  want_file "libclang-rt-$llvm-dev" /usr/lib/llvm-$llvm/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a \
    /usr/lib/llvm-$llvm/lib/clang/*/lib/*/libclang_rt.fuzzer.a
fi

# CUDA headers: only cuda.h is needed, from CUDA 12 or newer (cuGetProcAddress_v2).
cuda_h=""
for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13.0 /usr/local/cuda-12; do
  [ -n "$d" ] && [ -e "$d/include/cuda.h" ] && { cuda_h="$d/include/cuda.h"; break; }
done
if [ -z "$cuda_h" ]; then
  echo "scripts/deps.sh: cuda.h not found: install the CUDA Toolkit (12 or newer) at /usr/local/cuda, or set CUDA_HOME" >&2
  exit 1
fi

# Optional packages are installed on Debian (the project's reference machine, CI included); elsewhere
# (the GPU machine: Ubuntu, no package registry) the tests that need them skip.
is_debian=false
grep -qs '^ID=debian' /etc/os-release && is_debian=true
if [ ${#optional[@]} -gt 0 ]; then
  if $is_debian; then
    missing+=("${optional[@]}")
  else
    echo "scripts/deps.sh: not installing ${optional[*]} (not Debian): the tests that need them will skip" >&2
  fi
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
# On Debian 12, libboost1.81-dev conflicts with the default libboost1.74-dev: apt replaces it.
echo "scripts/deps.sh: installing ${missing[*]}" >&2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "scripts/deps.sh: missing ${missing[*]} and no apt-get to install them" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
