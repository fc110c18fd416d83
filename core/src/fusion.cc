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

// What must agree for two tensors to share a collective. Only what every rank agrees on may
// decide fusion: the device index is per rank (a cached response carries this rank's index, a
// coordinator response rank 0's), so only its kind counts.
struct Key {
  OpType op;
  DataType dtype;
  DeviceKind device;
  ReduceOp reduce_op;
  double prescale, postscale;
  int32_t process_set;
  const std::vector<int64_t>* joined;
};

bool same_key(const Key& a, const Key& b) {
  if (a.op != b.op || (a.joined != b.joined && *a.joined != *b.joined) || a.dtype != b.dtype ||
      a.device != b.device || a.process_set != b.process_set) {
    return false;
  }
  return a.op == OpType::kAllgather ||
         (a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale);
}

// Fusable: allreduce or allgather of one tensor under both size limits.
bool fusable(OpType op, int64_t bytes, bool error, size_t names, const FusionOptions& opt) {
  const int64_t direct = op == OpType::kAllgather ? opt.allgather_direct_bytes : opt.direct_bytes;
  return opt.threshold_bytes > 0 && !error &&
         (op == OpType::kAllreduce || op == OpType::kAllgather) && names == 1 && bytes < direct &&
         bytes <= opt.threshold_bytes;
}

// The one planning loop: `info(i, &key, &bytes)` describes item i and returns whether it may
// fuse; returns the end of each run.
template <typename Info>
std::vector<size_t> runs(size_t n, const FusionOptions& opt, Info info) {
  std::vector<size_t> ends;
  bool open = false;  // the last run may still grow
  Key open_key{};
  int64_t open_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    Key k{};
    int64_t b = 0;
    if (!info(i, &k, &b)) {
      ends.push_back(i + 1);
      open = false;
      continue;
    }
    if (open && same_key(open_key, k) && open_bytes + b <= opt.threshold_bytes) {
      ends.back() = i + 1;
      open_bytes += b;
    } else {
      ends.push_back(i + 1);
      open = true;
      open_key = k;
      open_bytes = b;
    }
  }
  return ends;
}

const std::vector<int64_t> kNobody;

}  // namespace

std::vector<Response> plan_fusion(std::vector<Response> responses, const FusionOptions& opt) {
  auto ends = runs(responses.size(), opt, [&](size_t i, Key* k, int64_t* b) {
    const Response& r = responses[i];
    *k = {r.op,       r.dtype,     r.device.kind, r.reduce_op,
          r.prescale, r.postscale, r.process_set, &r.joined};
    *b = response_bytes(r);
    return fusable(r.op, *b, r.is_error(), r.names.size(), opt);
  });
  std::vector<Response> out;
  out.reserve(ends.size());
  size_t begin = 0;
  for (size_t end : ends) {
    out.push_back(std::move(responses[begin]));
    Response& f = out.back();
    for (size_t i = begin + 1; i < end; ++i) {
      f.names.push_back(std::move(responses[i].names[0]));
      f.numels.push_back(responses[i].numels[0]);
      f.rank_rows.insert(f.rank_rows.end(), responses[i].rank_rows.begin(),
                         responses[i].rank_rows.end());
    }
    begin = end;
  }
  return out;
}

std::vector<size_t> plan_fusion_runs(const std::vector<const Request*>& requests,
                                     const FusionOptions& opt) {
  return runs(requests.size(), opt, [&](size_t i, Key* k, int64_t* b) {
    const Request& r = *requests[i];
    *k = {r.op,       r.dtype,     r.device.kind, r.reduce_op,
          r.prescale, r.postscale, r.process_set, &kNobody};
    *b = shape_numel(r.shape) * static_cast<int64_t>(dtype_size(r.dtype));
    return fusable(r.op, *b, false, 1, opt);
  });
}

}  // namespace hvd::core
