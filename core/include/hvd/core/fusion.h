// SPDX-License-Identifier: Apache-2.0
// Fusion planning: which consecutive responses run as one collective. Pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "hvd/core/message.h"

namespace hvd::core {

struct FusionOptions {
  int64_t threshold_bytes = 64LL << 20;  ///< largest fused buffer; <= 0 disables fusion
  int64_t direct_bytes = 1LL << 20;      ///< tensors this big run alone, in place
  /// Allgathers whose gathered output is this big run alone, straight into their output. A
  /// fused allgather copies every input in and the whole gathered output out; measured at
  /// np = 2 (64 tensors of 16Ki floats, 128 KiB gathered each) fused took 2.0 ms and unfused
  /// 1.2 ms, so the crossover is far below the allreduce one.
  int64_t allgather_direct_bytes = 64LL << 10;
};

/// Merges runs of consecutive allreduce responses whose dtype, device kind, reduce op, scale
/// factors, process set and joined ranks agree, while the fused size stays within the
/// threshold. Runs of consecutive allgathers with the same dtype, device kind, process set and
/// joined ranks merge the same way (their rank_rows are concatenated name by name; the size
/// counted is the gathered size). The device
/// index is ignored: it differs between ranks and the plan must be the same on every rank.
/// Tensors of at least `direct_bytes` (allgather: `allgather_direct_bytes` gathered) are never
/// fused. Error and non-allreduce responses pass
/// through unchanged, as do grouped responses (already one response). The relative order of
/// tensors is preserved.
/// Takes the responses by value: callers that no longer need them move them in.
std::vector<Response> plan_fusion(std::vector<Response> responses, const FusionOptions& opt);

/// The same rules over requests ready through the cache (allreduce and broadcast, no joined
/// ranks): consecutive requests [ends[i-1], ends[i]) run as one collective. Lets the runtime
/// batch its own entries without building a response per tensor first.
std::vector<size_t> plan_fusion_runs(const std::vector<const Request*>& requests,
                                     const FusionOptions& opt);

/// Bytes of all tensors of a response (allgather: of the gathered outputs).
int64_t response_bytes(const Response& r);

}  // namespace hvd::core
