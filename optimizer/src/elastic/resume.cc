// SPDX-License-Identifier: Apache-2.0
// The resume protocol of a new generation (hvd/optim/elastic_store.h): allgather the commit ids,
// plan_restore, broadcast the chosen payload from the lowest rank holding it.
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

std::optional<Snapshot> resume_from_newest(const std::optional<Snapshot>& local) {
  int64_t mine = local ? static_cast<int64_t>(local->commit_id) : -1;
  Handle h = hvd::allgather(TensorView(&mine, DataType::kInt64, {1}), "hvd.elastic.commit_ids");
  const TensorView& all = h.output();
  std::vector<int64_t> ids(static_cast<size_t>(all.numel()));
  std::memcpy(ids.data(), all.data, ids.size() * sizeof(int64_t));
  const RestorePlan plan = plan_restore(ids);
  if (plan.root < 0) return std::nullopt;
  uint64_t world = hvd::rank() == plan.root ? local->world_size : 0;
  hvd::broadcast(TensorView(&world, DataType::kInt64, {1}), plan.root, "hvd.elastic.world_size");
  const std::string payload = broadcast_string(hvd::rank() == plan.root ? local->payload : "",
                                               plan.root, "hvd.elastic.snapshot");
  return Snapshot{static_cast<uint64_t>(plan.commit_id), world, payload};
}

}  // namespace hvd::elastic
