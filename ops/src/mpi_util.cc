// SPDX-License-Identifier: Apache-2.0
// MPI helpers.
#include "hvd/ops/mpi_util.h"

#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "hvd/core/handle.h"
#include "hvd/core/logging.h"

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
    case ReduceOp::kAdasum:  // not an MPI reduction: adasum_allreduce (mpi_adasum.cc) runs it
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

Status agree_status(MPI_Comm comm, const Status& mine, const std::string& what,
                    const std::function<Status()>& should_abort, int flag,
                    std::vector<int>* flags) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  auto all_ok = std::make_shared<int>(mine.ok() ? 1 : 0);
  MPI_Request req = MPI_REQUEST_NULL;
  HVD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, all_ok.get(), 1, MPI_INT, MPI_MIN, comm, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort, all_ok));
  if (*all_ok) return Status::OK();
  // Some rank failed: every rank learns who, and why.
  struct Entry {
    int ok;
    int flag;
    int code;
    char why[400];
  };
  auto mine_e = std::make_shared<Entry>();
  mine_e->ok = mine.ok() ? 1 : 0;
  mine_e->flag = flag;
  mine_e->code = static_cast<int>(mine.code());
  std::snprintf(mine_e->why, sizeof(mine_e->why), "%s", mine.message().c_str());
  auto all = std::make_shared<std::vector<Entry>>(static_cast<size_t>(size));
  auto bufs = std::make_shared<std::pair<std::shared_ptr<Entry>, decltype(all)>>(mine_e, all);
  HVD_MPI_CHECK(MPI_Iallgather(mine_e.get(), sizeof(Entry), MPI_BYTE, all->data(), sizeof(Entry),
                               MPI_BYTE, comm, &req));
  HVD_RETURN_IF_ERROR(wait_request(&req, should_abort, bufs));
  std::string msg = what + " failed";
  StatusCode code = StatusCode::kInternal;
  bool first = true;
  if (flags) flags->assign(static_cast<size_t>(size), 0);
  for (int r = 0; r < size; ++r) {
    const Entry& e = (*all)[static_cast<size_t>(r)];
    if (flags) (*flags)[static_cast<size_t>(r)] = e.flag;
    if (e.ok) continue;
    msg += std::string(first ? " on rank " : "; on rank ") + std::to_string(r) + ": " +
           std::string(e.why, strnlen(e.why, sizeof(e.why)));
    if (first) code = static_cast<StatusCode>(e.code);
    first = false;
  }
  return Status(code, msg);
}

void keep_forever(std::shared_ptr<void> p) {
  static std::mutex* mu = new std::mutex();  // never destroyed: MPI may outlive statics
  static auto* kept = new std::vector<std::shared_ptr<void>>();
  std::lock_guard<std::mutex> lk(*mu);
  kept->push_back(std::move(p));
}

RequestBatch::RequestBatch(size_t capacity, const std::function<Status()>* should_abort,
                           bool* abandoned)
    : should_abort_(should_abort), abandoned_(abandoned) {
  reqs_.reserve(capacity);
  peer_.reserve(capacity);
}

MPI_Request* RequestBatch::add_recv() {
  reqs_.push_back(MPI_REQUEST_NULL);
  peer_.push_back(-1);
  return &reqs_.back();
}

MPI_Request* RequestBatch::add_send(int peer) {
  reqs_.push_back(MPI_REQUEST_NULL);
  peer_.push_back(peer);
  return &reqs_.back();
}

Status RequestBatch::abort_status() const {
  return should_abort_ && *should_abort_ ? (*should_abort_)() : Status::OK();
}

Status RequestBatch::wait() {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto next_check = start + std::chrono::milliseconds(1);
  // MPI_Waitall spins too: polling costs the same while data moves. A step that takes long
  // (a slow or dead peer) yields, then sleeps briefly, between tests.
  for (unsigned i = 0;; ++i) {
    int done = 0;
    const int rc =
        MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Testall", __FILE__, __LINE__);
    if (done) {
      reqs_.clear();
      peer_.clear();
      return Status::OK();
    }
    if ((i & 63) != 0) continue;
    const auto now = clock::now();
    if (now >= next_check) {
      Status s = abort_status();
      if (!s.ok()) return s;
      next_check = now + std::chrono::milliseconds(1);
    }
    if (now - start > std::chrono::milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else if (now - start > std::chrono::milliseconds(2)) {
      sched_yield();
    }
  }
}

RequestBatch::~RequestBatch() {
  using clock = std::chrono::steady_clock;
  bool left = false;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    if (reqs_[i] == MPI_REQUEST_NULL) continue;
    if (peer_[i] < 0) MPI_Cancel(&reqs_[i]);  // a receive (a finished one stays as it is)
    left = true;
  }
  if (!left) return;
  // Then polled, not waited for: a receive already matched to a message that a dead peer
  // never finishes cannot be cancelled, and sends are never cancelled (the class comment).
  const auto until = clock::now() + kSendSettle;
  auto next_check = clock::now();
  bool gone = false;
  for (;;) {
    left = false;
    for (MPI_Request& r : reqs_) {
      if (r == MPI_REQUEST_NULL) continue;
      int flag = 0;
      if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 0;
      left = left || !flag;
    }
    if (!left) return;
    const auto now = clock::now();
    if (now >= until) break;
    if (now >= next_check) {
      gone = !abort_status().ok();
      if (gone) break;
      next_check = now + std::chrono::milliseconds(1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  for (size_t i = 0; i < reqs_.size(); ++i) {
    if (reqs_[i] == MPI_REQUEST_NULL) continue;
    HVD_LOG(Debug) << "a point-to-point " << (peer_[i] < 0 ? "receive" : "send to rank ")
                   << (peer_[i] < 0 ? std::string() : std::to_string(peer_[i]))
                   << " did not finish "
                   << (gone ? "(the job is aborting)"
                            : "within " + std::to_string(kSendSettle.count()) + " ms")
                   << "; released without waiting longer";
    MPI_Request_free(&reqs_[i]);
    if (abandoned_) *abandoned_ = true;
  }
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
