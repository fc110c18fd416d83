# SPDX-License-Identifier: Apache-2.0
# Shared compile settings for hvd's own targets (never global).
function(hvd_target_settings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Werror>)
  # CUDA sources (ops/src/nccl): the host compiler gets the same warnings; nvcc's own warnings
  # are errors too.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -Werror=all-warnings>)
  if(HVD_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${HVD_SANITIZE} -fno-omit-frame-pointer>)
    target_link_options(${target} PRIVATE -fsanitize=${HVD_SANITIZE})
  endif()
endfunction()
