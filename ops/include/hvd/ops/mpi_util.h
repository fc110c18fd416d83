// SPDX-License-Identifier: Apache-2.0
// MPI helpers: the one MPI check macro, dtype/op mapping, and a polite wait for requests.
#pragma once

#include <mpi.h>

#include <atomic>
#include <functional>
#include <string>

#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd::ops {

/// "MPI_Allreduce failed: MPI_ERR_TRUNCATE: message truncated (at file.cc:12)".
Status mpi_error(int code, const char* call, const char* file, int line);

/// MPI type for reducing or moving `t` (float16/bfloat16 map to MPI_UINT16_T: move only).
MPI_Datatype mpi_type(DataType t);
MPI_Op mpi_op(ReduceOp op);

/// Completes `req` without busy-waiting: it tests, spins briefly, then sleeps with exponential
/// backoff (up to `max_sleep_us`). Every few tests it asks `should_abort` and, if that returns
/// an error, abandons the request and returns it.
Status wait_request(MPI_Request* req, const std::function<Status()>& should_abort,
                    int max_sleep_us = 1000);

}  // namespace hvd::ops

#define HVD_MPI_CHECK(call)                                                 \
  do {                                                                      \
    int hvd_mpi_rc_ = (call);                                               \
    if (hvd_mpi_rc_ != MPI_SUCCESS) {                                       \
      return ::hvd::ops::mpi_error(hvd_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                       \
  } while (0)
