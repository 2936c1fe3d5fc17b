#!/usr/bin/env bash
# Checks the Python probe, the recovery code and the example trainers against the GPU machine's PyTorch,
# and builds the LibTorch trainer on its own (without the rest of the project):
#   tests/python/device_check.sh [OUT_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/tmp/oomh-device-check}
mkdir -p "$out"
py=${PYTHON:-python3}
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
for t in test_probe test_recover test_examples; do
  OOMH_SOURCE_DIR=$root "$py" "$root/tests/python/run.py" $t > "$out/$t.log" 2>&1; echo "$t rc=$?"
  tail -3 "$out/$t.log"
done
# The probe on the GPU: a real OOM caught by the code, the allocator's observer, a snapshot.
"$py" "$root/tests/python/gpu_probe_check.py" "$out" --sizes 2>&1 | tail -40
# The LibTorch trainer, built against the LibTorch inside the PyTorch package.
prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
mkdir -p "$out/lt"
cat > "$out/lt/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.18)
project(lt CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(Torch REQUIRED)
add_executable(oomh_libtorch_trainer $root/examples/libtorch/trainer.cpp)
target_include_directories(oomh_libtorch_trainer PRIVATE $root/include)
target_compile_options(oomh_libtorch_trainer PRIVATE -Wall -Wextra)
target_link_libraries(oomh_libtorch_trainer PRIVATE \${TORCH_LIBRARIES})
CM
(cd "$out/lt" && cmake -S . -B build -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > cmake.log 2>&1 &&
  cmake --build build -j8 > build.log 2>&1); echo "libtorch build rc=$?"
grep -E "error|warning: " "$out/lt/build.log" "$out/lt/cmake.log" | head -30
if [ -x "$out/lt/build/oomh_libtorch_trainer" ]; then
  for mode in halve retry none; do
    "$out/lt/build/oomh_libtorch_trainer" --recovery $mode --steps 3 | tail -2
  done
  rm -f "$out/ck.pt"
  "$out/lt/build/oomh_libtorch_trainer" --recovery checkpoint --checkpoint "$out/ck.pt" --steps 5 --save-every 5 | tail -1
  "$out/lt/build/oomh_libtorch_trainer" --recovery checkpoint --checkpoint "$out/ck.pt" --steps 7 --save-every 5 | tail -3
fi
