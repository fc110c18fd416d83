// SPDX-License-Identifier: Apache-2.0
// Negotiation transport over MPI.
#include "hvd/ops/mpi_transport.h"

#include "hvd/ops/mpi_util.h"

namespace hvd::ops {

MpiTransport::MpiTransport(MPI_Comm comm, std::function<Status()> should_abort)
    : comm_(comm), should_abort_(std::move(should_abort)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Status MpiTransport::allreduce_and(std::vector<uint64_t>* words) {
  MPI_Request req;
  HVD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, words->data(), static_cast<int>(words->size()),
                               MPI_UINT64_T, MPI_BAND, comm_, &req));
  return wait_request(&req, should_abort_);
}

Status MpiTransport::gather(const std::vector<uint8_t>& mine,
                            std::vector<std::vector<uint8_t>>* at_root) {
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(rank_ == 0 ? static_cast<size_t>(size_) : 0);
  MPI_Request req;
  HVD_MPI_CHECK(MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm_, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort_));
  std::vector<int> displs;
  std::vector<uint8_t> all;
  if (rank_ == 0) {
    displs.resize(static_cast<size_t>(size_));
    int64_t total = 0;
    for (int i = 0; i < size_; ++i) {
      displs[static_cast<size_t>(i)] = static_cast<int>(total);
      total += sizes[static_cast<size_t>(i)];
    }
    if (total > INT32_MAX) return internal_error("negotiation message over 2 GiB");
    all.resize(static_cast<size_t>(total));
  }
  HVD_MPI_CHECK(MPI_Igatherv(mine.data(), my_size, MPI_BYTE, all.data(), sizes.data(),
                             displs.data(), MPI_BYTE, 0, comm_, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort_));
  if (rank_ == 0 && at_root) {
    at_root->assign(static_cast<size_t>(size_), {});
    for (int i = 0; i < size_; ++i) {
      auto b = all.begin() + displs[static_cast<size_t>(i)];
      (*at_root)[static_cast<size_t>(i)].assign(b, b + sizes[static_cast<size_t>(i)]);
    }
  }
  return Status::OK();
}

Status MpiTransport::broadcast(std::vector<uint8_t>* bytes) {
  int64_t n = static_cast<int64_t>(bytes->size());
  MPI_Request req;
  HVD_MPI_CHECK(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, comm_, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort_));
  if (n > INT32_MAX) return internal_error("negotiation message over 2 GiB");
  bytes->resize(static_cast<size_t>(n));
  HVD_MPI_CHECK(MPI_Ibcast(bytes->data(), static_cast<int>(n), MPI_BYTE, 0, comm_, &req));
  return wait_request(&req, should_abort_);
}

}  // namespace hvd::ops
