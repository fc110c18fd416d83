// SPDX-License-Identifier: Apache-2.0
// The C++ API from an installed hvd: every rank contributes (rank + 1) * (i + 1) and checks the
// sum against the closed form, then allgathers its rank, then starts hvd again on a
// communicator (hvd/mpi.h). Prints "OK rank R of N" on success.
#include <cstdio>
#include <vector>

#include "hvd/hvd.h"
#include "hvd/mpi.h"

int main() {
  hvd::init();
  const int rank = hvd::rank();
  const int size = hvd::size();
  std::vector<double> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (rank + 1.0) * static_cast<double>(i + 1);
  hvd::allreduce(hvd::TensorView(v.data(), hvd::DataType::kFloat64, {1000}), "v",
                 hvd::ReduceOp::kSum);
  const double ranks_sum = size * (size + 1) / 2.0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != ranks_sum * static_cast<double>(i + 1)) {
      std::fprintf(stderr, "rank %d: v[%zu] = %g, expected %g\n", rank, i, v[i],
                   ranks_sum * static_cast<double>(i + 1));
      return 1;
    }
  }
  int32_t mine = rank;
  hvd::Handle h = hvd::allgather(hvd::TensorView(&mine, hvd::DataType::kInt32, {1}), "r");
  const auto* all = static_cast<const int32_t*>(h.output().data);
  for (int r = 0; r < size; ++r) {
    if (all[r] != r) {
      std::fprintf(stderr, "rank %d: allgather[%d] = %d\n", rank, r, all[r]);
      return 1;
    }
  }
  const int local_rank = hvd::local_rank(), local_size = hvd::local_size();
  hvd::shutdown();
  hvd::init(MPI_COMM_WORLD);
  if (hvd::rank() != rank || hvd::size() != size) {
    std::fprintf(stderr, "rank %d: on MPI_COMM_WORLD hvd says rank %d of %d\n", rank, hvd::rank(),
                 hvd::size());
    return 1;
  }
  hvd::shutdown();
  std::printf("OK rank %d of %d (local %d of %d)\n", rank, size, local_rank, local_size);
  return 0;
}
