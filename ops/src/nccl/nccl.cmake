# SPDX-License-Identifier: Apache-2.0
# Adds the NCCL/CUDA executors to hvd_ops (included from ops/CMakeLists.txt when HVD_HAVE_NCCL).
# Every source compiles without a GPU; CUDA code is built for CMAKE_CUDA_ARCHITECTURES
# (default: sm_90 machine code for H100/H200 plus compute_80 PTX for other GPUs).
# (CUDA itself is enabled at the top level by cmake/HvdFeatures.cmake.)
set(_nccl_dir ${CMAKE_CURRENT_SOURCE_DIR}/src/nccl)
target_sources(hvd_ops PRIVATE
  ${_nccl_dir}/check.cc ${_nccl_dir}/device_state.cc ${_nccl_dir}/nccl_executor.cc
  ${_nccl_dir}/nccl_collectives.cc ${_nccl_dir}/nccl_hierarchical.cc
  ${_nccl_dir}/device_nccl.cc ${_nccl_dir}/kernels.cu)
# Installed, NCCL is the imported target hvd::nccl that hvdConfig.cmake finds again.
target_include_directories(hvd_ops PUBLIC $<BUILD_INTERFACE:${HVD_NCCL_INCLUDE}>)
target_link_libraries(hvd_ops PUBLIC CUDA::cudart $<BUILD_INTERFACE:${HVD_NCCL_LIB}>
                                     $<INSTALL_INTERFACE:hvd::nccl>)
set_target_properties(hvd_ops PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
