# SPDX-License-Identifier: Apache-2.0
# Resolves the AUTO feature switches into HVD_HAVE_* (surfaced in hvd/config.h).
function(hvd_resolve_feature name found)
  string(TOUPPER "${${name}}" v)
  if(v STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "${name}=ON but the dependency was not found")
  endif()
  if((v STREQUAL "ON" OR v STREQUAL "AUTO") AND ${found})
    set(${name}_RESOLVED 1 PARENT_SCOPE)
  else()
    set(${name}_RESOLVED 0 PARENT_SCOPE)
  endif()
endfunction()

# NCCL + CUDA. The toolkit is looked for in $CUDA_HOME, then /usr/local/cuda (nvcc need not be
# on PATH); NCCL in $NCCL_HOME, then the toolkit. When both are found, CMAKE_CUDA_COMPILER is set
# so that ops/ can enable_language(CUDA).
set(_nccl_found FALSE)
string(TOUPPER "${HVD_WITH_NCCL}" _nccl_mode)
if(NOT _nccl_mode STREQUAL "OFF")
  set(_cuda_root "$ENV{CUDA_HOME}")
  if(NOT _cuda_root OR NOT EXISTS "${_cuda_root}")
    set(_cuda_root /usr/local/cuda)
  endif()
  if(NOT CUDAToolkit_ROOT AND EXISTS "${_cuda_root}")
    set(CUDAToolkit_ROOT "${_cuda_root}")
  endif()
  find_package(CUDAToolkit QUIET)
  set(_nccl_hints "$ENV{NCCL_HOME}" "${_cuda_root}")
  find_path(HVD_NCCL_INCLUDE nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
  find_library(HVD_NCCL_LIB nccl HINTS ${_nccl_hints} PATH_SUFFIXES lib64 lib)
  if(HVD_NCCL_INCLUDE AND HVD_NCCL_LIB AND CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE)
    set(_nccl_found TRUE)
    if(NOT CMAKE_CUDA_COMPILER)
      set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}" CACHE FILEPATH "nvcc" FORCE)
    endif()
    # H200/H100 machine code plus PTX that newer GPUs compile at load time.
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "90-real;80-virtual" CACHE STRING "CUDA architectures" FORCE)
    endif()
    message(STATUS "hvd: CUDA ${CUDAToolkit_VERSION} (${CUDAToolkit_NVCC_EXECUTABLE}), NCCL "
                   "${HVD_NCCL_LIB}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "hvd: NCCL build off: CUDA toolkit found=${CUDAToolkit_FOUND} "
                   "(looked in ${_cuda_root}; set CUDA_HOME), nccl.h=${HVD_NCCL_INCLUDE}, "
                   "libnccl=${HVD_NCCL_LIB} (set NCCL_HOME)")
  endif()
endif()
hvd_resolve_feature(HVD_WITH_NCCL _nccl_found)
set(HVD_HAVE_NCCL ${HVD_WITH_NCCL_RESOLVED})
if(HVD_HAVE_NCCL)
  # Top level, so that every directory (ops/, test/gpu, bench/) can compile .cu files.
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()

# libtorch (Debian's libtorch-dev ships TorchConfig.cmake).
set(_torch_found FALSE)
string(TOUPPER "${HVD_WITH_TORCH}" _torch_mode)
if(NOT _torch_mode STREQUAL "OFF")
  get_directory_property(_before IMPORTED_TARGETS)
  find_package(Torch QUIET)
  if(Torch_FOUND)
    set(_torch_found TRUE)
    # Torch's imported targets (torch, c10, ...) are visible only in this directory and below;
    # hvd::optimizer links them, so a project that add_subdirectory()s hvd would fail with
    # "Target torch not found" unless it called find_package(Torch) itself. Make them global.
    get_directory_property(_after IMPORTED_TARGETS)
    foreach(_t IN LISTS _after)
      if(NOT _t IN_LIST _before)
        set_target_properties(${_t} PROPERTIES IMPORTED_GLOBAL TRUE)
      endif()
    endforeach()
  endif()
endif()
hvd_resolve_feature(HVD_WITH_TORCH _torch_found)
set(HVD_HAVE_TORCH ${HVD_WITH_TORCH_RESOLVED})

# Python binding (pybind11 + a Python interpreter with headers).
set(_py_found FALSE)
string(TOUPPER "${HVD_WITH_PYTHON}" _py_mode)
if(NOT _py_mode STREQUAL "OFF")
  # The interpreter the binding is built for: -DPython3_EXECUTABLE=..., else the system's
  # /usr/bin/python3 (Debian's, which has python3-torch), else the first on PATH.
  if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python3 QUIET COMPONENTS Interpreter Development.Module)
  find_package(pybind11 CONFIG QUIET)
  if(Python3_FOUND AND pybind11_FOUND)
    set(_py_found TRUE)
  endif()
endif()
hvd_resolve_feature(HVD_WITH_PYTHON _py_found)
# A tree without bindings/ (a trimmed copy) builds no binding.
if(NOT EXISTS ${CMAKE_SOURCE_DIR}/bindings/CMakeLists.txt)
  set(HVD_WITH_PYTHON_RESOLVED 0)
endif()
set(HVD_HAVE_PYTHON ${HVD_WITH_PYTHON_RESOLVED})
message(STATUS "hvd features: NCCL=${HVD_HAVE_NCCL} torch=${HVD_HAVE_TORCH} python=${HVD_HAVE_PYTHON}")
