// SPDX-License-Identifier: Apache-2.0
// Fusion planning (pure).
#include "hvd/core/fusion.h"

namespace hvd::core {

int64_t response_bytes(const Response& r) {
  int64_t n = 0;
  if (r.op == OpType::kAllgather && !r.names.empty()) {
    // Gathered size: every rank's rows of every tensor.
    const size_t per = r.rank_rows.size() / r.names.size();
    for (size_t i = 0; i < r.names.size() && i < r.numels.size(); ++i) {
      for (size_t j = 0; j < per; ++j) n += r.rank_rows[i * per + j] * r.numels[i];
    }
  } else {
    for (int64_t x : r.numels) n += x;
  }
  return n * static_cast<int64_t>(dtype_size(r.dtype));
}

namespace {

bool fusable(const Response& r, const FusionOptions& opt) {
  const int64_t direct = r.op == OpType::kAllgather ? opt.allgather_direct_bytes : opt.direct_bytes;
  return !r.is_error() && (r.op == OpType::kAllreduce || r.op == OpType::kAllgather) &&
         r.names.size() == 1 && response_bytes(r) < direct &&
         response_bytes(r) <= opt.threshold_bytes;
}

// Only what every rank agrees on may decide fusion: the device index is per rank (a cached
// response carries this rank's index, a coordinator response rank 0's), so only its kind counts.
bool same_key(const Response& a, const Response& b) {
  if (a.op != b.op || a.joined != b.joined) return false;
  if (a.op == OpType::kAllgather) {
    return a.dtype == b.dtype && a.device.kind == b.device.kind && a.process_set == b.process_set;
  }
  return a.dtype == b.dtype && a.device.kind == b.device.kind && a.reduce_op == b.reduce_op &&
         a.prescale == b.prescale && a.postscale == b.postscale && a.process_set == b.process_set;
}

}  // namespace

std::vector<Response> plan_fusion(std::vector<Response> responses, const FusionOptions& opt) {
  std::vector<Response> out;
  out.reserve(responses.size());
  bool open = false;  // out.back() is a fused batch that may still grow
  int64_t open_bytes = 0;
  for (Response& r : responses) {
    if (opt.threshold_bytes <= 0 || !fusable(r, opt)) {
      out.push_back(std::move(r));
      open = false;
      continue;
    }
    int64_t b = response_bytes(r);
    if (open && same_key(out.back(), r) && open_bytes + b <= opt.threshold_bytes) {
      out.back().names.push_back(std::move(r.names[0]));
      out.back().numels.push_back(r.numels[0]);
      out.back().rank_rows.insert(out.back().rank_rows.end(), r.rank_rows.begin(),
                                  r.rank_rows.end());
      open_bytes += b;
    } else {
      out.push_back(std::move(r));
      open = true;
      open_bytes = b;
    }
  }
  return out;
}

}  // namespace hvd::core
