// SPDX-License-Identifier: Apache-2.0
// Process sets in the free-function API, and the MPI factory that builds a set's backend.
#include <algorithm>

#include "api_internal.h"
#include "hvd/mpi.h"
#include "hvd/ops/device.h"
#include "hvd/ops/mpi_executor.h"
#include "hvd/ops/mpi_transport.h"
#include "hvd/ops/mpi_util.h"

namespace hvd {
namespace detail {
namespace {

// A set's communicators, freed with its runtime (unless MPI is already finalised).
struct SetComms {
  MPI_Comm negotiation = MPI_COMM_NULL, data = MPI_COMM_NULL;
  ~SetComms() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (negotiation != MPI_COMM_NULL) MPI_Comm_free(&negotiation);
    if (data != MPI_COMM_NULL) MPI_Comm_free(&data);
  }
};

}  // namespace

Status make_process_set_parts(MPI_Comm parent, int rank, int local_rank, bool threads_multiple,
                              const std::function<Status()>& should_abort, const core::Config& cfg,
                              int32_t id, const std::vector<int32_t>& ranks,
                              core::RuntimeParts* out) {
  if (!threads_multiple) {
    // Every rank reaches the same verdict: the thread level is the same job-wide.
    return precondition(
        "process sets need MPI_THREAD_MULTIPLE (one background thread per "
        "set), but MPI provides a lower thread level");
  }
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  const int color = it == ranks.end() ? MPI_UNDEFINED : 0;
  const int key = static_cast<int>(it - ranks.begin());
  auto comms = std::make_shared<SetComms>();
  HVD_MPI_CHECK(MPI_Comm_split(parent, color, key, &comms->negotiation));
  HVD_MPI_CHECK(MPI_Comm_split(parent, color, key, &comms->data));
  if (color == MPI_UNDEFINED) return Status::OK();  // not a member: no runtime here
  MPI_Comm_set_errhandler(comms->negotiation, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(comms->data, MPI_ERRORS_RETURN);
  out->process_set = id;
  out->transport = std::make_unique<ops::MpiTransport>(comms->negotiation, should_abort);
  out->host_executor =
      std::make_unique<ops::MpiExecutor>(comms->data, ops::MpiExecutor::kBufferQuiet, should_abort);
  ops::add_device_executor(out, comms->data, cfg, local_rank, should_abort);
  out->resources = comms;
  return Status::OK();
}

}  // namespace detail

std::vector<int> ProcessSet::ranks() const {
  auto r = detail::runtime("ProcessSet::ranks")->process_set_ranks(id_);
  return std::vector<int>(r.begin(), r.end());
}

bool ProcessSet::included() const { return rank() >= 0; }

int ProcessSet::rank() const {
  auto r = ranks();
  auto it = std::find(r.begin(), r.end(), hvd::rank());
  return it == r.end() ? -1 : static_cast<int>(it - r.begin());
}

int ProcessSet::size() const { return static_cast<int>(ranks().size()); }

void init(const std::vector<std::vector<int>>& process_sets) {
  init();
  for (const auto& ranks : process_sets) add_process_set(ranks);
}

void init(MPI_Comm comm, const std::vector<std::vector<int>>& process_sets) {
  init(comm);
  for (const auto& ranks : process_sets) add_process_set(ranks);
}

void init_on_ranks(const std::vector<int>& world_ranks,
                   const std::vector<std::vector<int>>& process_sets) {
  init_on_ranks(world_ranks);
  for (const auto& ranks : process_sets) add_process_set(ranks);
}

ProcessSet add_process_set(const std::vector<int>& ranks) {
  auto rt = detail::runtime("add_process_set");
  Handle h = rt->add_process_set(std::vector<int32_t>(ranks.begin(), ranks.end()));
  h.wait();
  return ProcessSet(static_cast<int32_t>(h.state()->result));
}

namespace detail {
void refuse_add_process_set(const std::vector<int>& ranks, const std::string& reason) {
  auto rt = runtime("add_process_set");
  rt->add_process_set(std::vector<int32_t>(ranks.begin(), ranks.end()), reason).wait();
  throw Error(invalid_argument("add_process_set: " + reason));  // not reached: wait() throws
}
}  // namespace detail

void remove_process_set(const ProcessSet& ps) {
  auto rt = detail::runtime("remove_process_set");
  rt->remove_process_set(ps.id()).wait();
}

std::vector<ProcessSet> process_sets() {
  std::vector<ProcessSet> out;
  for (int32_t id : detail::runtime("process_sets")->process_set_ids()) out.emplace_back(id);
  return out;
}

}  // namespace hvd
