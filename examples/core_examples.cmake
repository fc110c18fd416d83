# SPDX-License-Identifier: Apache-2.0
# Examples that need only the core library (no libtorch).
add_executable(allreduce_demo ${CMAKE_CURRENT_LIST_DIR}/allreduce_demo.cc)
target_link_libraries(allreduce_demo PRIVATE hvd::ops)
hvd_target_settings(allreduce_demo)
