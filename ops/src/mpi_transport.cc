// SPDX-License-Identifier: Apache-2.0
// Negotiation transport over MPI.
#include "hvd/ops/mpi_transport.h"

#include <algorithm>
#include <memory>
#include <string>

#include "hvd/ops/mpi_util.h"

namespace hvd::ops {

MpiTransport::MpiTransport(MPI_Comm comm, std::function<Status()> should_abort)
    : comm_(comm), should_abort_(std::move(should_abort)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

// Each call's buffers live in one shared block, so that a request given up on (a dead peer)
// can keep them alive (wait_request) instead of MPI writing into freed memory.

Status MpiTransport::allreduce_and(std::vector<uint64_t>* words) {
  auto buf = std::make_shared<std::vector<uint64_t>>(std::move(*words));
  MPI_Request req;
  HVD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf->data(), static_cast<int>(buf->size()),
                               MPI_UINT64_T, MPI_BAND, comm_, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort_, buf));
  *words = std::move(*buf);
  return Status::OK();
}

Status MpiTransport::gather(const std::vector<uint8_t>& mine,
                            std::vector<std::vector<uint8_t>>* at_root) {
  struct Buffers {
    int my_size = 0;
    std::vector<int> sizes, displs;
    std::vector<uint8_t> mine, all;
  };
  auto b = std::make_shared<Buffers>();
  b->mine = mine;
  b->my_size = static_cast<int>(mine.size());
  b->sizes.resize(static_cast<size_t>(size_));
  // Every rank learns every size (not only rank 0), so all reach the same verdict on the
  // total below and none is left waiting in the gather.
  MPI_Request req;
  HVD_MPI_CHECK(MPI_Iallgather(&b->my_size, 1, MPI_INT, b->sizes.data(), 1, MPI_INT, comm_, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort_, b));
  b->displs.resize(static_cast<size_t>(size_));
  int64_t total = 0;
  for (int i = 0; i < size_; ++i) {
    b->displs[static_cast<size_t>(i)] = static_cast<int>(std::min<int64_t>(total, INT32_MAX));
    total += b->sizes[static_cast<size_t>(i)];
  }
  if (total > INT32_MAX) {
    return internal_error("this round's request lists total " + std::to_string(total) +
                          " bytes over " + std::to_string(size_) +
                          " ranks, over MPI's 2 GiB message limit (fewer collectives in flight "
                          "per round, or shorter names)");
  }
  if (rank_ == 0) b->all.resize(static_cast<size_t>(total));
  HVD_MPI_CHECK(MPI_Igatherv(b->mine.data(), b->my_size, MPI_BYTE, b->all.data(), b->sizes.data(),
                             b->displs.data(), MPI_BYTE, 0, comm_, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort_, b));
  if (rank_ == 0 && at_root) {
    at_root->assign(static_cast<size_t>(size_), {});
    for (int i = 0; i < size_; ++i) {
      auto first = b->all.begin() + b->displs[static_cast<size_t>(i)];
      (*at_root)[static_cast<size_t>(i)].assign(first, first + b->sizes[static_cast<size_t>(i)]);
    }
  }
  return Status::OK();
}

Status MpiTransport::broadcast(std::vector<uint8_t>* bytes) {
  struct Buffers {
    int64_t n = 0;
    std::vector<uint8_t> bytes;
  };
  auto b = std::make_shared<Buffers>();
  b->bytes = std::move(*bytes);
  b->n = static_cast<int64_t>(b->bytes.size());
  MPI_Request req;
  HVD_MPI_CHECK(MPI_Ibcast(&b->n, 1, MPI_INT64_T, 0, comm_, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort_, b));
  // Rank 0's size, the same verdict everywhere.
  if (b->n > INT32_MAX) {
    return internal_error("the response list is " + std::to_string(b->n) +
                          " bytes, over MPI's 2 GiB message limit");
  }
  b->bytes.resize(static_cast<size_t>(b->n));
  HVD_MPI_CHECK(MPI_Ibcast(b->bytes.data(), static_cast<int>(b->n), MPI_BYTE, 0, comm_, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort_, b));
  *bytes = std::move(b->bytes);
  return Status::OK();
}

}  // namespace hvd::ops
