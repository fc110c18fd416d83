// SPDX-License-Identifier: Apache-2.0
// MPI helpers: the one MPI check macro, dtype/op mapping, and a polite wait for requests.
#pragma once

#include <mpi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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
/// an error, gives the request up and returns the error. A given-up request stays active
/// inside MPI (a non-blocking collective cannot be cancelled) and may still read or write its
/// buffers, so `buffers` - which must own every buffer `req` uses - is then kept alive for the
/// rest of the process (keep_forever); the caller must not free those buffers otherwise.
Status wait_request(MPI_Request* req, const std::function<Status()>& should_abort,
                    const std::shared_ptr<void>& buffers, int max_sleep_us = 1000);

/// Keeps `p` alive until the process exits (buffers of requests given up on).
void keep_forever(std::shared_ptr<void> p);

/// Point-to-point requests still outstanding when a function returns early (an error): each
/// is cancelled and completed on scope exit, so none writes into or reads from a buffer its
/// owner frees next. (A cancelled receive completes at once; a send that could not be
/// cancelled completes once its peer, taking the same step, receives it.)
class SettleRequests {
 public:
  explicit SettleRequests(std::vector<MPI_Request>* reqs) : reqs_(reqs) {}
  ~SettleRequests();
  SettleRequests(const SettleRequests&) = delete;
  SettleRequests& operator=(const SettleRequests&) = delete;

 private:
  std::vector<MPI_Request>* reqs_;
};

}  // namespace hvd::ops

#define HVD_MPI_CHECK(call)                                                 \
  do {                                                                      \
    int hvd_mpi_rc_ = (call);                                               \
    if (hvd_mpi_rc_ != MPI_SUCCESS) {                                       \
      return ::hvd::ops::mpi_error(hvd_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                       \
  } while (0)
