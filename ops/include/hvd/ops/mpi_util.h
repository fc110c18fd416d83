// SPDX-License-Identifier: Apache-2.0
// MPI helpers: the one MPI check macro, dtype/op mapping, and a polite wait for requests.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
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

/// Collective over `comm` (every rank calls it at the same point): each rank passes its own
/// outcome `mine`; every rank returns OK when every rank's was OK, else the same error on every
/// rank: "<what> failed on rank 1: <its message>; on rank 3: <...>" (each message cut at 400
/// bytes), with the status code of the lowest rank that failed. `flag` travels along: when
/// some rank failed, `flags` (if given) receives every rank's. One small allreduce when all
/// succeeded, plus an allgather of the messages when not; the waits poll `should_abort`
/// (wait_request).
Status agree_status(MPI_Comm comm, const Status& mine, const std::string& what,
                    const std::function<Status()>& should_abort, int flag = 0,
                    std::vector<int>* flags = nullptr);

/// Keeps `p` alive until the process exits (buffers of requests given up on).
void keep_forever(std::shared_ptr<void> p);

/// The point-to-point requests of one exchange (a ring step): posted into the slots that
/// add_recv() and add_send() hand out, completed by wait(). wait() polls (MPI_Testall) rather
/// than blocking in MPI_Waitall, so a dead peer or an abort cannot keep it forever: about every
/// millisecond it asks `should_abort` (null: never) and returns that error.
///
/// What is still outstanding when the batch is destroyed (an error return, an abort) is settled
/// there, so that nothing writes into a buffer its owner frees next:
///  - receives are cancelled (well defined; a receive already matched to a message in transit
///    cannot be cancelled and finishes with that message);
///  - sends are never cancelled: MPI 4.0 deprecates cancelling a send and UCX, Open MPI 5's
///    usual transport, does not implement it (the cancel does nothing, or fails). A send to a
///    live peer completes once that peer, taking the same step, receives it.
/// So the batch then polls what is left for up to kSendSettle, while `should_abort` reports
/// nothing. A request still outstanding after that is tied to a peer that died or gave the
/// step up (an abort): it is released with MPI_Request_free (MPI finishes or drops it on its
/// own). Its buffer would be touched only by a transfer with a peer that no longer takes part,
/// but MPI may still read or write it: `*abandoned` (when given) is then set, and the owner of
/// the buffers must keep them (the MPI executor reports them never released, see
/// MpiExecutor::launch).
class RequestBatch {
 public:
  /// `capacity`: the number of requests the exchange posts at most (slots stay put).
  RequestBatch(size_t capacity, const std::function<Status()>* should_abort,
               bool* abandoned = nullptr);
  ~RequestBatch();
  RequestBatch(const RequestBatch&) = delete;
  RequestBatch& operator=(const RequestBatch&) = delete;

  /// A slot for the request of an MPI_Irecv / MPI_Isend to `peer` (for the log, when unsent).
  MPI_Request* add_recv();
  MPI_Request* add_send(int peer);
  /// Completes every request, or returns the first error of MPI_Testall or `should_abort`
  /// (the destructor then settles what is left, as above).
  Status wait();

  /// How long the destructor waits for outstanding sends at most.
  static constexpr std::chrono::milliseconds kSendSettle{2000};

 private:
  Status abort_status() const;
  std::vector<MPI_Request> reqs_;
  std::vector<int> peer_;  // per request: -1 for a receive, the destination for a send
  const std::function<Status()>* should_abort_;
  bool* abandoned_;
};

}  // namespace hvd::ops

#define HVD_MPI_CHECK(call)                                                 \
  do {                                                                      \
    int hvd_mpi_rc_ = (call);                                               \
    if (hvd_mpi_rc_ != MPI_SUCCESS) {                                       \
      return ::hvd::ops::mpi_error(hvd_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                       \
  } while (0)
