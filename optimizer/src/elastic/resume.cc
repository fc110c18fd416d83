// SPDX-License-Identifier: Apache-2.0
// The resume protocol of a new generation (hvd/optim/elastic_store.h): allgather the commit ids
// (or "refused"), fail together when any rank refused its host's snapshot, otherwise
// plan_restore and broadcast the chosen payload from the lowest rank holding it.
#include <unistd.h>

#include <cstring>

#include "hvd/hvd.h"
#include "hvd/optim/elastic_store.h"

namespace hvd::elastic {

std::string broadcast_string(const std::string& bytes, int root_rank, const std::string& name) {
  const bool root = hvd::rank() == root_rank;
  int64_t n = root ? static_cast<int64_t>(bytes.size()) : 0;
  hvd::broadcast(TensorView(&n, DataType::kInt64, {1}), root_rank, name + ".size");
  std::string out = root ? bytes : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) hvd::broadcast(TensorView(out.data(), DataType::kUInt8, {n}), root_rank, name);
  return out;
}

namespace {

constexpr int64_t kRefused = -2;  // this rank's host holds a snapshot it cannot trust

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace

std::optional<Snapshot> resume_from_newest(const Result<std::optional<Snapshot>>& local) {
  const std::optional<Snapshot>* mine_snapshot = local.ok() ? &local.value() : nullptr;
  int64_t mine = !local.ok()                  ? kRefused
                 : mine_snapshot->has_value() ? static_cast<int64_t>((*mine_snapshot)->commit_id)
                                              : -1;
  Handle h = hvd::allgather(TensorView(&mine, DataType::kInt64, {1}), "hvd.elastic.commit_ids");
  const TensorView& all = h.output();
  std::vector<int64_t> ids(static_cast<size_t>(all.numel()));
  std::memcpy(ids.data(), all.data, ids.size() * sizeof(int64_t));
  // Every rank sees the same ids, so every rank takes the same branch: nobody waits for a
  // broadcast that never comes.
  std::string refused;
  for (size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] == kRefused) refused += (refused.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!local.ok()) {
    throw Error(elastic_state_error("rank " + std::to_string(hvd::rank()) + " (host " +
                                    host_name() + "): " + local.status().message()));
  }
  if (!refused.empty()) {
    throw Error(elastic_state_error(
        "hvd.elastic: rank(s) " + refused +
        " refused their host's elastic state (their own error names the file or directory and "
        "why); no rank resumes, and a restart cannot fix it"));
  }
  const RestorePlan plan = plan_restore(ids);
  if (plan.root < 0) return std::nullopt;
  const bool root = hvd::rank() == plan.root;
  uint64_t world = root ? (*mine_snapshot)->world_size : 0;
  hvd::broadcast(TensorView(&world, DataType::kInt64, {1}), plan.root, "hvd.elastic.world_size");
  const std::string payload =
      broadcast_string(root ? (*mine_snapshot)->payload : "", plan.root, "hvd.elastic.snapshot");
  return Snapshot{static_cast<uint64_t>(plan.commit_id), world, payload};
}

}  // namespace hvd::elastic
