# SPDX-License-Identifier: Apache-2.0
# Shared compile settings for hvd's own targets (never global).
function(hvd_target_settings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Werror>)
  # CUDA sources (ops/src/nccl): the host compiler gets the same warnings; nvcc's own warnings
  # are errors too.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -Werror=all-warnings>)
  # hvd's shared libraries are not meant to have their functions interposed: let the compiler
  # call and inline them directly inside the library instead of through the PLT.
  get_target_property(_type ${target} TYPE)
  if(_type STREQUAL "SHARED_LIBRARY" OR _type STREQUAL "MODULE_LIBRARY")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:-fno-semantic-interposition>)
  endif()
  if(HVD_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${HVD_SANITIZE} -fno-omit-frame-pointer>)
    target_link_options(${target} PRIVATE -fsanitize=${HVD_SANITIZE})
  endif()
endfunction()
