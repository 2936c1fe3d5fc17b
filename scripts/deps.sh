#!/usr/bin/env bash
# Installs what oomharness needs to build and test, from Debian's packages, and only what is missing:
# on a machine that has everything (the GPU machine, a warm CI runner) it never calls apt.
#
#   scripts/deps.sh build   # compilers, CMake, libraries
#   scripts/deps.sh test    # build + GoogleTest, Google Benchmark, Python and Chromium for the tests
set -euo pipefail

what=${1:-build}
missing=()

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
need_file libyaml-cpp-dev /usr/include/yaml-cpp/yaml.h
need_file nlohmann-json3-dev /usr/include/nlohmann/json.hpp
need_file libcli11-dev /usr/include/CLI/CLI.hpp
need_file libre2-dev /usr/include/re2/re2.h
need_file libboost1.81-dev /usr/include/boost/process/v2/process.hpp
need_file libgtest-dev /usr/include/gtest/gtest.h
need_file libgmock-dev /usr/include/gmock/gmock.h
# PyTorch on the CPU (1.13 on Debian 12): the demo without a GPU runs real trainers on the virtual CUDA
# device, and tests/python checks the probe, the recovery code and the device against it.
want_file python3-torch /usr/lib/python3/dist-packages/torch/__init__.py
# Debian's torch calls the BLAS the alternatives system points at: OpenBLAS instead of the reference BLAS
# made a small training run here 13x faster.
want_file libopenblas0-pthread /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 /usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3
if [ "$what" = test ]; then
  want_file libbenchmark-dev /usr/include/benchmark/benchmark.h /usr/local/include/benchmark/benchmark.h
  # Reports' schema test validates results files against docs/results-schema.json.
  want_file python3-jsonschema /usr/lib/python3/dist-packages/jsonschema/__init__.py
  # Reports' screenshot test renders the HTML report in headless Chromium.
  want_cmd chromium chromium
  # tests/pytest_plugin: the pip package and its pytest plugin, run by Debian's pytest (with xdist), built
  # offline by Debian's setuptools and pip.
  want_file python3-pytest /usr/lib/python3/dist-packages/pytest/__init__.py
  want_file python3-pytest-xdist /usr/lib/python3/dist-packages/xdist/__init__.py
  want_file python3-setuptools /usr/lib/python3/dist-packages/setuptools/__init__.py
  want_file python3-pip /usr/lib/python3/dist-packages/pip/__init__.py
  # The Slurm backend's end-to-end tests bring up a one-node Slurm (scripts/slurm-local.sh; auth/none, no munge).
  want_cmd slurmctld slurmctld
  want_cmd slurmd slurmd
  want_cmd slurm-client sbatch
  # scripts/fuzz.sh: the libFuzzer targets of tests/fuzz build with clang and its libFuzzer runtime.
  want_cmd clang clang++
  want_file libclang-rt-14-dev /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a \
    /usr/lib/llvm-14/lib/clang/14/lib/linux/libclang_rt.fuzzer-x86_64.a
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
# libboost1.81-dev conflicts with the default libboost1.74-dev: apt replaces it.
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
