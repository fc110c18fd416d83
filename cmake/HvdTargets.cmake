# SPDX-License-Identifier: Apache-2.0
# Shared compile settings for hvd's own targets (never global).
function(hvd_target_settings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
  if(HVD_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${HVD_SANITIZE} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${HVD_SANITIZE})
  endif()
endfunction()
