# Preload tests: children under LD_PRELOAD=$<TARGET_FILE:oomharness_inject> against the driver double.

add_executable(oomh_cuda_client cuda_client.cpp)
target_link_libraries(oomh_cuda_client PRIVATE oomh_cuda_double oomh::cuda_headers Threads::Threads ${CMAKE_DL_LIBS}
  oomh::warnings)
# The client runs unsanitized even in a sanitized build: it is a stand-in for a user's program.

add_library(oomh_early_dlsym SHARED early_dlsym.cpp)
target_link_libraries(oomh_early_dlsym PRIVATE oomh::cuda_headers ${CMAKE_DL_LIBS})

oomh_add_gtest(injector_preload_test
  SOURCES preload_test.cpp
  LIBS oomh::abi nlohmann_json::nlohmann_json rt
  LABELS cpu)
add_dependencies(injector_preload_test oomharness_inject oomh_cuda_double oomh_cuda_client oomh_nvml_double oomh_early_dlsym)
target_compile_definitions(injector_preload_test PRIVATE
  OOMH_INJECT_LIBRARY="$<TARGET_FILE:oomharness_inject>"
  OOMH_CUDA_DOUBLE_DIR="$<TARGET_FILE_DIR:oomh_cuda_double>"
  OOMH_NVML_DOUBLE_DIR="$<TARGET_FILE_DIR:oomh_nvml_double>"
  OOMH_CUDA_CLIENT="$<TARGET_FILE:oomh_cuda_client>"
  OOMH_EARLY_LIBRARY="$<TARGET_FILE:oomh_early_dlsym>")
if(OOMH_SANITIZE)
  target_compile_definitions(injector_preload_test PRIVATE OOMH_SANITIZED=1)
endif()
# Children run under a per-test deadline too; the include file in CMakeLists.txt bounds each test (TIMEOUT 300).
