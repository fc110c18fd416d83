// SPDX-License-Identifier: Apache-2.0
// Which processes form hvd's job: MPI_COMM_WORLD (init()), a communicator of the caller's
// (init(MPI_Comm)) or the processes of MPI_COMM_WORLD with the listed ranks (init_on_ranks()).
#pragma once

#include <mpi.h>

#include <vector>

#include "hvd/core/status.h"

namespace hvd::detail {

/// What the user asked init() to run on.
struct JobSpec {
  enum class Kind { kWorld, kComm, kRanks };
  Kind kind = Kind::kWorld;
  MPI_Comm comm = MPI_COMM_NULL;  ///< kComm: the caller's communicator
  std::vector<int> ranks;         ///< kRanks: MPI_COMM_WORLD ranks, in the order of hvd's ranks

  /// How errors name the call: "hvd::init()", "hvd::init(comm)" or "hvd::init_on_ranks()"
  /// (the functions below leave that to their caller).
  const char* call() const;
};

/// Checks init_on_ranks()'s list against MPI_COMM_WORLD (`world_size` ranks, this process
/// `world_rank`): not empty, every rank in range and listed once, this process among them.
Status check_world_ranks(const std::vector<int>& ranks, int world_size, int world_rank);

/// The MPI_COMM_WORLD ranks of the job `spec` names, in the order of hvd's ranks (local: no
/// communication). MPI is initialised. Refuses MPI_COMM_NULL, an intercommunicator and a bad
/// list (check_world_ranks).
Result<std::vector<int>> job_world_ranks(const JobSpec& spec);

/// A new communicator of the job `spec` names (the caller frees it). Collective over the job's
/// processes only. MPI is initialised. Refuses what job_world_ranks() refuses, and in elastic
/// mode (`elastic`) every job but the whole of MPI_COMM_WORLD in its order; for a list, the
/// same ranks listed in different orders fail on every process of the list.
Result<MPI_Comm> make_job_comm(const JobSpec& spec, bool elastic);

}  // namespace hvd::detail
