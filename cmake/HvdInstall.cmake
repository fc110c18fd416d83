# SPDX-License-Identifier: Apache-2.0
# `cmake --install`: libhvd_core.so, libhvd_ops.so, the static libtorch integration, public
# headers and the CMake package (hvd::hvd, hvd::torch with libtorch, component nccl) under
# <prefix> (component "hvd"), and the GPU module libhvd_nccl.so next to libhvd_ops.so (component
# "cuda", builds with NCCL); hvdrun and the Python package install from their own directories.
# `cpack -G DEB` (in the build directory) packs component hvd into hvd_<version>_<arch>.deb, for
# every host, and component cuda into hvd-cuda_<version>_<arch>.deb, for GPU hosts.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_hvd_export_targets hvd_core hvd_ops hvd)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/ ${PROJECT_SOURCE_DIR}/ops/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/core/generated/hvd/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hvd)
if(HVD_HAVE_TORCH)
  list(APPEND _hvd_export_targets hvd_grad_registry hvd_elastic_store hvd_optimizer hvd_torch)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/optimizer/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()
# hvd-timeline: the timeline report (Python 3 standard library only).
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/hvd-timeline DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${_hvd_export_targets} EXPORT hvdTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

set(HVD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hvd)
install(EXPORT hvdTargets NAMESPACE hvd:: DESTINATION ${HVD_CMAKE_DIR})
if(HVD_HAVE_NCCL)
  # Where gpu_module.cc looks: the directory of libhvd_ops.so.
  install(TARGETS hvd_nccl LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT cuda)
endif()
# Where this build found CUDA and NCCL: hints for the consumer's search (its own CUDA_HOME and
# NCCL_HOME come first).
set(HVD_CUDA_ROOT_HINT "${CUDAToolkit_ROOT}")
set(HVD_NCCL_LIB_DIR_HINT "")
set(HVD_NCCL_INCLUDE_HINT "${HVD_NCCL_INCLUDE}")
if(HVD_NCCL_LIB)
  get_filename_component(HVD_NCCL_LIB_DIR_HINT "${HVD_NCCL_LIB}" DIRECTORY)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/hvdConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/hvdConfig.cmake
  INSTALL_DESTINATION ${HVD_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/hvdConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/hvdConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/hvdConfigVersion.cmake
        DESTINATION ${HVD_CMAKE_DIR})

# --- the Debian packages: `cpack -G DEB` in the build directory -> hvd_<version>_<arch>.deb
# (component hvd: links no CUDA or NCCL, installs on any Debian 12 host) and, in a build with
# NCCL, hvd-cuda_<version>_<arch>.deb (component cuda: the GPU module; depends on hvd).
# Run-time library dependencies of hvd come from dpkg-shlibdeps; what a consumer needs to
# compile and link (MPI, libtorch) and to launch (ssh, mpirun) is declared here.
set(CPACK_PACKAGE_NAME hvd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "hvd developers <hvd-dev@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Distributed deep-learning training (Horovod-style): C++ and Python API, hvdrun launcher")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL hvd)
set(CPACK_DEBIAN_HVD_PACKAGE_NAME hvd)
set(CPACK_DEBIAN_HVD_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_HVD_PACKAGE_SHLIBDEPS ON)
# Debug info stays in the build tree (a RelWithDebInfo package would be ~4x larger).
set(CPACK_STRIP_FILES TRUE)
set(_hvd_deb_depends "libopenmpi-dev" "openmpi-bin" "openssh-client")
if(HVD_HAVE_TORCH)
  # hvd::torch's static elastic store links libcrypto (HMAC-SHA256 of the snapshots).
  list(APPEND _hvd_deb_depends "libtorch-dev" "libssl-dev")
endif()
if(HVD_HAVE_PYTHON)
  # The extension is built for one interpreter ABI (python3.X); numpy backs hvd.numpy.
  math(EXPR _hvd_py_next "${Python3_VERSION_MINOR} + 1")
  list(APPEND _hvd_deb_depends
    "python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR})"
    "python3 (<< ${Python3_VERSION_MAJOR}.${_hvd_py_next})" "python3-numpy")
  set(CPACK_DEBIAN_HVD_PACKAGE_RECOMMENDS "python3-torch")
endif()
set(HVD_DEB_EXTRA_DEPENDS "" CACHE STRING "More Depends for the hvd .deb (comma-separated)")
if(HVD_DEB_EXTRA_DEPENDS)
  list(APPEND _hvd_deb_depends ${HVD_DEB_EXTRA_DEPENDS})
endif()
list(REMOVE_DUPLICATES _hvd_deb_depends)
list(JOIN _hvd_deb_depends ", " CPACK_DEBIAN_HVD_PACKAGE_DEPENDS)

if(HVD_HAVE_NCCL)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME hvd-cuda)
  set(CPACK_DEBIAN_CUDA_FILE_NAME DEB-DEFAULT)
  set(CPACK_COMPONENT_CUDA_DESCRIPTION
      "hvd's GPU module (NCCL/CUDA collectives), loaded by hvd at init() on hosts with the CUDA runtime and NCCL")
  # The module's libcudart/libnccl come from NVIDIA (its apt repository or a runfile), not from
  # Debian: declare the packages that own them on this machine, if dpkg knows them
  # (HVD_DEB_CUDA_DEPENDS adds others); without them hvd reports why the module did not load.
  set(_hvd_cuda_depends "hvd (= ${PROJECT_VERSION})")
  foreach(_f "${HVD_NCCL_LIB}" "${CUDAToolkit_LIBRARY_DIR}/libcudart.so")
    execute_process(COMMAND dpkg-query -S "${_f}" OUTPUT_VARIABLE _owner ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_owner MATCHES "^([^:,]+)")
      list(APPEND _hvd_cuda_depends "${CMAKE_MATCH_1}")
    else()
      message(STATUS "hvd: ${_f} belongs to no Debian package: hvd-cuda cannot declare it "
                     "(set HVD_DEB_CUDA_DEPENDS, e.g. to NVIDIA's libnccl2, cuda-cudart-13-0)")
    endif()
  endforeach()
  set(HVD_DEB_CUDA_DEPENDS "" CACHE STRING "More Depends for the hvd-cuda .deb (comma-separated)")
  if(HVD_DEB_CUDA_DEPENDS)
    list(APPEND _hvd_cuda_depends ${HVD_DEB_CUDA_DEPENDS})
  endif()
  list(REMOVE_DUPLICATES _hvd_cuda_depends)
  list(JOIN _hvd_cuda_depends ", " CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS)
  # dpkg-shlibdeps cannot resolve NVIDIA's libraries installed outside dpkg.
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
endif()
set(CPACK_GENERATOR DEB)
include(CPack)
