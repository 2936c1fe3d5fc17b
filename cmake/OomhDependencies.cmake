# Every dependency comes from a Debian bookworm package. A missing one stops configuration and names
# the package to install (scripts/deps.sh installs them all).

function(oomh_require found_var what apt_package)
  if(NOT ${found_var})
    message(FATAL_ERROR
      "oomharness needs ${what}, which was not found.\n"
      "Install it with:  apt-get install ${apt_package}\n"
      "(or run scripts/deps.sh, which installs everything the project needs)")
  endif()
endfunction()

find_package(Threads REQUIRED)

# CUDA: headers only. The shim never links libcuda; it finds the real driver at run time.
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  set(OOMH_CUDA_INCLUDE_DIRS ${CUDAToolkit_INCLUDE_DIRS})
else()
  find_path(OOMH_CUDA_H cuda.h PATHS /usr/local/cuda/include ENV CUDA_HOME PATH_SUFFIXES include)
  oomh_require(OOMH_CUDA_H "the CUDA Toolkit headers (cuda.h)" "nvidia-cuda-toolkit (or CUDA Toolkit 13 at /usr/local/cuda)")
  set(OOMH_CUDA_INCLUDE_DIRS ${OOMH_CUDA_H})
endif()
add_library(oomh_cuda_headers INTERFACE)
add_library(oomh::cuda_headers ALIAS oomh_cuda_headers)
target_include_directories(oomh_cuda_headers SYSTEM INTERFACE ${OOMH_CUDA_INCLUDE_DIRS})

find_package(yaml-cpp QUIET)
oomh_require(yaml-cpp_FOUND "yaml-cpp" "libyaml-cpp-dev")
if(NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp)
endif()

# RE2 matches every pattern a user or a job can feed (observe: regexes, -k globs) in linear time and
# without recursion: std::regex crashed on long lines and froze on backtracking patterns (issue 12).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(OOMH_RE2 QUIET IMPORTED_TARGET re2)
endif()
if(TARGET PkgConfig::OOMH_RE2)
  add_library(oomh_re2 INTERFACE)
  target_link_libraries(oomh_re2 INTERFACE PkgConfig::OOMH_RE2)
else()
  find_path(OOMH_RE2_H re2/re2.h)
  find_library(OOMH_RE2_LIB re2)
  set(_oomh_re2_found FALSE)
  if(OOMH_RE2_H AND OOMH_RE2_LIB)
    set(_oomh_re2_found TRUE)
  endif()
  oomh_require(_oomh_re2_found "RE2" "libre2-dev")
  add_library(oomh_re2 INTERFACE)
  target_include_directories(oomh_re2 SYSTEM INTERFACE ${OOMH_RE2_H})
  target_link_libraries(oomh_re2 INTERFACE ${OOMH_RE2_LIB} Threads::Threads)
endif()
add_library(oomh::re2 ALIAS oomh_re2)

find_package(nlohmann_json 3.10 QUIET)
oomh_require(nlohmann_json_FOUND "nlohmann-json" "nlohmann-json3-dev")

find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  find_path(OOMH_CLI11_H CLI/CLI.hpp)
  oomh_require(OOMH_CLI11_H "CLI11" "libcli11-dev")
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${OOMH_CLI11_H})
endif()

# Boost.Process v2 is header-only from 1.80 on; we use it with std::filesystem.
find_package(Boost 1.80 QUIET CONFIG)
if(NOT Boost_FOUND)
  find_package(Boost 1.80 QUIET)
endif()
oomh_require(Boost_FOUND "Boost 1.80 or newer (Boost.Process v2)" "libboost1.81-dev (Debian 12) or libboost1.83-dev (13)")
if(NOT EXISTS "${Boost_INCLUDE_DIRS}/boost/process/v2/process.hpp")
  find_path(OOMH_BOOST_PROCESS_V2 boost/process/v2/process.hpp HINTS ${Boost_INCLUDE_DIRS})
  oomh_require(OOMH_BOOST_PROCESS_V2 "Boost.Process v2 headers" "libboost1.81-dev (Debian 12) or libboost1.83-dev (13)")
endif()
add_library(oomh_boost_process INTERFACE)
add_library(oomh::boost_process ALIAS oomh_boost_process)
target_link_libraries(oomh_boost_process INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(oomh_boost_process INTERFACE BOOST_PROCESS_USE_STD_FS BOOST_ASIO_NO_DEPRECATED)

if(OOMH_BUILD_TESTS)
  find_package(GTest QUIET)
  oomh_require(GTest_FOUND "GoogleTest and GoogleMock" "libgtest-dev libgmock-dev")
endif()

# Google Benchmark is optional: the GPU machine has no package for it, and no test needs it.
find_package(benchmark QUIET)
if(NOT benchmark_FOUND)
  message(STATUS "oomharness: Google Benchmark not found (apt-get install libbenchmark-dev); bench/ is skipped")
endif()

# LibTorch: optional, found through Torch_DIR or the PyTorch package's cmake prefix.
set(OOMH_TORCH_FOUND OFF)
if(NOT OOMH_WITH_TORCH STREQUAL "OFF")
  if(NOT Torch_DIR)
    find_program(OOMH_PYTHON3 python3)
    if(OOMH_PYTHON3)
      execute_process(COMMAND ${OOMH_PYTHON3} -c "import torch; print(torch.utils.cmake_prefix_path)"
        OUTPUT_VARIABLE _oomh_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _oomh_torch_rc)
      if(_oomh_torch_rc EQUAL 0 AND EXISTS "${_oomh_torch_prefix}/Torch")
        set(Torch_DIR "${_oomh_torch_prefix}/Torch" CACHE PATH "LibTorch's cmake directory")
      endif()
    endif()
  endif()
  if(Torch_DIR)
    find_package(Torch QUIET)
  endif()
  if(Torch_FOUND)
    set(OOMH_TORCH_FOUND ON)
    message(STATUS "oomharness: LibTorch found at ${Torch_DIR}")
  elseif(OOMH_WITH_TORCH STREQUAL "ON")
    message(FATAL_ERROR "OOMH_WITH_TORCH=ON but LibTorch was not found: set Torch_DIR or install PyTorch")
  else()
    message(STATUS "oomharness: LibTorch not found; the LibTorch examples are skipped")
  endif()
endif()
