// SPDX-License-Identifier: Apache-2.0
// Adasum across nodes on host shards (ops/src/nccl/adasum_nodes.cc), the middle step of the
// NCCL executor's Adasum on GPU tensors, without a GPU: the ranks of MPI_COMM_WORLD are grouped
// into made-up nodes of L consecutive ranks (a node-local communicator per group), each rank
// holds its local rank's shard of its node's fused buffer, and the result must equal a double
// precision reference written here: the recursive Adasum of the node buffers, tensor by tensor
// over whole tensors (node j paired with node j ^ 2^k at level k). With L > 1 a tensor's
// elements are spread over several ranks' shards, so a result that used the dot products of
// one shard only would differ.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hvd/ops/nccl/adasum_nodes.h"
#include "hvd/ops/nccl/plan.h"
#include "hvd_catch.h"

using namespace hvd;
using ops::nccl::AdasumNodeComms;

namespace {

// Reference: Adasum of a and b with a's and b's whole-tensor sums, in double.
std::vector<double> ref_pair(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double ca = aa == 0 ? 1.0 : 1.0 - dot / (2 * aa);
  const double cb = bb == 0 ? 1.0 : 1.0 - dot / (2 * bb);
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Reference: the recursive Adasum of one tensor's vectors, one per node (a power of two).
std::vector<double> ref_adasum(std::vector<std::vector<double>> v) {
  const size_t n = v.size();
  for (size_t d = 1; d < n; d *= 2) {
    for (size_t j = 0; j < n; ++j) {
      if (j & d) continue;
      auto c = ref_pair(v[j], v[j | d]);
      v[j] = c;
      v[j | d] = c;
    }
  }
  return v[0];
}

// The test tensors: name, element count, and node j's value of element i.
struct Tensor {
  const char* what;
  int64_t n;
  double (*value)(int node, int nodes, int64_t i);
};

double random_value(int node, int, int64_t i) {
  std::mt19937_64 g(static_cast<uint64_t>(node * 1000003 + i));
  return std::uniform_real_distribution<double>(-1.0, 1.0)(g);
}
// Node j is nonzero only on its own block of elements: orthogonal, Adasum = sum.
double orthogonal(int node, int nodes, int64_t i) {
  const int64_t block = 96 / nodes;
  return i / block == node ? 1.0 + static_cast<double>(i % 5) : 0.0;
}
// Node j holds (j + 1) * u: parallel, Adasum = average.
double parallel(int node, int, int64_t i) {
  return (node + 1) * std::sin(0.3 * static_cast<double>(i) + 1);
}
// Only node 0 has a nonzero vector: a zero norm counts as coefficient 1, the result is node 0's.
double one_nonzero(int node, int, int64_t i) {
  return node == 0 ? 0.5 + static_cast<double>(i) : 0.0;
}
double huge(int node, int nodes, int64_t i) { return 1e30 * random_value(node, nodes, i); }
double tiny(int node, int nodes, int64_t i) { return 1e-30 * random_value(node, nodes, i); }

const Tensor kTensors[] = {
    {"random", 37, random_value},
    {"single element", 1, random_value},
    {"orthogonal", 96, orthogonal},
    {"empty", 0, random_value},
    {"random over several shards", 333, random_value},
    {"parallel", 129, parallel},
    {"one nonzero", 50, one_nonzero},
    {"huge", 70, huge},
    {"tiny", 70, tiny},
};

struct Layout {
  MPI_Comm local = MPI_COMM_NULL;
  int rank = 0, size = 1, node = 0, nodes = 1, local_rank = 0;
};

// Nodes of `per_node` consecutive ranks of `world`.
Layout make_layout(MPI_Comm world, int per_node) {
  Layout l;
  MPI_Comm_rank(world, &l.rank);
  MPI_Comm_size(world, &l.size);
  l.node = l.rank / per_node;
  l.nodes = l.size / per_node;
  l.local_rank = l.rank % per_node;
  MPI_Comm_split(world, l.node, l.rank, &l.local);
  return l;
}

template <typename T>
double run_case(MPI_Comm world, int per_node, DataType dtype) {
  Layout lay = make_layout(world, per_node);
  AdasumNodeComms comms;
  Status s = ops::nccl::make_adasum_node_comms(world, lay.local, &comms);
  REQUIRE(s.ok());
  REQUIRE(comms.nodes == lay.nodes);
  REQUIRE(comms.node == lay.node);

  std::vector<int64_t> numels;
  for (const Tensor& t : kTensors) numels.push_back(t.n);
  const auto fl = ops::nccl::fused_layout(numels, sizeof(T), per_node);
  // Node buffers (padding NaN: it must never reach a tensor) and the reference result.
  std::vector<std::vector<double>> node_buf(
      static_cast<size_t>(lay.nodes),
      std::vector<double>(static_cast<size_t>(fl.padded), std::nan("")));
  std::vector<double> want(static_cast<size_t>(fl.padded), 0.0);
  for (size_t t = 0; t < numels.size(); ++t) {
    std::vector<std::vector<double>> per_node_values;
    for (int j = 0; j < lay.nodes; ++j) {
      std::vector<double> v(static_cast<size_t>(numels[t]));
      for (int64_t i = 0; i < numels[t]; ++i) {
        // Rounded to T first: the reference starts from the values the ranks hold.
        v[static_cast<size_t>(i)] =
            static_cast<double>(static_cast<T>(kTensors[t].value(j, lay.nodes, i)));
        node_buf[static_cast<size_t>(j)][static_cast<size_t>(fl.offset[t] + i)] =
            v[static_cast<size_t>(i)];
      }
      per_node_values.push_back(v);
    }
    const auto r = ref_adasum(per_node_values);
    for (int64_t i = 0; i < numels[t]; ++i) {
      want[static_cast<size_t>(fl.offset[t] + i)] = r[static_cast<size_t>(i)];
    }
  }
  const int64_t chunk = fl.padded / per_node, begin = lay.local_rank * chunk;
  std::vector<T> shard(static_cast<size_t>(chunk));
  for (int64_t i = 0; i < chunk; ++i) {
    shard[static_cast<size_t>(i)] =
        static_cast<T>(node_buf[static_cast<size_t>(lay.node)][static_cast<size_t>(begin + i)]);
  }
  const auto segs = ops::nccl::shard_segments(fl.offset, numels, begin, chunk);
  bool abandoned = false;
  s = ops::nccl::adasum_across_nodes(shard.data(), chunk, dtype, segs, comms, {}, &abandoned);
  REQUIRE(s.ok());
  REQUIRE_FALSE(abandoned);
  // The largest error relative to the tensor's largest reference magnitude.
  double worst = 0;
  for (size_t t = 0; t < numels.size(); ++t) {
    double scale = 0;
    for (int64_t i = 0; i < numels[t]; ++i) {
      scale = std::max(scale, std::fabs(want[static_cast<size_t>(fl.offset[t] + i)]));
    }
    const auto& sg = segs[t];
    for (int64_t i = sg.offset; i < sg.offset + sg.count; ++i) {
      const double got = static_cast<double>(shard[static_cast<size_t>(i)]);
      const double err =
          std::fabs(got - want[static_cast<size_t>(begin + i)]) / (scale > 0 ? scale : 1);
      if (!(err <= worst)) {
        worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
        if (err > 1e-4 || std::isnan(err)) {
          std::printf("[rank %d] %s element %lld: got %g want %g\n", lay.rank, kTensors[t].what,
                      static_cast<long long>(begin + i - fl.offset[t]), got,
                      want[static_cast<size_t>(begin + i)]);
        }
      }
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, world);
  MPI_Comm_free(&lay.local);
  return worst;
}

}  // namespace

TEST_CASE("shard_segments places each tensor's elements in a shard", "[mpi]") {
  // Tensors at [0, 5), [8, 9), [16, 30) in a buffer of 32 split into 4 shards of 8.
  const std::vector<int64_t> off = {0, 8, 16}, n = {5, 1, 14};
  auto s0 = ops::nccl::shard_segments(off, n, 0, 8);
  REQUIRE(s0[0].offset == 0);
  REQUIRE(s0[0].count == 5);
  REQUIRE(s0[1].count == 0);
  REQUIRE(s0[2].count == 0);
  auto s2 = ops::nccl::shard_segments(off, n, 16, 8);
  REQUIRE(s2[2].offset == 0);
  REQUIRE(s2[2].count == 8);
  auto s3 = ops::nccl::shard_segments(off, n, 24, 8);
  REQUIRE(s3[2].offset == 0);
  REQUIRE(s3[2].count == 6);
  REQUIRE(s3[0].count == 0);
}

TEST_CASE("Adasum across nodes equals the recursive Adasum of the node buffers, per tensor",
          "[mpi]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int per_node = 1; per_node <= size; per_node *= 2) {
    if (size % per_node != 0) continue;
    const int nodes = size / per_node;
    if ((nodes & (nodes - 1)) != 0) continue;
    const double e32 = run_case<float>(MPI_COMM_WORLD, per_node, DataType::kFloat32);
    const double e64 = run_case<double>(MPI_COMM_WORLD, per_node, DataType::kFloat64);
    INFO(nodes << " nodes of " << per_node << " ranks");
    if (rank == 0)
      std::printf("%d nodes x %d ranks: largest relative error float32 %.3g, float64 %.3g\n", nodes,
                  per_node, e32, e64);
    REQUIRE(e32 < 1e-6);
    REQUIRE(e64 < 1e-13);
  }
}

TEST_CASE("Adasum across nodes refuses nodes of different sizes on every rank", "[mpi]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 3) return;  // needs two nodes of different sizes
  // Node 0: rank 0 alone; node 1: every other rank.
  MPI_Comm local;
  MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : 1, rank, &local);
  AdasumNodeComms comms;
  const Status s = ops::nccl::make_adasum_node_comms(MPI_COMM_WORLD, local, &comms);
  MPI_Comm_free(&local);
  REQUIRE_FALSE(s.ok());
  REQUIRE(s.code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(s.message(),
               test::Contains("hold different numbers of its " + std::to_string(size) + " ranks"));
}
