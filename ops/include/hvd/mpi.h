// SPDX-License-Identifier: Apache-2.0
// hvd on a communicator other than MPI_COMM_WORLD (Horovod's init(comm=...)). Kept out of
// hvd/hvd.h so that programs which never name an MPI type do not include <mpi.h> through hvd.
//
// clang-format off
//   int provided, world_rank;
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);  // then MPI_Finalize is yours
//   MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
//   MPI_Comm half;                                  // ranks 0, 2, ... and 1, 3, ...: two jobs
//   MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
//   hvd::init(half);                                // rank(), size(), collectives: within `half`
// or, without a communicator (called by MPI_COMM_WORLD ranks 0 and 2 only):
//   hvd::init_on_ranks({0, 2});                     // hvd rank 0 is world rank 0, rank 1 is 2
// clang-format on
#pragma once

#include <mpi.h>

#include <vector>

#include "hvd/hvd.h"

namespace hvd {

/// Starts hvd on the processes of `comm` instead of MPI_COMM_WORLD: rank(), size(),
/// local_rank(), local_size(), cross_rank(), cross_size(), the ranks of process sets and every
/// collective are relative to `comm` (hvd works on duplicates of it: the caller may free
/// `comm` afterwards). Collective over `comm`; processes outside it are not involved, so
/// disjoint communicators run independent jobs in one mpirun. Initialises MPI unless the
/// caller already did (then hvd leaves MPI_Finalize to the caller). Throws hvd::Error
/// (kInvalidArgument) for MPI_COMM_NULL, an intercommunicator, or any communicator other than
/// one congruent with MPI_COMM_WORLD in elastic mode. When hvd already runs: a no-op if it runs
/// on the same processes in the same order, else kPrecondition (call shutdown() first).
void init(MPI_Comm comm);
/// init(comm), then add_process_set() for each list of ranks of `comm`, in order (ids 1, 2, ...).
void init(MPI_Comm comm, const std::vector<std::vector<int>>& process_sets);

/// Starts hvd on the processes of MPI_COMM_WORLD whose ranks `world_ranks` lists (Horovod's
/// init(comm=[ranks])): hvd's rank i is MPI_COMM_WORLD rank world_ranks[i]. Every process of
/// the list calls it with the same list, in the same order (collective over those processes
/// only; a process of another, disjoint list forms another job). Throws hvd::Error
/// (kInvalidArgument) at once on this process when the list is empty, has a rank twice or out
/// of range, or does not hold this process's rank; on every process of the list when they
/// listed the same ranks in different orders. Lists of different ranks are a mistake MPI cannot
/// see: the call may hang. Otherwise as init(MPI_Comm).
void init_on_ranks(const std::vector<int>& world_ranks);
/// init_on_ranks(world_ranks), then add_process_set() for each list (ranks of the new job).
void init_on_ranks(const std::vector<int>& world_ranks,
                   const std::vector<std::vector<int>>& process_sets);

}  // namespace hvd
