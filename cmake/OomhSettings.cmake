# Project-wide compiler settings as INTERFACE targets (ccache's habit): a target opts in by linking
# oomh::warnings and oomh::settings, nothing is set globally.

add_library(oomh_warnings INTERFACE)
add_library(oomh::warnings ALIAS oomh_warnings)
target_compile_options(oomh_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Woverloaded-virtual -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough>
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra>)

add_library(oomh_settings INTERFACE)
add_library(oomh::settings ALIAS oomh_settings)
target_compile_features(oomh_settings INTERFACE cxx_std_20)
target_compile_definitions(oomh_settings INTERFACE _GNU_SOURCE)

# Fuzzing (tests/fuzz/README.md): libFuzzer is clang's, and every library a target links must carry its
# coverage instrumentation, so the option instruments the whole build and adds ASan + UBSan to it.
if(OOMH_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "OOMH_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  if(NOT OOMH_SANITIZE)
    set(OOMH_SANITIZE "address;undefined")
  endif()
  target_compile_options(oomh_settings INTERFACE -fsanitize=fuzzer-no-link)
endif()

if(OOMH_SANITIZE)
  list(JOIN OOMH_SANITIZE "," _oomh_san)
  message(STATUS "oomharness: building with -fsanitize=${_oomh_san}")
  target_compile_options(oomh_settings INTERFACE -fsanitize=${_oomh_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(oomh_settings INTERFACE -fsanitize=${_oomh_san})
endif()
