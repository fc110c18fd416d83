// SPDX-License-Identifier: Apache-2.0
// Validation of requests across ranks, with messages naming tensor, ranks and values.
#include "hvd/core/validation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

namespace hvd::core {

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(ranks[i]);
    if (j > i) s += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

namespace {

std::string ranks_word(const std::vector<int>& r) {
  return (r.size() == 1 ? "rank " : "ranks ") + rank_ranges(r);
}

// The shortest form that reads back as `d` exactly, so that two factors that differ in any
// bit print (and compare) differently: 1 and 1.000000001, never both "1".
std::string fmt_double(double d) {
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

// Equal bits: then the printed forms are equal too (the converse may not hold: NaNs).
bool same_bits(double a, double b) {
  static_assert(sizeof(double) == sizeof(uint64_t), "64-bit double");
  uint64_t x = 0;
  uint64_t y = 0;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y;
}

// Groups ranks by the string form of one field; returns an error message or "".
std::string compare_field(const std::vector<Request>& reqs, const char* what,
                          std::string (*value)(const Request&)) {
  std::map<std::string, std::vector<int>> by_value;
  std::vector<std::string> order;
  for (const auto& r : reqs) {
    std::string v = value(r);
    if (!by_value.count(v)) order.push_back(v);
    by_value[v].push_back(r.rank);
  }
  if (by_value.size() <= 1) return "";
  const Request& first = reqs.front();
  std::string msg = describe(first.op, first.name) + ": " + what + " ";
  for (size_t i = 0; i < order.size(); ++i) {
    if (i) msg += i + 1 == order.size() ? " but " : ", ";
    msg += order[i] + " on " + ranks_word(by_value[order[i]]);
  }
  return msg;
}

Status validate_splits(const Request& r, int set_size, const std::string& who) {
  const int64_t rows = r.shape[0];
  if (r.splits.empty()) {
    if (rows % set_size != 0) {
      return invalid_argument(who + ": first dimension " + std::to_string(rows) +
                              " cannot be split evenly over " + std::to_string(set_size) +
                              " ranks; pass splits (rows for each rank)");
    }
    return Status::OK();
  }
  if (static_cast<int64_t>(r.splits.size()) != set_size) {
    return invalid_argument(who + ": " + std::to_string(r.splits.size()) + " splits " +
                            shape_str(r.splits) + " given but the process set has " +
                            std::to_string(set_size) + " ranks (one split per rank)");
  }
  int64_t sum = 0;
  for (int64_t x : r.splits) {
    if (x < 0) return invalid_argument(who + ": negative split in " + shape_str(r.splits));
    sum += x;
  }
  if (sum != rows) {
    return invalid_argument(who + ": splits " + shape_str(r.splits) + " sum to " +
                            std::to_string(sum) + " but the first dimension is " +
                            std::to_string(rows));
  }
  return Status::OK();
}

std::vector<int64_t> trailing(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

// allgather/alltoall: every dimension but the first must agree. "" when they do.
std::string compare_trailing(const std::vector<Request>& reqs) {
  std::map<std::vector<int64_t>, std::vector<size_t>> by_dims;
  std::vector<std::vector<int64_t>> order;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto t = trailing(reqs[i].shape);
    if (!by_dims.count(t)) order.push_back(t);
    by_dims[t].push_back(i);
  }
  if (order.size() <= 1) return "";
  const Request& f = reqs.front();
  std::string msg =
      describe(f.op, f.name) + ": dimensions after the first must match on every rank, but ";
  for (size_t g = 0; g < order.size(); ++g) {
    if (g) msg += g + 1 == order.size() ? " and " : ", ";
    std::vector<int> ranks;
    std::string shapes;
    for (size_t i : by_dims[order[g]]) {
      ranks.push_back(reqs[i].rank);
      shapes += (shapes.empty() ? "" : ", ") + shape_str(reqs[i].shape);
    }
    msg += ranks_word(ranks) + (ranks.size() == 1 ? " has shape " : " have shapes ") + shapes;
  }
  return msg;
}

// add_process_set: the list every rank agreed on must name distinct ranks in range.
std::string check_rank_list(const std::vector<int64_t>& ranks, int world) {
  const std::string who = "add_process_set(" + shape_str(ranks) + ")";
  if (ranks.empty()) return who + ": a process set needs at least one rank";
  std::vector<int64_t> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= world) {
      return who + ": rank " + std::to_string(sorted[i]) + " is out of range (hvd has " +
             std::to_string(world) + " ranks: 0-" + std::to_string(world - 1) + ")";
    }
    if (i && sorted[i] == sorted[i - 1]) {
      return who + ": rank " + std::to_string(sorted[i]) + " is listed more than once";
    }
  }
  return "";
}

bool joinable(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kAllgather || op == OpType::kBroadcast ||
         op == OpType::kBarrier;
}

}  // namespace

Status check_user_name(const std::string& what, const std::string& name) {
  if (name.empty() || name[0] != kReservedNamePrefix) return Status::OK();
  return invalid_argument(what + " '" + name + "': names starting with '" + kReservedNamePrefix +
                          "' are reserved for hvd's own collectives; choose another name");
}

std::string group_size_error(OpType op, const std::string& group,
                             const std::vector<int32_t>& sizes) {
  std::map<int32_t, std::vector<int>> by_size;
  std::vector<int32_t> order;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= 0) continue;
    if (!by_size.count(sizes[i])) order.push_back(sizes[i]);
    by_size[sizes[i]].push_back(static_cast<int>(i));
  }
  if (order.size() <= 1) return "";
  std::string msg = std::string("grouped ") + op_name(op) + " '" + group + "': ";
  for (size_t i = 0; i < order.size(); ++i) {
    if (i) msg += i + 1 == order.size() ? " but " : ", ";
    msg += std::to_string(order[i]);
    if (i == 0) msg += order[i] == 1 ? " tensor" : " tensors";
    msg += " on " + ranks_word(by_size[order[i]]);
  }
  return msg;
}

constexpr int kMaxReduceOp = static_cast<int>(ReduceOp::kAdasum);

Status validate_local(const Request& r, int set_size) {
  // Cheap checks first: this runs for every submitted tensor, so the message is built only
  // when something is wrong.
  const bool reduce = r.op == OpType::kAllreduce || r.op == OpType::kReducescatter;
  bool suspicious = (r.op == OpType::kBroadcast && (r.root < 0 || r.root >= set_size)) ||
                    (reduce && (r.dtype == DataType::kBool || !std::isfinite(r.prescale) ||
                                static_cast<unsigned>(r.reduce_op) > kMaxReduceOp ||
                                r.reduce_op == ReduceOp::kAdasum || !std::isfinite(r.postscale) ||
                                (r.op == OpType::kReducescatter && r.reduce_op != ReduceOp::kSum &&
                                 r.reduce_op != ReduceOp::kAverage))) ||
                    r.op == OpType::kAlltoall || r.op == OpType::kAllgather ||
                    r.op == OpType::kReducescatter;
  for (int64_t d : r.shape) suspicious = suspicious || d < 0;
  if (!suspicious) return Status::OK();
  const std::string who = describe(r.op, r.name);
  if (r.op == OpType::kBroadcast && (r.root < 0 || r.root >= set_size)) {
    return invalid_argument(who + ": root rank " + std::to_string(r.root) +
                            " is out of range (process set has " + std::to_string(set_size) +
                            " ranks: 0-" + std::to_string(set_size - 1) + ")");
  }
  if (r.op == OpType::kAllreduce || r.op == OpType::kReducescatter) {
    if (static_cast<int>(r.reduce_op) > kMaxReduceOp) {
      return invalid_argument(who + ": reduce op " + std::to_string(static_cast<int>(r.reduce_op)) +
                              " is not one of Sum, Average, Min, Max, Product, Adasum (0-5)");
    }
    if (r.reduce_op == ReduceOp::kAdasum && !dtype_is_floating(r.dtype)) {
      return invalid_argument(who + ": Adasum reduces float16, bfloat16, float32 and float64 " +
                              "tensors, not " + dtype_name(r.dtype) + " (use Sum or Average)");
    }
    // Every rank of the set knows its size: all refuse together.
    if (r.op == OpType::kAllreduce && r.reduce_op == ReduceOp::kAdasum &&
        (set_size & (set_size - 1)) != 0) {
      return invalid_argument(who + ": Adasum needs a power-of-two number of ranks, but the " +
                              "process set has " + std::to_string(set_size) +
                              " (run on 1, 2, 4, 8, ... ranks or use a process set of that size)");
    }
    if (r.dtype == DataType::kBool) {
      return invalid_argument(who + ": dtype bool cannot be reduced (use uint8)");
    }
    if (!std::isfinite(r.prescale) || !std::isfinite(r.postscale)) {
      return invalid_argument(who + ": scale factors must be finite (prescale " +
                              fmt_double(r.prescale) + ", postscale " + fmt_double(r.postscale) +
                              ")");
    }
  }
  for (int64_t d : r.shape) {
    if (d < 0) return invalid_argument(who + ": negative dimension in shape " + shape_str(r.shape));
  }
  const bool rows_op =
      r.op == OpType::kAllgather || r.op == OpType::kAlltoall || r.op == OpType::kReducescatter;
  if (rows_op && r.shape.empty()) {
    return invalid_argument(who + ": needs a tensor with at least one dimension (got a scalar)");
  }
  if (r.op == OpType::kReducescatter && r.reduce_op != ReduceOp::kSum &&
      r.reduce_op != ReduceOp::kAverage) {
    return invalid_argument(who + ": reduce op " + reduce_op_name(r.reduce_op) +
                            " is not supported (use Sum or Average)");
  }
  if (r.op == OpType::kAlltoall) return validate_splits(r, set_size, who);
  return Status::OK();
}

Response build_response(const std::vector<Request>& per_rank) {
  return build_response(per_rank, static_cast<int>(per_rank.size()), {});
}

Response build_response(const std::vector<Request>& per_rank, int set_size,
                        const std::vector<int>& joined) {
  const Request& f = per_rank.front();
  Response resp = response_of(f);  // the parameters every rank agreed on, checked below

  // The fields every rank must agree on. `same` is exact (bitwise for the factors), so a
  // round where all ranks agree never builds a string; only a difference is described.
  struct Check {
    const char* what;
    bool (*same)(const Request&, const Request&);
    std::string (*text)(const Request&);
  };
  std::array<Check, 10> checks{};
  size_t n_checks = 0;
  auto add = [&](Check c) { checks.at(n_checks++) = c; };  // more than 10: throws, never overruns
  add({"operation", [](const Request& a, const Request& b) { return a.op == b.op; },
       [](const Request& r) { return std::string(op_name(r.op)); }});
  add({"dtype", [](const Request& a, const Request& b) { return a.dtype == b.dtype; },
       [](const Request& r) { return std::string(dtype_name(r.dtype)); }});
  add({"device kind",
       [](const Request& a, const Request& b) { return a.device.kind == b.device.kind; },
       [](const Request& r) {
         return std::string(r.device.kind == DeviceKind::kHost ? "cpu" : "cuda");
       }});
  if (f.op == OpType::kAllreduce || f.op == OpType::kBroadcast || f.op == OpType::kReducescatter) {
    add({"shape", [](const Request& a, const Request& b) { return a.shape == b.shape; },
         [](const Request& r) { return shape_str(r.shape); }});
  }
  if (f.op == OpType::kAddProcessSet) {
    add({"rank list", [](const Request& a, const Request& b) { return a.splits == b.splits; },
         [](const Request& r) { return shape_str(r.splits); }});
  }
  if (f.op == OpType::kRemoveProcessSet) {
    add({"process set id", [](const Request& a, const Request& b) { return a.root == b.root; },
         [](const Request& r) { return std::to_string(r.root); }});
  }
  if (f.op == OpType::kAllreduce || f.op == OpType::kReducescatter) {
    add({"reduce op", [](const Request& a, const Request& b) { return a.reduce_op == b.reduce_op; },
         [](const Request& r) { return std::string(reduce_op_name(r.reduce_op)); }});
    add({"prescale factor",
         [](const Request& a, const Request& b) { return same_bits(a.prescale, b.prescale); },
         [](const Request& r) { return fmt_double(r.prescale); }});
    add({"postscale factor",
         [](const Request& a, const Request& b) { return same_bits(a.postscale, b.postscale); },
         [](const Request& r) { return fmt_double(r.postscale); }});
  }
  if (f.op == OpType::kBroadcast) {
    add({"root rank", [](const Request& a, const Request& b) { return a.root == b.root; },
         [](const Request& r) { return std::to_string(r.root); }});
  }
  add({"group",
       [](const Request& a, const Request& b) {
         return a.group == b.group && (a.group.empty() || a.group_size == b.group_size);
       },
       [](const Request& r) {
         return r.group.empty() ? std::string("(not grouped)")
                                : "'" + r.group + "' of " + std::to_string(r.group_size);
       }});
  // A rank that refused the call locally (bad input there only): every rank fails with its
  // reason, before comparing parameters its bad input may make differ.
  std::vector<int> refusers;
  for (const auto& r : per_rank) {
    if (!r.refused.empty()) refusers.push_back(r.rank);
  }
  if (!refusers.empty()) {
    for (const auto& r : per_rank) {
      if (r.refused.empty()) continue;
      resp.error =
          r.refused + " [refused on " + ranks_word(refusers) + "; the call fails on every rank]";
      return resp;
    }
  }
  for (size_t i = 0; i < n_checks; ++i) {
    const Check& c = checks[i];
    const bool all_same = std::all_of(per_rank.begin(), per_rank.end(),
                                      [&](const Request& r) { return c.same(f, r); });
    if (all_same) continue;
    std::string err = compare_field(per_rank, c.what, c.text);
    if (!err.empty()) {
      resp.error = err;
      return resp;
    }
  }
  if (f.op == OpType::kAllgather || f.op == OpType::kAlltoall) {
    resp.error = compare_trailing(per_rank);
    if (!resp.error.empty()) return resp;
  }
  if (!joined.empty()) {
    const std::string who = describe(f.op, f.name);
    if (!joinable(f.op)) {
      resp.error = who + ": cannot run while " + ranks_word(joined) +
                   (joined.size() == 1 ? " has" : " have") +
                   " joined (after hvd::join() a rank takes part only in allreduce, allgather, "
                   "broadcast and barrier); call it on every rank before join()";
      return resp;
    }
    if (f.op == OpType::kBroadcast &&
        std::find(joined.begin(), joined.end(), f.root) != joined.end()) {
      resp.error =
          who + ": root rank " + std::to_string(f.root) + " has joined and has no tensor to send";
      return resp;
    }
    for (int j : joined) resp.joined.push_back(j);
  }
  if (f.op == OpType::kAddProcessSet) {
    resp.error = check_rank_list(f.splits, set_size);
    if (!resp.error.empty()) return resp;
    resp.rank_rows = f.splits;
  }
  if (f.op == OpType::kRemoveProcessSet) {
    std::vector<int> busy;
    for (const auto& r : per_rank) {
      if (!r.splits.empty() && r.splits[0] != 0) busy.push_back(r.rank);
    }
    if (!busy.empty()) {
      resp.error = "remove_process_set(" + std::to_string(f.root) +
                   "): collectives are still in "
                   "flight on it on " +
                   ranks_word(busy) + "; wait for them before removing the set";
      return resp;
    }
  }
  const size_t n = static_cast<size_t>(set_size);
  if (f.op == OpType::kAllgather) {
    resp.rank_rows.assign(n, 0);
    for (const auto& r : per_rank) resp.rank_rows[static_cast<size_t>(r.rank)] = r.shape[0];
  }
  if (f.op == OpType::kAlltoall) {
    resp.rank_rows.assign(n * n, 0);
    for (const auto& r : per_rank) {
      for (size_t j = 0; j < n; ++j) {
        resp.rank_rows[static_cast<size_t>(r.rank) * n + j] =
            r.splits.empty() ? r.shape[0] / set_size : r.splits[j];
      }
    }
  }
  return resp;
}

}  // namespace hvd::core
