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

include(GNUInstallDirs)

if(TARGET oomharness)
  install(TARGETS oomharness RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(TARGET oomharness_inject)
  install(TARGETS oomharness_inject LIBRARY DESTINATION ${OOMH_INSTALL_PKGLIBDIR})
endif()
if(TARGET oomh-reserve)
  install(TARGETS oomh-reserve RUNTIME DESTINATION ${OOMH_INSTALL_PKGLIBDIR})
endif()
# The simulated demo (and --simulate) needs the CPU driver double and the emulated trainer; both are
# defined under tests/ and exist when OOMH_BUILD_TESTS is on (the default, and what the package builds).
if(TARGET oomh_cuda_double)
  install(TARGETS oomh_cuda_double LIBRARY DESTINATION ${OOMH_INSTALL_PKGLIBDIR}/cuda_double)
  install(FILES "${OOMH_CUDA_DOUBLE_DIR}/libcuda.so" DESTINATION ${OOMH_INSTALL_PKGLIBDIR}/cuda_double)
  # The NVML double, in nvml/ beside it: jobs on the virtual device find it there (Note [The context on the
  # virtual device] in runner/src/exec/launch.cpp).
  install(TARGETS oomh_nvml_double LIBRARY DESTINATION ${OOMH_INSTALL_PKGLIBDIR}/cuda_double/nvml)
endif()
if(TARGET emulated_trainer)
  install(TARGETS emulated_trainer RUNTIME DESTINATION ${OOMH_INSTALL_PKGLIBDIR})
endif()

install(DIRECTORY python/ DESTINATION ${OOMH_INSTALL_PKGDATADIR}/python
  FILES_MATCHING PATTERN "*.py" PATTERN "pyproject.toml" PATTERN "README.md"
  PATTERN "__pycache__" EXCLUDE PATTERN "build" EXCLUDE PATTERN "*.egg-info" EXCLUDE)
install(DIRECTORY suites/ DESTINATION ${OOMH_INSTALL_PKGDATADIR}/suites FILES_MATCHING PATTERN "*.yaml")
install(DIRECTORY examples/python DESTINATION ${OOMH_INSTALL_PKGDATADIR}/examples
  FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md" PATTERN "*.json")
install(FILES docs/oomharness.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES scripts/completion/oomharness.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME oomharness)

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
