// SPDX-License-Identifier: Apache-2.0
// MPI helpers.
#include "hvd/ops/mpi_util.h"

#include <sched.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "hvd/core/handle.h"

namespace hvd::ops {

Status mpi_error(int code, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, msg, &len);
  std::string c(call);
  c = c.substr(0, c.find('('));
  return internal_error(c + " failed: " + std::string(msg, static_cast<size_t>(len)) + " (at " +
                        file + ":" + std::to_string(line) + ")");
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:  // moved as raw 16-bit words; reduced through float32
    case DataType::kBFloat16:
      return MPI_UINT16_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kBool:
      return MPI_C_BOOL;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
  }
  return MPI_SUM;
}

void keep_forever(std::shared_ptr<void> p) {
  static std::mutex* mu = new std::mutex();  // never destroyed: MPI may outlive statics
  static auto* kept = new std::vector<std::shared_ptr<void>>();
  std::lock_guard<std::mutex> lk(*mu);
  kept->push_back(std::move(p));
}

SettleRequests::~SettleRequests() {
  for (MPI_Request& r : *reqs_) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  reqs_->clear();
}

Status wait_request(MPI_Request* req, const std::function<Status()>& should_abort,
                    const std::shared_ptr<void>& buffers, int max_sleep_us) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto spin_until = start + std::chrono::microseconds(20);
  // While a user thread waits for a result its core is free: keep polling (yielding) for up
  // to 2 ms instead of sleeping, since each sleep costs ~25 us more than asked here.
  const auto busy_until = start + std::chrono::microseconds(2000);
  int sleep_us = 10;
  for (int i = 0;; ++i) {
    int flag = 0;
    const int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      keep_forever(buffers);  // the request's state is unknown
      return mpi_error(rc, "MPI_Test", __FILE__, __LINE__);
    }
    if (flag) return Status::OK();
    if ((i & 15) == 0 && should_abort) {
      Status s = should_abort();
      if (!s.ok()) {
        keep_forever(buffers);  // given up (its peers are gone): MPI may still use them
        return s;
      }
    }
    const auto now = clock::now();
    if (now < spin_until) continue;
    if (now < busy_until && core::waiting_users() > 0) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, max_sleep_us);
  }
}

}  // namespace hvd::ops
