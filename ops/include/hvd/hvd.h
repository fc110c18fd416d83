// SPDX-License-Identifier: Apache-2.0
// hvd: the C++ user's entry point. Initialise, ask who you are, run collectives.
//
//   hvd::init();
//   std::vector<float> grad(n, ...);
//   auto h = hvd::allreduce_async(hvd::TensorView(grad.data(), hvd::DataType::kFloat32, {n}), "grad");
//   hvd::wait(h);   // throws hvd::Error naming the tensor and ranks if the ranks disagree
//   hvd::shutdown();
#pragma once

#include <string>
#include <vector>

#include "hvd/config.h"
#include "hvd/core/handle.h"
#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd {

/// Starts hvd: initialises MPI unless the caller already did (then hvd leaves finalising MPI to
/// the caller), reads the HVD_* configuration and starts the background thread. Without mpirun
/// it runs as a singleton job of size 1. Throws hvd::Error on failure. Calling init() when
/// already initialised is a no-op; init() after shutdown() starts a fresh runtime.
void init();
/// Finishes or fails (with a clear status) everything in flight, stops the background thread,
/// finalises MPI if hvd initialised it. Idempotent.
void shutdown();
bool is_initialized();

int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();
/// True when MPI runs with MPI_THREAD_MULTIPLE (other MPI users may call MPI concurrently).
bool mpi_threads_supported();

bool mpi_built();
bool nccl_built();
bool cuda_built();
bool torch_built();

/// Asynchronous collectives. Names identify a collective across ranks and must be unique among
/// this rank's pending operations; an empty name gets a deterministic automatic one (the same
/// sequence of unnamed calls gives the same names on every rank). Problems visible locally (call
/// before init(), null data, root out of range, duplicate name) throw hvd::Error at once;
/// disagreements between ranks fail the handle, and wait() throws.
Handle allreduce_async(const TensorView& tensor, const std::string& name = "",
                       ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                       double postscale_factor = 1.0);
/// Out-of-place form: `output` must have the shape and dtype of `input`.
Handle allreduce_async(const TensorView& input, const TensorView& output, const std::string& name,
                       ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                       double postscale_factor = 1.0);
/// All tensors negotiated and executed together (atomically); one handle for the group.
Handle grouped_allreduce_async(const std::vector<TensorView>& tensors, const std::string& name = "",
                               ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                               double postscale_factor = 1.0);
/// In place: every rank ends with root_rank's values.
Handle broadcast_async(const TensorView& tensor, int root_rank, const std::string& name = "");

/// Synchronous forms: submit and wait; throw hvd::Error on failure.
void allreduce(const TensorView& tensor, const std::string& name = "",
               ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
               double postscale_factor = 1.0);
void grouped_allreduce(const std::vector<TensorView>& tensors, const std::string& name = "",
                       ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                       double postscale_factor = 1.0);
void broadcast(const TensorView& tensor, int root_rank, const std::string& name = "");
/// Returns once every rank has called barrier().
void barrier();

/// True once the collective finished. Never blocks.
bool poll(const Handle& h);
/// Blocks until finished; throws hvd::Error if it failed.
void wait(const Handle& h);
/// Same as wait() (Horovod's name).
void synchronize(const Handle& h);

}  // namespace hvd
