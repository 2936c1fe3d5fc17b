# `cmake --install` and the Debian package (CPack): the layout docs/cli.md ("Installed layout") describes.
# The command finds every piece relative to its own folder (Note [Finding the harness's pieces] in
# runner/src/app/paths.h), with the folder names below, so an installed tree works from any prefix and
# with no build tree: OOMH_INSTALL_PKGLIBDIR and OOMH_INSTALL_PKGDATADIR are compiled into it.
#
#   bin/oomharness
#   lib/oomharness/          the shim, the reservation sidecar, the CPU driver double and the emulated
#                            trainer (the simulated demo's job): helpers, not commands
#   share/oomharness/        python/ (the probe package and sitecustomize.py for jobs), suites/, examples/
#   share/doc/oomharness/    README.md and docs/*.md
#   share/man/man1/oomharness.1, share/bash-completion/completions/oomharness
#
# lib/oomharness, not ${CMAKE_INSTALL_LIBDIR}: GNUInstallDirs gives lib/<multiarch> under /usr, and these
# are the command's private helpers, found next to it, not libraries for the linker.
#
# Two components: `runtime` (what the command runs with: bin, lib/oomharness, share/oomharness) and `docs`
# (README, docs, man page, completion). `cmake --install` and the Debian package take both; the Python wheel
# (pyproject.toml, Note [One wheel] in CMakeLists.txt) takes `runtime` into oomharness/_native/.

include(GNUInstallDirs)

# The wheel bundles every shared library its programs need beyond glibc, libstdc++ and libgcc_s (none where
# Debian ships static archives of them: cmake/OomhDependencies.cmake) into lib/oomharness/bundled, found
# through an RPATH of $ORIGIN.
set(_oomh_deps "")
if(OOMH_WHEEL)
  set(_oomh_deps RUNTIME_DEPENDENCY_SET oomh_bundled)
  set(_oomh_bundled "${OOMH_INSTALL_PKGLIBDIR}/bundled")
  foreach(_t oomharness oomh-reserve oomharness_inject)
    if(TARGET ${_t})
      get_target_property(_type ${_t} TYPE)
      if(_type STREQUAL "EXECUTABLE" AND _t STREQUAL "oomharness")
        set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN/../${_oomh_bundled}")
      else()
        set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN/bundled")
      endif()
    endif()
  endforeach()
endif()
if(TARGET oomharness)
  install(TARGETS oomharness ${_oomh_deps} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
endif()
if(TARGET oomharness_inject)
  install(TARGETS oomharness_inject ${_oomh_deps} LIBRARY DESTINATION ${OOMH_INSTALL_PKGLIBDIR} COMPONENT runtime)
endif()
if(TARGET oomh-reserve)
  install(TARGETS oomh-reserve ${_oomh_deps} RUNTIME DESTINATION ${OOMH_INSTALL_PKGLIBDIR} COMPONENT runtime)
endif()
if(OOMH_WHEEL)
  install(RUNTIME_DEPENDENCY_SET oomh_bundled DESTINATION ${_oomh_bundled} COMPONENT runtime
    PRE_EXCLUDE_REGEXES "^ld-linux" "^linux-vdso" "^lib(c|m|dl|rt|pthread|util|resolv)\\.so" "^libstdc\\+\\+\\.so"
      "^libgcc_s\\.so" "^libcuda\\.so" "^libnvidia-ml\\.so"
    POST_EXCLUDE_REGEXES "^/lib(64)?/ld-linux")
endif()
# The simulated demo (and --simulate) needs the CPU driver double and the emulated trainer; both are
# defined under tests/ and built with or without the tests (CMakeLists.txt).
if(TARGET oomh_cuda_double)
  install(TARGETS oomh_cuda_double LIBRARY DESTINATION ${OOMH_INSTALL_PKGLIBDIR}/cuda_double COMPONENT runtime)
  install(FILES "${OOMH_CUDA_DOUBLE_DIR}/libcuda.so" DESTINATION ${OOMH_INSTALL_PKGLIBDIR}/cuda_double COMPONENT runtime)
  # The NVML double, in nvml/ beside it: jobs on the virtual device find it there (Note [The context on the
  # virtual device] in runner/src/exec/launch.cpp).
  install(TARGETS oomh_nvml_double LIBRARY DESTINATION ${OOMH_INSTALL_PKGLIBDIR}/cuda_double/nvml COMPONENT runtime)
endif()
if(TARGET emulated_trainer)
  install(TARGETS emulated_trainer RUNTIME DESTINATION ${OOMH_INSTALL_PKGLIBDIR} COMPONENT runtime)
endif()

install(DIRECTORY python/ DESTINATION ${OOMH_INSTALL_PKGDATADIR}/python COMPONENT runtime
  FILES_MATCHING PATTERN "*.py" PATTERN "pyproject.toml" PATTERN "README.md"
  PATTERN "__pycache__" EXCLUDE PATTERN "build" EXCLUDE PATTERN "*.egg-info" EXCLUDE PATTERN "requirements" EXCLUDE)
install(DIRECTORY suites/ DESTINATION ${OOMH_INSTALL_PKGDATADIR}/suites COMPONENT runtime FILES_MATCHING PATTERN "*.yaml")
install(DIRECTORY examples/python DESTINATION ${OOMH_INSTALL_PKGDATADIR}/examples COMPONENT runtime
  FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT docs)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT docs FILES_MATCHING PATTERN "*.md" PATTERN "*.json")
install(FILES docs/oomharness.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT docs)
install(FILES scripts/completion/oomharness.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  COMPONENT docs RENAME oomharness)

# The Debian package: `cpack -G DEB --config build/CPackConfig.cmake` (scripts/package.sh).
set(CPACK_PACKAGE_NAME oomharness)
set(CPACK_PACKAGE_VENDOR "oomharness")
set(CPACK_PACKAGE_CONTACT "oomharness maintainers <oomharness@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The emulated trainer links libcuda.so.1 as any CUDA program does; in the package that is the CPU driver
# double, a private library dpkg-shlibdeps must be told of (jobs get it through LD_LIBRARY_PATH).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${CPACK_PACKAGING_INSTALL_PREFIX}/${OOMH_INSTALL_PKGLIBDIR}/cuda_double")
# The shim needs nothing beyond libc; Python jobs need python3 (PyTorch is the user's own).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${PROJECT_DESCRIPTION}
 oomharness runs training commands under a CUDA allocator shim that makes allocations fail on purpose or
 makes the GPU look smaller, and checks that the code recovered: halved its batch, emptied the cache and
 retried, resumed from its checkpoint. Without a GPU it runs on a CPU stand-in for the driver.")
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
include(CPack)
