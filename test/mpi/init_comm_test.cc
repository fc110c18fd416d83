// SPDX-License-Identifier: Apache-2.0
// hvd::init(MPI_Comm) and hvd::init_on_ranks(): the even and the odd MPI_COMM_WORLD ranks run
// two independent jobs in one mpirun, each with its own ranks, sizes, collectives and process
// sets. Each case leaves hvd running on MPI_COMM_WORLD again for the cases after it.
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "hvd/mpi.h"
#include "hvd_catch.h"
#include "mpi_test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using hvd::TensorView;
using hvd::test::Contains;
using hvd_test::error_of;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// This process's job: the MPI_COMM_WORLD ranks of its parity, in order.
std::vector<int> my_job() {
  std::vector<int> v;
  for (int r = world_rank() % 2; r < world_size(); r += 2) v.push_back(r);
  return v;
}

// Shuts hvd down when a case starts and starts it on MPI_COMM_WORLD when the case ends, passed
// or failed.
struct OffWorldForTheCase {
  OffWorldForTheCase() { hvd::shutdown(); }
  ~OffWorldForTheCase() {
    hvd::shutdown();
    hvd::init();
  }
};

int64_t sum_of(const std::vector<int>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// What hvd running on the job `members` (MPI_COMM_WORLD ranks, in the order of hvd's ranks)
// must compute on this process; every value comes from `members`, not from hvd.
void check_job(const std::vector<int>& members, const std::string& tag) {
  const int wr = world_rank();
  const int n = static_cast<int>(members.size());
  const int me = static_cast<int>(std::find(members.begin(), members.end(), wr) - members.begin());
  REQUIRE(me < n);
  REQUIRE(hvd::size() == n);
  REQUIRE(hvd::rank() == me);
  // One host: every process of the job is on it.
  REQUIRE(hvd::local_size() == n);
  REQUIRE(hvd::local_rank() == me);
  REQUIRE(hvd::cross_size() == 1);
  REQUIRE(hvd::cross_rank() == 0);

  std::vector<int64_t> v(5, wr);
  hvd::allreduce(TensorView(v.data(), DataType::kInt64, {5}), tag + ".sum", ReduceOp::kSum);
  for (int64_t x : v) REQUIRE(x == sum_of(members));

  // The root is a rank of the job: its last one.
  int64_t b = wr;
  hvd::broadcast(TensorView(&b, DataType::kInt64, {1}), n - 1, tag + ".bcast");
  REQUIRE(b == members.back());

  int32_t mine = wr;
  hvd::Handle h = hvd::allgather(TensorView(&mine, DataType::kInt32, {1}), tag + ".gather");
  REQUIRE(h.output().shape == std::vector<int64_t>{n});
  const auto* all = static_cast<const int32_t*>(h.output().data);
  for (int i = 0; i < n; ++i) REQUIRE(all[i] == members[static_cast<size_t>(i)]);

  // A process set of the job's ranks, last first: set rank 0 is the job's last rank.
  std::vector<int> set_ranks = {n - 1};
  if (n > 1) set_ranks.push_back(0);
  hvd::ProcessSet ps = hvd::add_process_set(set_ranks);
  REQUIRE(ps.ranks() == set_ranks);
  const bool member = me == n - 1 || me == 0;
  REQUIRE(ps.included() == member);
  if (member) {
    REQUIRE(ps.rank() == (me == n - 1 ? 0 : 1));
    int64_t s = wr;
    hvd::allreduce(TensorView(&s, DataType::kInt64, {1}), tag + ".set.sum", ReduceOp::kSum, 1.0,
                   1.0, ps);
    REQUIRE(s == members.back() + (n > 1 ? members.front() : 0));
    int64_t r = wr;
    // Roots are ranks of hvd's job (global, as in Horovod), not of the set.
    hvd::broadcast(TensorView(&r, DataType::kInt64, {1}), n - 1, tag + ".set.bcast", ps);
    REQUIRE(r == members.back());
  }
  hvd::remove_process_set(ps);
}

}  // namespace

TEST_CASE("init on a communicator: the even and the odd ranks run two independent jobs",
          "[mpi][multirank]") {
  REQUIRE(world_size() >= 2);  // [multirank]: np = 1 runs exclude it
  OffWorldForTheCase guard;
  MPI_Comm half = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half) == MPI_SUCCESS);
  hvd::init(half);
  // hvd works on duplicates: the caller's communicator may go.
  MPI_Comm_free(&half);
  check_job(my_job(), "split");
  // The same job again is a no-op; another job is refused while this one runs.
  hvd::init_on_ranks(my_job());
  const std::string other = error_of([] { hvd::init(MPI_COMM_WORLD); });
  CHECK_THAT(other, Contains("hvd already runs, on another job"));
  CHECK_THAT(other, Contains("call hvd::shutdown() first"));
  REQUIRE(hvd::size() == static_cast<int>(my_job().size()));
}

TEST_CASE("init on a list of MPI_COMM_WORLD ranks: hvd rank i is the list's i-th",
          "[mpi][multirank]") {
  REQUIRE(world_size() >= 2);
  OffWorldForTheCase guard;
  // Last first: hvd's rank 0 is the job's highest MPI_COMM_WORLD rank.
  std::vector<int> job = my_job();
  std::reverse(job.begin(), job.end());
  hvd::init_on_ranks(job);
  check_job(job, "list");
  // Shut down, then another job on the same processes: MPI_COMM_WORLD.
  hvd::shutdown();
  hvd::init(MPI_COMM_WORLD);
  std::vector<int> world(static_cast<size_t>(world_size()));
  std::iota(world.begin(), world.end(), 0);
  check_job(world, "world");
}

TEST_CASE("init refuses a bad communicator or list on the calling process", "[mpi][multirank]") {
  REQUIRE(world_size() >= 2);
  OffWorldForTheCase guard;
  const int n = world_size(), wr = world_rank();
  auto refusal = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const hvd::Error& e) {
      CHECK(e.code() == hvd::StatusCode::kInvalidArgument);
      CHECK_FALSE(hvd::is_initialized());
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(refusal([] { hvd::init(MPI_COMM_NULL); }), Contains("MPI_COMM_NULL"));
  CHECK_THAT(refusal([] { hvd::init_on_ranks({}); }), Contains("the list is empty"));
  CHECK_THAT(refusal([&] {
               hvd::init_on_ranks({wr, wr});
             }),
             Contains("rank " + std::to_string(wr) + " is listed twice"));
  CHECK_THAT(refusal([&] {
               hvd::init_on_ranks({wr, n});
             }),
             Contains("rank " + std::to_string(n) + " is out of range: MPI_COMM_WORLD has " +
                      std::to_string(n) + " ranks"));
  CHECK_THAT(refusal([&] { hvd::init_on_ranks({(wr + 1) % n}); }),
             Contains("this process (rank " + std::to_string(wr) +
                      " of MPI_COMM_WORLD) is not in the list"));

  // The same ranks in another order on one process of each job (np >= 4): every process of
  // the job fails, none hangs.
  if (n >= 4) {
    std::vector<int> job = my_job();
    if (wr == job.back()) std::reverse(job.begin(), job.end());
    CHECK_THAT(refusal([&] { hvd::init_on_ranks(job); }),
               Contains("another process of the job passed a different list"));
  }

  // An intercommunicator between the two halves (leaders: MPI_COMM_WORLD ranks 0 and 1).
  MPI_Comm half = MPI_COMM_NULL, inter = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &half) == MPI_SUCCESS);
  REQUIRE(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - wr % 2, 77, &inter) == MPI_SUCCESS);
  CHECK_THAT(refusal([&] { hvd::init(inter); }), Contains("intercommunicator"));

  // Elastic mode keeps hvd on MPI_COMM_WORLD.
  setenv("HVD_ELASTIC_STATE_DIR", "/nonexistent/hvd-init-comm-test", 1);
  CHECK_THAT(refusal([&] { hvd::init(half); }), Contains("elastic mode"));
  unsetenv("HVD_ELASTIC_STATE_DIR");
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
}
