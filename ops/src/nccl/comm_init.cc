// SPDX-License-Identifier: Apache-2.0
// Agreed creation of NCCL communicators (protocol: comm_init.h, create_comm). Why agreed: a
// rank whose preparation or ncclCommInitRank fails used to return its error while its peers
// sat in ncclCommInitRank for ever, waiting for it, on the background thread that the stall
// inspector also needs. Now every wait is bounded, and every rank ends with the same outcome.
#include "comm_init.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "hvd/core/logging.h"
#include "hvd/ops/mpi_util.h"
#include "hvd/ops/nccl/check.h"

namespace hvd::ops::nccl {
namespace {

// The data communicator's point-to-point tags: the ring's are 0x6876 and 0x6877.
constexpr int kTagInitFailed = 0x6878;

std::string seconds(std::chrono::milliseconds d) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return b;
}

// This rank's part of step 2: the communicator, or why not. Failure notices that arrive are
// received here (`heard` marks their senders).
Status init_rank(const CommSpec& c, int rank, int size, const ncclUniqueId& id, ncclComm_t* comm,
                 std::vector<int>* heard) {
  const std::string where = " (cuda:" + std::to_string(c.device) + ")";
  if (cudaSetDevice(c.device) != cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return internal_error(std::string("cudaSetDevice failed: ") + cudaGetErrorString(e) + where);
  }
  const bool stuck = c.fault.at(TestFault::Point::kInitStuck, rank);
  if (!stuck) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // returns at once; progress is polled below
    const ncclResult_t rc = ncclCommInitRankConfig(comm, size, id, rank, &cfg);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      const Status e = nccl_error(rc, "ncclCommInitRankConfig", __FILE__, __LINE__);
      return Status(e.code(), e.message() + where);
    }
  }
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  bool warned = false;
  for (int i = 0;; ++i) {
    if (!stuck) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t rc = ncclCommGetAsyncError(*comm, &state);
      if (rc != ncclSuccess) return nccl_error(rc, "ncclCommGetAsyncError", __FILE__, __LINE__);
      if (state == ncclSuccess) return Status::OK();
      if (state != ncclInProgress) {
        const Status e = nccl_error(state, "ncclCommInitRankConfig", __FILE__, __LINE__);
        return Status(e.code(), e.message() + where);
      }
    }
    int flag = 0;
    MPI_Status st;
    // (An injected stuck rank is deaf to notices too, as a rank really stuck in NCCL would be.)
    if (!stuck) HVD_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kTagInitFailed, c.mpi, &flag, &st));
    if (flag) {
      int dummy = 0;
      HVD_MPI_CHECK(
          MPI_Recv(&dummy, 1, MPI_INT, st.MPI_SOURCE, kTagInitFailed, c.mpi, MPI_STATUS_IGNORE));
      (*heard)[static_cast<size_t>(st.MPI_SOURCE)] = 1;
      return aborted("gave its ncclCommInitRankConfig up: rank " + std::to_string(st.MPI_SOURCE) +
                     " failed its own");
    }
    if ((i & 15) == 0 && c.should_abort && *c.should_abort) {
      Status s = (*c.should_abort)();
      if (!s.ok()) return s;
    }
    const auto waited = clock::now() - start;
    if (!warned && waited >= std::chrono::seconds(30) && c.timeout > std::chrono::seconds(60)) {
      // The stall inspector runs on this thread, so this wait reports itself.
      HVD_LOG(Warning) << "ncclCommInitRankConfig on cuda:" << c.device
                       << " still running after 30 s; giving it up after " << seconds(c.timeout);
      warned = true;
    }
    if (waited >= c.timeout) {
      return internal_error("ncclCommInitRankConfig did not finish within " + seconds(c.timeout) +
                            where +
                            (stuck ? " (HVD_TEST_FAULT=" + c.fault.spec + ": never started)" : ""));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(i < 100 ? 100 : 1000));
  }
}

}  // namespace

Result<TestFault> parse_test_fault(const std::string& spec) {
  TestFault f;
  f.spec = spec;
  if (spec.empty() || spec == "none") return f;
  const auto colon = spec.find(':');
  const std::string point = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  char* end = nullptr;
  const long r = rest.rfind("rank=", 0) == 0 ? std::strtol(rest.c_str() + 5, &end, 10) : -1;
  if (point == "nccl_init") f.point = TestFault::Point::kInit;
  if (point == "nccl_init_stuck") f.point = TestFault::Point::kInitStuck;
  if (f.point == TestFault::Point::kNone || r < 0 || end == nullptr || *end != '\0') {
    return invalid_argument("HVD_TEST_FAULT='" + spec +
                            "' is not <point>:rank=<r> with point nccl_init or nccl_init_stuck "
                            "(a test-only setting)");
  }
  f.rank = static_cast<int>(r);
  return f;
}

const std::string& test_fault_from_env() {
  // Test-only, so not part of core::Config (the user's settings, dumped and documented there);
  // read here once, like Config's own variables.
  static const std::string* spec = [] {
    const char* v = std::getenv("HVD_TEST_FAULT");
    return new std::string(v ? v : "");
  }();
  return *spec;
}

void destroy_comm(ncclComm_t comm) {
  if (!comm) return;
  // Non-blocking: finalize (flushes the communicator's work), wait for it a bounded time,
  // destroy; a finalize that fails or does not end (a peer gone) is an abort instead.
  ncclResult_t rc = ncclCommFinalize(comm);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rc == ncclInProgress && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ncclResult_t state = ncclInProgress;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    rc = q != ncclSuccess ? q : state;
  }
  if (rc == ncclSuccess) {
    ncclCommDestroy(comm);
  } else {
    ncclCommAbort(comm);
  }
}

Status create_comm(const CommSpec& c, Status prepared, ncclComm_t* out) {
  *out = nullptr;
  int rank = 0, size = 1;
  MPI_Comm_rank(c.mpi, &rank);
  MPI_Comm_size(c.mpi, &size);
  static const std::function<Status()> kNever;
  const std::function<Status()>& should_abort = c.should_abort ? *c.should_abort : kNever;
  const std::string tail =
      "; no rank created it, and every later GPU collective of this process set fails at once. "
      "Fix the cause on the ranks named (the device each uses: HVD's local rank % device count, "
      "or the tensors' device), then restart";

  // 1. Preparation and the unique id, agreed before anyone calls into NCCL's bootstrap.
  ncclUniqueId id{};
  if (prepared.ok() && rank == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) prepared = nccl_error(rc, "ncclGetUniqueId", __FILE__, __LINE__);
  }
  Status s = agree_status(c.mpi, prepared, "creating " + c.what, should_abort);
  if (!s.ok()) return Status(s.code(), s.message() + tail);
  HVD_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, c.mpi));

  // 2. This rank's init; a rank that fails tells every other rank at once.
  std::vector<int> heard(static_cast<size_t>(size), 0);
  ncclComm_t comm = nullptr;
  Status mine = init_rank(c, rank, size, id, &comm, &heard);
  std::vector<MPI_Request> notices;
  static const int kNotice = 1;
  bool notified = false;
  for (int h : heard) notified = notified || h != 0;
  const bool tell = !mine.ok() && !notified;
  if (tell) {
    notices.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      notices.push_back(MPI_REQUEST_NULL);
      HVD_MPI_CHECK(MPI_Isend(&kNotice, 1, MPI_INT, r, kTagInitFailed, c.mpi, &notices.back()));
    }
  }

  // 3. The outcome, agreed; then every notice is received, and every send completes with it.
  std::vector<int> told;
  s = agree_status(c.mpi, mine, "creating " + c.what, should_abort, tell ? 1 : 0, &told);
  if (!s.ok() && told.empty()) {
    // The agreement itself failed (a dead peer, an MPI error): the job is ending. Notices to
    // peers that may be gone are released, not waited for.
    for (MPI_Request& r : notices) MPI_Request_free(&r);
    if (comm) ncclCommAbort(comm);
    return s;
  }
  if (!s.ok()) {
    for (int r = 0; r < size; ++r) {
      if (r == rank || !told[static_cast<size_t>(r)] || heard[static_cast<size_t>(r)]) continue;
      int dummy = 0;
      HVD_MPI_CHECK(MPI_Recv(&dummy, 1, MPI_INT, r, kTagInitFailed, c.mpi, MPI_STATUS_IGNORE));
    }
    if (!notices.empty()) {
      HVD_MPI_CHECK(
          MPI_Waitall(static_cast<int>(notices.size()), notices.data(), MPI_STATUSES_IGNORE));
    }
    if (comm) ncclCommAbort(comm);
    return Status(s.code(), s.message() + tail);
  }
  *out = comm;
  return Status::OK();
}

}  // namespace hvd::ops::nccl
