// SPDX-License-Identifier: Apache-2.0
// Collectives on torch::Tensor whose output shape negotiation decides: allgather, alltoall,
// reducescatter (and grouped forms). Outputs are torch tensors of the input's dtype and device,
// allocated by torch (through the core's Allocator seam) once every rank's shape is known; the
// `_async` forms return a TorchHandle that keeps inputs and outputs alive until done.
//
//   torch::Tensor all = hvd::allgather(rows, "rows");              // every rank's rows, in order
//   auto [out, got] = hvd::alltoall(t, {2, 0, 1}, "route");       // out: rows sent here, got: per
//   rank torch::Tensor mine = hvd::reducescatter(grad, "g");            // this rank's slice of the
//   sum/avg
//
// Non-contiguous inputs are staged through a contiguous copy. Local mistakes throw hvd::Error at
// once; disagreements between ranks (dtype, trailing dims, splits) throw from wait().
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "hvd/hvd.h"
#include "hvd/optim/collectives.h"

namespace hvd::optim {

/// Concatenation along dim 0 of every rank's tensor, in rank order. Dim 0 may differ between
/// ranks (zero included); the other dims must match.
TorchHandle allgather_async(const torch::Tensor& tensor, const std::string& name = "",
                            const ProcessSet& process_set = {});
torch::Tensor allgather(const torch::Tensor& tensor, const std::string& name = "",
                        const ProcessSet& process_set = {});
/// Several allgathers negotiated and executed together; wait_all() returns one output per input.
TorchHandle grouped_allgather_async(const std::vector<torch::Tensor>& tensors,
                                    const std::string& name = "",
                                    const ProcessSet& process_set = {});
std::vector<torch::Tensor> grouped_allgather(const std::vector<torch::Tensor>& tensors,
                                             const std::string& name = "",
                                             const ProcessSet& process_set = {});

/// Result of alltoall: the rows every rank sent here (in rank order) and how many came from each.
struct AlltoallResult {
  torch::Tensor output;
  std::vector<int64_t> received_splits;
};
/// `splits[j]` consecutive rows of dim 0 go to rank j (within the process set); empty splits =
/// an equal split (dim 0 must divide evenly). TorchHandle::received_splits() gives the counts.
TorchHandle alltoall_async(const torch::Tensor& tensor, const std::vector<int64_t>& splits = {},
                           const std::string& name = "", const ProcessSet& process_set = {});
AlltoallResult alltoall(const torch::Tensor& tensor, const std::vector<int64_t>& splits = {},
                        const std::string& name = "", const ProcessSet& process_set = {});

/// Reduces across ranks (kAverage default, or kSum; pre/postscale) and returns this rank's slice
/// of dim 0: with R rows over N ranks, ranks 0 .. R%N-1 get R/N+1 rows, the rest R/N.
TorchHandle reducescatter_async(const torch::Tensor& tensor, const std::string& name = "",
                                ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                                double postscale_factor = 1.0, const ProcessSet& process_set = {});
torch::Tensor reducescatter(const torch::Tensor& tensor, const std::string& name = "",
                            ReduceOp op = ReduceOp::kAverage, double prescale_factor = 1.0,
                            double postscale_factor = 1.0, const ProcessSet& process_set = {});
TorchHandle grouped_reducescatter_async(const std::vector<torch::Tensor>& tensors,
                                        const std::string& name = "",
                                        ReduceOp op = ReduceOp::kAverage,
                                        double prescale_factor = 1.0, double postscale_factor = 1.0,
                                        const ProcessSet& process_set = {});
std::vector<torch::Tensor> grouped_reducescatter(const std::vector<torch::Tensor>& tensors,
                                                 const std::string& name = "",
                                                 ReduceOp op = ReduceOp::kAverage,
                                                 double prescale_factor = 1.0,
                                                 double postscale_factor = 1.0,
                                                 const ProcessSet& process_set = {});

}  // namespace hvd::optim
