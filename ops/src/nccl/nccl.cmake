# SPDX-License-Identifier: Apache-2.0
# The GPU module (included from ops/CMakeLists.txt when HVD_HAVE_NCCL): the NCCL/CUDA executors
# as hvd_nccl_impl (a static library the module is made of; internal tests may link it), and
# the module libhvd_nccl.so that gpu_module.cc dlopens at init(). The module links libhvd_ops.so,
# libcudart.so and libnccl.so.2; it is written next to libhvd_ops.so and exports one symbol.
# Every source compiles without a GPU; CUDA code is built for CMAKE_CUDA_ARCHITECTURES
# (default: sm_90 machine code for H100/H200 plus compute_80 PTX for other GPUs).
# (CUDA itself is enabled at the top level by cmake/HvdFeatures.cmake.)
set(_nccl_dir ${CMAKE_CURRENT_SOURCE_DIR}/src/nccl)
add_library(hvd_nccl_impl STATIC
  ${_nccl_dir}/check.cc ${_nccl_dir}/comm_init.cc ${_nccl_dir}/device_state.cc
  ${_nccl_dir}/nccl_executor.cc
  ${_nccl_dir}/nccl_collectives.cc ${_nccl_dir}/nccl_hierarchical.cc ${_nccl_dir}/kernels.cu
  ${_nccl_dir}/nccl_adasum.cc ${_nccl_dir}/adasum_nodes.cc)
target_include_directories(hvd_nccl_impl PUBLIC ${HVD_NCCL_INCLUDE})
target_link_libraries(hvd_nccl_impl PUBLIC hvd::ops CUDA::cudart ${HVD_NCCL_LIB})
set_target_properties(hvd_nccl_impl PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
                                               POSITION_INDEPENDENT_CODE ON)
hvd_target_settings(hvd_nccl_impl)

add_library(hvd_nccl MODULE ${_nccl_dir}/module.cc)
target_link_libraries(hvd_nccl PRIVATE hvd_nccl_impl)
# Only the entry point is exported; the static parts stay private to the module.
# Installed next to libhvd_ops.so: "$ORIGIN" finds hvd's libraries there, whatever the prefix.
set_target_properties(hvd_nccl PROPERTIES CXX_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR} INSTALL_RPATH "$ORIGIN")
target_link_options(hvd_nccl PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined)
hvd_target_settings(hvd_nccl)
