// SPDX-License-Identifier: Apache-2.0
// Adasum across nodes on host shards (see adasum_nodes.h).
//
// Protocol, for one local rank's shard [0, n) on node j of N = 2^L nodes:
//   level k = 0..L-1: the range [lo, hi) held so far is halved at mid; the node whose bit k is
//   0 keeps [lo, mid), the other [mid, hi). Each sends the half it gives up to its partner
//   (node j ^ 2^k, same local rank) and receives the partner's values of the half it keeps.
//   On the kept half it holds a (the lower node's vector) and b (the upper's); per tensor it
//   sums a.b, |a|^2 and |b|^2 over its part, and one allreduce over levels[k] (every rank of
//   the 2^(k+1) nodes: all local ranks, both halves) gives each tensor's sums over the whole
//   tensor. The kept half becomes adasum(a, b) per tensor.
//   Then, levels L-1..0: each rank sends its kept range to its partner and receives the
//   partner's, rebuilding the range it held before that level.
#include "hvd/ops/nccl/adasum_nodes.h"

#include <algorithm>
#include <memory>
#include <string>

#include "hvd/ops/adasum.h"
#include "hvd/ops/mpi_util.h"

namespace hvd::ops::nccl {

namespace {

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

// MPI counts are ints: a transfer goes as pieces of at most 2^30 elements.
constexpr int64_t kPiece = int64_t{1} << 30;
size_t pieces(int64_t n) { return static_cast<size_t>((n + kPiece - 1) / kPiece); }

template <typename T>
MPI_Datatype mpi_of() {
  return sizeof(T) == 4 ? MPI_FLOAT : MPI_DOUBLE;
}

// Sends `send_n` elements at `send` to `peer` and receives `recv_n` from it into `recv`.
template <typename T>
Status exchange(const T* send, int64_t send_n, T* recv, int64_t recv_n, int peer, MPI_Comm comm,
                const std::function<Status()>& should_abort, bool* abandoned) {
  RequestBatch batch(pieces(send_n) + pieces(recv_n), &should_abort, abandoned);
  for (int64_t at = 0; at < recv_n; at += kPiece) {
    HVD_MPI_CHECK(MPI_Irecv(recv + at, static_cast<int>(std::min(kPiece, recv_n - at)), mpi_of<T>(),
                            peer, 0, comm, batch.add_recv()));
  }
  for (int64_t at = 0; at < send_n; at += kPiece) {
    HVD_MPI_CHECK(MPI_Isend(send + at, static_cast<int>(std::min(kPiece, send_n - at)), mpi_of<T>(),
                            peer, 0, comm, batch.add_send(peer)));
  }
  return batch.wait();
}

template <typename T>
Status combine_levels(T* x, int64_t n, const std::vector<ShardSegment>& segs,
                      const AdasumNodeComms& c, const std::function<Status()>& should_abort,
                      bool* abandoned) {
  struct Range {
    int64_t lo, hi;
  };
  const size_t k_count = segs.size();
  std::vector<Range> held;  // held[k]: the range before level k
  // The partner's half and the sums: owned by shared pointers so that a wait given up on
  // (wait_request) can keep them alive while MPI may still write them.
  auto other = std::make_shared<std::vector<T>>(static_cast<size_t>(n - n / 2));
  auto sums = std::make_shared<std::vector<double>>(3 * k_count);
  int64_t lo = 0, hi = n;
  for (int k = 0; (1 << k) < c.nodes; ++k) {
    held.push_back({lo, hi});
    const int partner = c.node ^ (1 << k);
    const bool lower = (c.node & (1 << k)) == 0;
    const int64_t mid = lo + (hi - lo) / 2;
    const Range keep = lower ? Range{lo, mid} : Range{mid, hi};
    const Range give = lower ? Range{mid, hi} : Range{lo, mid};
    T* theirs = other->data();
    Status s = exchange(x + give.lo, give.hi - give.lo, theirs, keep.hi - keep.lo, partner, c.cross,
                        should_abort, abandoned);
    if (!s.ok()) {
      if (abandoned && *abandoned) keep_forever(other);
      return s;
    }
    // theirs[i - keep.lo] is the partner's value of element i.
    std::fill(sums->begin(), sums->end(), 0.0);
    for (size_t t = 0; t < k_count; ++t) {
      const int64_t b = std::max(keep.lo, segs[t].offset);
      const int64_t e = std::min(keep.hi, segs[t].offset + segs[t].count);
      double dot = 0, aa = 0, bb = 0;
      for (int64_t i = b; i < e; ++i) {
        const double mine = x[i], peer = theirs[i - keep.lo];
        const double av = lower ? mine : peer, bv = lower ? peer : mine;
        dot += av * bv;
        aa += av * av;
        bb += bv * bv;
      }
      (*sums)[3 * t] = dot;
      (*sums)[3 * t + 1] = aa;
      (*sums)[3 * t + 2] = bb;
    }
    if (k_count > 0) {
      MPI_Request req = MPI_REQUEST_NULL;
      HVD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, sums->data(), static_cast<int>(3 * k_count),
                                   MPI_DOUBLE, MPI_SUM, c.levels[static_cast<size_t>(k)], &req));
      HVD_RETURN_IF_ERROR(wait_request(&req, should_abort, sums));
    }
    for (size_t t = 0; t < k_count; ++t) {
      const AdasumCoefficients co =
          adasum_coefficients((*sums)[3 * t], (*sums)[3 * t + 1], (*sums)[3 * t + 2]);
      const int64_t b = std::max(keep.lo, segs[t].offset);
      const int64_t e = std::min(keep.hi, segs[t].offset + segs[t].count);
      for (int64_t i = b; i < e; ++i) {
        const double mine = x[i], peer = theirs[i - keep.lo];
        const double av = lower ? mine : peer, bv = lower ? peer : mine;
        x[i] = static_cast<T>(co.a_coef * av + co.b_coef * bv);
      }
    }
    lo = keep.lo;
    hi = keep.hi;
  }
  // Gathered back: at level k the partner holds the other half of held[k], fully reduced.
  for (int k = static_cast<int>(held.size()) - 1; k >= 0; --k) {
    const Range r = held[static_cast<size_t>(k)];
    const int partner = c.node ^ (1 << k);
    const int64_t mid = r.lo + (r.hi - r.lo) / 2;
    const bool lower = (c.node & (1 << k)) == 0;
    const Range mine = lower ? Range{r.lo, mid} : Range{mid, r.hi};
    const Range theirs = lower ? Range{mid, r.hi} : Range{r.lo, mid};
    HVD_RETURN_IF_ERROR(exchange(x + mine.lo, mine.hi - mine.lo, x + theirs.lo,
                                 theirs.hi - theirs.lo, partner, c.cross, should_abort, abandoned));
  }
  return Status::OK();
}

}  // namespace

AdasumNodeComms::~AdasumNodeComms() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (cross != MPI_COMM_NULL) MPI_Comm_free(&cross);
  for (MPI_Comm& l : levels) {
    if (l != MPI_COMM_NULL) MPI_Comm_free(&l);
  }
}

Status make_adasum_node_comms(MPI_Comm set, MPI_Comm local, AdasumNodeComms* out) {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  MPI_Comm_rank(set, &rank);
  MPI_Comm_size(set, &size);
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  // Each node is known by its lowest rank; every rank learns every rank's node.
  int leader = rank;
  HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local));
  std::vector<int> leaders(static_cast<size_t>(size));
  HVD_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, set));
  std::vector<int> distinct = leaders;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const int nodes = static_cast<int>(distinct.size());
  bool equal = true;
  for (int l : distinct) {
    equal = equal && std::count(leaders.begin(), leaders.end(), l) == size / nodes;
  }
  if (!equal || size % nodes != 0) {
    return invalid_argument("Adasum on GPU tensors: the " + std::to_string(nodes) +
                            " nodes of this process set hold different numbers of its " +
                            std::to_string(size) +
                            " ranks; start the same number of ranks on every node");
  }
  if (!power_of_two(nodes)) {
    return invalid_argument("Adasum on GPU tensors: this process set spans " +
                            std::to_string(nodes) + " nodes (" + std::to_string(local_size) +
                            " ranks each); Adasum across nodes needs a power-of-two number of "
                            "nodes: use 1, 2, 4, 8 ... nodes");
  }
  out->nodes = nodes;
  out->node = static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), leader) -
                               distinct.begin());
  HVD_MPI_CHECK(MPI_Comm_split(set, local_rank, out->node, &out->cross));
  for (int k = 0; (1 << k) < nodes; ++k) {
    out->levels.push_back(MPI_COMM_NULL);
    HVD_MPI_CHECK(MPI_Comm_split(set, out->node >> (k + 1), rank, &out->levels.back()));
  }
  return Status::OK();
}

std::vector<ShardSegment> shard_segments(const std::vector<int64_t>& offsets,
                                         const std::vector<int64_t>& numels, int64_t shard_begin,
                                         int64_t shard_len) {
  std::vector<ShardSegment> out(numels.size());
  const int64_t shard_end = shard_begin + shard_len;
  for (size_t i = 0; i < numels.size() && i < offsets.size(); ++i) {
    const int64_t b = std::max(offsets[i], shard_begin);
    const int64_t e = std::min(offsets[i] + numels[i], shard_end);
    if (e > b) out[i] = {b - shard_begin, e - b};
  }
  return out;
}

Status adasum_across_nodes(void* shard, int64_t n, DataType dtype,
                           const std::vector<ShardSegment>& segs, const AdasumNodeComms& c,
                           const std::function<Status()>& should_abort, bool* abandoned) {
  if (c.nodes <= 1) return Status::OK();
  if (dtype == DataType::kFloat32) {
    return combine_levels(static_cast<float*>(shard), n, segs, c, should_abort, abandoned);
  }
  if (dtype == DataType::kFloat64) {
    return combine_levels(static_cast<double*>(shard), n, segs, c, should_abort, abandoned);
  }
  return invalid_argument(std::string("Adasum across nodes: ") + dtype_name(dtype) +
                          " shards are combined as float32 or float64 (internal error)");
}

}  // namespace hvd::ops::nccl
