# python/oomharness/_abi.py from the C++ tables (Note [Generated, not checked] in runner/src/app/python_abi.cpp).
#   cmake -DOOMH=<oomharness> -DFILE=<_abi.py> -DMODE=write|check -P python_abi.cmake
# write: the module made again (a temporary file, then renamed); check: fails, showing the difference, when
# FILE is not what the tables give.
# Beside FILE for a write (a rename in one file system); in the current folder (the build's) for a check.
if(MODE STREQUAL "write")
  set(new "${FILE}.new")
else()
  set(new "${CMAKE_CURRENT_BINARY_DIR}/python_abi.py.new")
endif()
execute_process(COMMAND "${OOMH}" dev python-abi OUTPUT_FILE "${new}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE "${new}")
  message(FATAL_ERROR "${OOMH} dev python-abi failed (${rc})")
endif()
if(MODE STREQUAL "write")
  file(RENAME "${new}" "${FILE}")
  return()
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${FILE}" "${new}" RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  execute_process(COMMAND diff -u "${FILE}" "${new}")
  file(REMOVE "${new}")
  message(FATAL_ERROR "${FILE} is stale: the C++ tables changed and it was not made again. Run "
                      "`cmake --build <build> --target python_abi` and commit the result.")
endif()
file(REMOVE "${new}")
