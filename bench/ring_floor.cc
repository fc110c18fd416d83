// SPDX-License-Identifier: Apache-2.0
// ring_floor: what the message pattern of hvd's fused ring allreduce costs without hvd, for K
// separate tensors of S floats (np 2), against one raw MPI_Allreduce of the same bytes laid
// end to end. The floor of the "K x S" cases of hvd_bench where every tensor travels as its
// own message (64 x 16Ki):
//   per-tensor   one message per tensor and direction (what hvd's ring sends): reduce-scatter
//                into a staging buffer + MPI_Reduce_local, allgather straight into the tensors
//   contiguous   the same two phases on one contiguous buffer (two messages): what the ring
//                would cost if the tensors were one
//   hindexed     the per-tensor halves as one message of an MPI_Type_create_hindexed datatype
//                (no copy by hvd; Open MPI packs it)
//   fused        what hvd does with small tensors: copied into a buffer in slices of 256 KiB
//                (MpiExecutor::kFusedSlice), one MPI_Allreduce per slice, copied back: the
//                floor of the many-small-tensors case (1024 x 256) without hvd's bookkeeping
// Prints medians (slowest rank) and each over raw, per round.
//
//   mpirun -np 2 hvd_ring_floor [--k 64] [--s 16384] [--iters 100] [--rounds 3]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

constexpr int kTagReduce = 1;
constexpr int kTagGather = 2;

struct Setup {
  int k = 64;
  int s = 16384;
  int rank = 0;
  int peer = 1;
  std::vector<std::vector<float>> tensors;  // this rank's K tensors
  std::vector<float> staged;                // what arrives in the reduce-scatter
  std::vector<float> flat;                  // the same bytes laid end to end
  std::vector<float> fusion;                // fused: one slice
  // The half this rank reduces (first) and the half it sends (second), in tensors.
  int mine0() const { return rank == 0 ? 0 : k / 2; }
  int theirs0() const { return rank == 0 ? k / 2 : 0; }
};

void per_tensor(Setup& b) {
  const int half = b.k / 2;
  std::vector<MPI_Request> rq;
  rq.reserve(static_cast<size_t>(b.k));
  for (int i = 0; i < half; ++i) {
    rq.emplace_back();
    MPI_Irecv(b.staged.data() + static_cast<size_t>(i) * b.s, b.s, MPI_FLOAT, b.peer, kTagReduce,
              MPI_COMM_WORLD, &rq.back());
  }
  for (int i = 0; i < half; ++i) {
    rq.emplace_back();
    MPI_Isend(b.tensors[static_cast<size_t>(b.theirs0() + i)].data(), b.s, MPI_FLOAT, b.peer,
              kTagReduce, MPI_COMM_WORLD, &rq.back());
  }
  MPI_Waitall(static_cast<int>(rq.size()), rq.data(), MPI_STATUSES_IGNORE);
  for (int i = 0; i < half; ++i) {
    MPI_Reduce_local(b.staged.data() + static_cast<size_t>(i) * b.s,
                     b.tensors[static_cast<size_t>(b.mine0() + i)].data(), b.s, MPI_FLOAT, MPI_SUM);
  }
  rq.clear();
  for (int i = 0; i < half; ++i) {
    rq.emplace_back();
    MPI_Irecv(b.tensors[static_cast<size_t>(b.theirs0() + i)].data(), b.s, MPI_FLOAT, b.peer,
              kTagGather, MPI_COMM_WORLD, &rq.back());
  }
  for (int i = 0; i < half; ++i) {
    rq.emplace_back();
    MPI_Isend(b.tensors[static_cast<size_t>(b.mine0() + i)].data(), b.s, MPI_FLOAT, b.peer,
              kTagGather, MPI_COMM_WORLD, &rq.back());
  }
  MPI_Waitall(static_cast<int>(rq.size()), rq.data(), MPI_STATUSES_IGNORE);
}

void contiguous(Setup& b) {
  const int n = b.k / 2 * b.s;
  float* mine = b.flat.data() + static_cast<size_t>(b.mine0()) * b.s;
  float* theirs = b.flat.data() + static_cast<size_t>(b.theirs0()) * b.s;
  MPI_Request rq[2];
  MPI_Irecv(b.staged.data(), n, MPI_FLOAT, b.peer, kTagReduce, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(theirs, n, MPI_FLOAT, b.peer, kTagReduce, MPI_COMM_WORLD, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  MPI_Reduce_local(b.staged.data(), mine, n, MPI_FLOAT, MPI_SUM);
  MPI_Irecv(theirs, n, MPI_FLOAT, b.peer, kTagGather, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(mine, n, MPI_FLOAT, b.peer, kTagGather, MPI_COMM_WORLD, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
}

// The tensors [first, first + K/2) as one datatype at absolute addresses (MPI_BOTTOM).
MPI_Datatype half_type(Setup& b, int first) {
  const int half = b.k / 2;
  std::vector<MPI_Aint> at(static_cast<size_t>(half));
  std::vector<int> len(static_cast<size_t>(half), b.s);
  for (int i = 0; i < half; ++i) {
    MPI_Get_address(b.tensors[static_cast<size_t>(first + i)].data(), &at[static_cast<size_t>(i)]);
  }
  MPI_Datatype t = MPI_DATATYPE_NULL;
  MPI_Type_create_hindexed(half, len.data(), at.data(), MPI_FLOAT, &t);
  MPI_Type_commit(&t);
  return t;
}

void hindexed(Setup& b) {
  const int half = b.k / 2;
  MPI_Datatype mine = half_type(b, b.mine0()), theirs = half_type(b, b.theirs0());
  MPI_Request rq[2];
  MPI_Irecv(b.staged.data(), half * b.s, MPI_FLOAT, b.peer, kTagReduce, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(MPI_BOTTOM, 1, theirs, b.peer, kTagReduce, MPI_COMM_WORLD, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  for (int i = 0; i < half; ++i) {
    MPI_Reduce_local(b.staged.data() + static_cast<size_t>(i) * b.s,
                     b.tensors[static_cast<size_t>(b.mine0() + i)].data(), b.s, MPI_FLOAT, MPI_SUM);
  }
  MPI_Irecv(MPI_BOTTOM, 1, theirs, b.peer, kTagGather, MPI_COMM_WORLD, &rq[0]);
  MPI_Isend(MPI_BOTTOM, 1, mine, b.peer, kTagGather, MPI_COMM_WORLD, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  MPI_Type_free(&mine);
  MPI_Type_free(&theirs);
}

void fused(Setup& b) {
  const size_t slice = b.fusion.size(), total = static_cast<size_t>(b.k) * b.s;
  size_t t = 0, off = 0;   // the copy-in position: tensor, element
  size_t u = 0, uoff = 0;  // the copy-out position
  for (size_t start = 0; start < total; start += slice) {
    const size_t len = std::min(slice, total - start);
    for (size_t pos = 0; pos < len;) {
      const size_t n = std::min(len - pos, static_cast<size_t>(b.s) - off);
      std::memcpy(b.fusion.data() + pos, b.tensors[t].data() + off, n * sizeof(float));
      pos += n;
      off += n;
      if (off == static_cast<size_t>(b.s)) {
        ++t;
        off = 0;
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, b.fusion.data(), static_cast<int>(len), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    for (size_t pos = 0; pos < len;) {
      const size_t n = std::min(len - pos, static_cast<size_t>(b.s) - uoff);
      std::memcpy(b.tensors[u].data() + uoff, b.fusion.data() + pos, n * sizeof(float));
      pos += n;
      uoff += n;
      if (uoff == static_cast<size_t>(b.s)) {
        ++u;
        uoff = 0;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Setup b;
  int size = 0, iters = 100, rounds = 3;
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--k") b.k = v;
    if (a == "--s") b.s = v;
    if (a == "--iters") iters = v;
    if (a == "--rounds") rounds = v;
  }
  if (size != 2 || b.k < 2 || b.k % 2 != 0 || b.s < 1) {
    if (b.rank == 0) std::fprintf(stderr, "ring_floor: np 2, an even --k >= 2, --s >= 1\n");
    MPI_Finalize();
    return 2;
  }
  b.peer = 1 - b.rank;
  b.tensors.assign(static_cast<size_t>(b.k), std::vector<float>(static_cast<size_t>(b.s), 1.0f));
  b.staged.assign(static_cast<size_t>(b.k / 2) * b.s, 0.0f);
  b.flat.assign(static_cast<size_t>(b.k) * b.s, 1.0f);
  b.fusion.assign(std::min<size_t>(b.flat.size(), (256 << 10) / sizeof(float)), 0.0f);
  auto raw = [&] {
    MPI_Allreduce(MPI_IN_PLACE, b.flat.data(), b.k * b.s, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  if (b.rank == 0) {
    std::printf("%d x %d floats, np 2, median ms of %d iterations (slowest rank)\n", b.k, b.s,
                iters);
    std::printf("%-6s %9s %12s %7s %12s %7s %10s %7s %9s %7s\n", "round", "raw ms", "per-tensor",
                "/raw", "contiguous", "/raw", "hindexed", "/raw", "fused", "/raw");
  }
  for (int r = 0; r < rounds; ++r) {
    const double t_raw = hvd_bench::median_ms(iters, raw);
    const double t_per = hvd_bench::median_ms(iters, [&] { per_tensor(b); });
    const double t_flat = hvd_bench::median_ms(iters, [&] { contiguous(b); });
    const double t_hidx = hvd_bench::median_ms(iters, [&] { hindexed(b); });
    const double t_fused = hvd_bench::median_ms(iters, [&] { fused(b); });
    if (b.rank == 0) {
      std::printf("%-6d %9.3f %12.3f %6.2fx %12.3f %6.2fx %10.3f %6.2fx %9.3f %6.2fx\n", r, t_raw,
                  t_per, t_per / t_raw, t_flat, t_flat / t_raw, t_hidx, t_hidx / t_raw, t_fused,
                  t_fused / t_raw);
    }
  }
  MPI_Finalize();
  return 0;
}
