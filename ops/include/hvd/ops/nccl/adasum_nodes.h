// SPDX-License-Identifier: Apache-2.0
// Adasum across nodes on host shards: the middle step of the NCCL executor's Adasum on GPU
// tensors (NCCL reduce-scatter inside each node, this across nodes, NCCL allgather inside each
// node). No CUDA here: it runs on host memory over MPI, so the [mpi] tests check it on a
// machine without a GPU, with nodes made up of groups of ranks.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd::ops::nccl {

/// The communicators of Adasum across nodes, for one process set whose nodes all hold the same
/// number of its ranks. Nodes are numbered 0..nodes-1 in the order of their lowest rank in the
/// set, the same for every local rank (so every shard is combined along the same tree).
struct AdasumNodeComms {
  int node = 0, nodes = 1;
  /// The ranks with this rank's local rank, one per node; rank in it = node number.
  MPI_Comm cross = MPI_COMM_NULL;
  /// levels[k]: every rank (all local ranks) of the 2^(k+1) nodes whose numbers agree above
  /// bit k: the ranks holding pieces of the two vectors combined at level k.
  std::vector<MPI_Comm> levels;

  AdasumNodeComms() = default;
  AdasumNodeComms(const AdasumNodeComms&) = delete;
  AdasumNodeComms& operator=(const AdasumNodeComms&) = delete;
  /// Frees the communicators (unless MPI is finalized).
  ~AdasumNodeComms();
};

/// Creates `out`'s communicators. Collective over `set` (every rank of it, at the same point);
/// `local` is this rank's node-local communicator within `set`. The number of nodes must be a
/// power of two and every node must hold the same number of ranks: an invalid_argument
/// otherwise, decided from values every rank shares (so the same on every rank).
Status make_adasum_node_comms(MPI_Comm set, MPI_Comm local, AdasumNodeComms* out);

/// A tensor's elements in a shard: `count` elements from `offset` (shard-relative; count 0
/// when the tensor has none there).
struct ShardSegment {
  int64_t offset = 0;
  int64_t count = 0;
};

/// Where each tensor of a fused buffer (tensor i: `numels[i]` elements from `offsets[i]`)
/// falls in the shard [shard_begin, shard_begin + shard_len) of that buffer. One segment per
/// tensor, in order; elements outside every tensor (padding) belong to none.
std::vector<ShardSegment> shard_segments(const std::vector<int64_t>& offsets,
                                         const std::vector<int64_t>& numels, int64_t shard_begin,
                                         int64_t shard_len);

/// Adasum across nodes, in place, of this rank's shard: `n` elements of `dtype` (float32 or
/// float64) at `shard`, the same length on every rank. With v_j the buffer of node j (each rank
/// holds its local rank's shard of it), every rank ends with its shard of the recursive Adasum
/// of v_0..v_{nodes-1}: at level k node j is paired with node j ^ 2^k, and each tensor (its
/// segments `segs`, the same number on every rank) is combined with its own dot product and
/// norms over the WHOLE tensor: the partial sums of every shard, summed over levels[k]. Float64
/// accumulation. Elements outside every segment are carried but not combined.
///
/// Collective over `c` (vector halving, distance doubling: at level k a rank trades half of its
/// range with the same local rank of node ^ 2^k, then the halves are gathered back). Waits poll
/// `should_abort` (may be empty). When it gave up on requests MPI had not finished (an abort or
/// a dead peer), `*abandoned` is set: MPI may still write into `shard`, which the caller must
/// then never reuse.
Status adasum_across_nodes(void* shard, int64_t n, DataType dtype,
                           const std::vector<ShardSegment>& segs, const AdasumNodeComms& c,
                           const std::function<Status()>& should_abort, bool* abandoned);

}  // namespace hvd::ops::nccl
