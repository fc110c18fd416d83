// SPDX-License-Identifier: Apache-2.0
// Agreed creation of NCCL communicators, and the test-only fault hook. Private to the GPU module.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <string>

#include "hvd/core/status.h"
#include "hvd/ops/nccl/nccl_executor.h"

namespace hvd::ops::nccl {

/// Test-only fault injection, never a user setting: HVD_TEST_FAULT="<point>:rank=<r>" makes
/// rank r (of the process set's communicator) fail at <point>, so that the agreement and abort
/// paths run in tests, the first one even without a GPU. Points:
///   nccl_init        fails while preparing a communicator, before touching CUDA or NCCL;
///   nccl_init_stuck  never starts ncclCommInitRankConfig, as a rank whose init hangs: its
///                    peers give theirs up at the deadline (NcclOptions::init_timeout).
/// Compiled in always; docs/gpu.md lists it with the tests that use it.
/// (TestFault itself is declared in hvd/ops/nccl/nccl_executor.h, which holds one.)

/// Parses a spec as above ("" or "none": no fault). Errors name the spec and the grammar.
Result<TestFault> parse_test_fault(const std::string& spec);
/// HVD_TEST_FAULT, read once per process ("" when unset).
const std::string& test_fault_from_env();

/// What create_comm() needs besides the unique id's communicator.
struct CommSpec {
  MPI_Comm mpi = MPI_COMM_NULL;  // the ranks of the communicator, in NCCL rank order
  int device = -1;
  std::chrono::milliseconds timeout{0};
  const std::function<Status()>* should_abort = nullptr;  // null: never
  TestFault fault;
  std::string what;  // "the NCCL communicator of the process set", for messages
};

/// Collective over `c.mpi`, called by every rank at the same point (the background thread,
/// which alone uses the set's data communicator, at the same response). `prepared` is this
/// rank's outcome so far (no device, cudaSetDevice failed, an injected fault ...).
///
/// 1. Every rank's `prepared` (and rank 0's ncclGetUniqueId) is agreed over MPI: if any rank
///    failed, every rank returns the same error naming each failed rank and its reason, and no
///    rank calls NCCL.
/// 2. The unique id is broadcast; each rank starts ncclCommInitRankConfig non-blocking and
///    polls ncclCommGetAsyncError until it is done, fails, `c.timeout` passes, `should_abort`
///    reports an error, or a peer's failure notice arrives (a rank whose init fails tells
///    every other rank at once with a small message, so they give theirs up without waiting
///    for the deadline).
/// 3. The outcome is agreed again: OK on every rank (then *out is the communicator), or every
///    rank aborts its half-made communicator (ncclCommAbort) and returns the same error. Every
///    notice sent is received before returning (sends are never cancelled).
Status create_comm(const CommSpec& c, Status prepared, ncclComm_t* out);

/// Frees a communicator create_comm() made (ncclCommFinalize, waited for at most 10 s, then
/// ncclCommDestroy; ncclCommAbort when finalizing fails or does not end). Null: nothing.
void destroy_comm(ncclComm_t comm);

}  // namespace hvd::ops::nccl
