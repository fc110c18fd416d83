// SPDX-License-Identifier: Apache-2.0
// hvd's job communicator (see api_job.h). A list of ranks becomes a communicator through
// MPI_Comm_create_group, which only the listed processes call: each disjoint list is a job of
// its own. The group is made in rank order and a hash of the list compared over it, so that
// processes that listed the same ranks in different orders all fail, then split into the
// list's order.
#include "api_job.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "hvd/ops/mpi_util.h"

namespace hvd::detail {
namespace {

// Distinguishes hvd's MPI_Comm_create_group from the caller's own on MPI_COMM_WORLD.
constexpr int kCreateGroupTag = 0x6876;

std::string list_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// FNV-1a over the ranks, in order.
uint64_t list_hash(const std::vector<int>& v) {
  uint64_t h = 1469598103934665603ull;
  for (int r : v) {
    h ^= static_cast<uint32_t>(r);
    h *= 1099511628211ull;
  }
  return h;
}

Status check_comm(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) {
    return invalid_argument(
        "the communicator is MPI_COMM_NULL (this process belongs to no communicator there); "
        "pass one this process is a member of, or call init() for MPI_COMM_WORLD");
  }
  int inter = 0;
  HVD_MPI_CHECK(MPI_Comm_test_inter(comm, &inter));
  if (inter) {
    return invalid_argument(
        "the communicator is an intercommunicator; pass an intracommunicator "
        "(MPI_Intercomm_merge makes one)");
  }
  return Status::OK();
}

Result<std::vector<int>> world_ranks_of(MPI_Comm comm) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int n = 0;
  HVD_MPI_CHECK(MPI_Comm_size(comm, &n));
  std::vector<int> mine(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = i;
  HVD_MPI_CHECK(MPI_Comm_group(comm, &group));
  HVD_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  const int rc = MPI_Group_translate_ranks(group, n, mine.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  HVD_MPI_CHECK(rc);
  if (std::find(out.begin(), out.end(), MPI_UNDEFINED) != out.end()) {
    return invalid_argument(
        "the communicator has processes outside MPI_COMM_WORLD (spawned or connected "
        "later); hvd runs on processes of MPI_COMM_WORLD only");
  }
  return out;
}

}  // namespace

const char* JobSpec::call() const {
  switch (kind) {
    case Kind::kWorld:
      return "hvd::init()";
    case Kind::kComm:
      return "hvd::init(comm)";
    case Kind::kRanks:
      return "hvd::init_on_ranks()";
  }
  return "hvd::init()";
}

Status check_world_ranks(const std::vector<int>& ranks, int world_size, int world_rank) {
  const std::string head = "ranks " + list_str(ranks) + ": ";
  if (ranks.empty()) {
    return invalid_argument(head +
                            "the list is empty; list the MPI_COMM_WORLD ranks of the job "
                            "(or call init() for all of them)");
  }
  std::vector<bool> seen(static_cast<size_t>(world_size));
  for (int r : ranks) {
    if (r < 0 || r >= world_size) {
      return invalid_argument(head + "rank " + std::to_string(r) +
                              " is out of range: MPI_COMM_WORLD has " + std::to_string(world_size) +
                              " ranks (0-" + std::to_string(world_size - 1) + ")");
    }
    if (seen[static_cast<size_t>(r)]) {
      return invalid_argument(head + "rank " + std::to_string(r) +
                              " is listed twice; list each rank once");
    }
    seen[static_cast<size_t>(r)] = true;
  }
  if (!seen[static_cast<size_t>(world_rank)]) {
    return invalid_argument(head + "this process (rank " + std::to_string(world_rank) +
                            " of MPI_COMM_WORLD) is not in the list; each process passes the "
                            "ranks of its own job, itself included");
  }
  return Status::OK();
}

Result<std::vector<int>> job_world_ranks(const JobSpec& spec) {
  int world_size = 0, world_rank = 0;
  HVD_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  HVD_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  switch (spec.kind) {
    case JobSpec::Kind::kWorld: {
      std::vector<int> all(static_cast<size_t>(world_size));
      for (int i = 0; i < world_size; ++i) all[static_cast<size_t>(i)] = i;
      return all;
    }
    case JobSpec::Kind::kComm: {
      HVD_RETURN_IF_ERROR(check_comm(spec.comm));
      return world_ranks_of(spec.comm);
    }
    case JobSpec::Kind::kRanks:
      HVD_RETURN_IF_ERROR(check_world_ranks(spec.ranks, world_size, world_rank));
      return spec.ranks;
  }
  return internal_error("unknown job kind");
}

Result<MPI_Comm> make_job_comm(const JobSpec& spec, bool elastic) {
  auto members = job_world_ranks(spec);
  if (!members.ok()) return members.status();
  if (elastic && spec.kind != JobSpec::Kind::kWorld) {
    int world_size = 0;
    HVD_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
    const std::vector<int>& m = members.value();
    bool whole = static_cast<int>(m.size()) == world_size;
    for (size_t i = 0; whole && i < m.size(); ++i) whole = m[i] == static_cast<int>(i);
    if (!whole) {
      return invalid_argument(
          "elastic mode (hvdrun --min-np) runs hvd on every process of the job, "
          "MPI_COMM_WORLD; a communicator or list of ranks of part of it is not supported "
          "there: call init() without one");
    }
  }
  MPI_Comm job = MPI_COMM_NULL;
  if (spec.kind == JobSpec::Kind::kComm) {
    HVD_MPI_CHECK(MPI_Comm_dup(spec.comm, &job));
    return job;
  }
  if (spec.kind == JobSpec::Kind::kWorld) {
    HVD_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &job));
    return job;
  }
  // The group in rank order, whatever the order of the list: processes that listed the same
  // ranks in different orders all get here (MPI_Comm_create_group with groups in different
  // orders hangs) and fail at the check below.
  std::vector<int> sorted = spec.ranks;
  std::sort(sorted.begin(), sorted.end());
  MPI_Group world = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  HVD_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int rc = MPI_Group_incl(world, static_cast<int>(sorted.size()), sorted.data(), &group);
  MPI_Group_free(&world);
  HVD_MPI_CHECK(rc);
  MPI_Comm sorted_comm = MPI_COMM_NULL;
  rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, kCreateGroupTag, &sorted_comm);
  MPI_Group_free(&group);
  HVD_MPI_CHECK(rc);
  MPI_Comm_set_errhandler(sorted_comm, MPI_ERRORS_RETURN);
  const uint64_t h = list_hash(spec.ranks);
  uint64_t mine[2] = {h, ~h}, least[2] = {0, 0};
  rc = MPI_Allreduce(mine, least, 2, MPI_UINT64_T, MPI_MIN, sorted_comm);
  if (rc == MPI_SUCCESS && (least[0] != mine[0] || least[1] != mine[1])) {
    MPI_Comm_free(&sorted_comm);
    return invalid_argument("this process passed " + list_str(spec.ranks) +
                            " but another process of the job passed a different list (the same "
                            "ranks in another order); pass the same list on every process of the "
                            "job");
  }
  if (rc == MPI_SUCCESS) {
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    const auto at = std::find(spec.ranks.begin(), spec.ranks.end(), world_rank);
    rc = MPI_Comm_split(sorted_comm, 0, static_cast<int>(at - spec.ranks.begin()), &job);
  }
  MPI_Comm_free(&sorted_comm);
  HVD_MPI_CHECK(rc);
  return job;
}

}  // namespace hvd::detail
