// SPDX-License-Identifier: Apache-2.0
// Validation of requests across ranks, with messages naming tensor, ranks and values.
#include "hvd/core/validation.h"

#include <algorithm>
#include <cmath>
#include <functional>
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

std::string fmt_double(double d) {
  std::ostringstream o;
  o << d;
  return o.str();
}

// Groups ranks by the string form of one field; returns an error message or "".
std::string compare_field(const std::vector<Request>& reqs, const char* what,
                          const std::function<std::string(const Request&)>& value) {
  std::map<std::string, std::vector<int>> by_value;
  std::vector<std::string> order;
  for (const auto& r : reqs) {
    std::string v = value(r);
    if (!by_value.count(v)) order.push_back(v);
    by_value[v].push_back(r.rank);
  }
  if (by_value.size() <= 1) return "";
  const Request& first = reqs.front();
  std::string msg = std::string(op_name(first.op)) + " '" + first.name + "': " + what + " ";
  for (size_t i = 0; i < order.size(); ++i) {
    if (i) msg += i + 1 == order.size() ? " but " : ", ";
    msg += order[i] + " on " + ranks_word(by_value[order[i]]);
  }
  return msg;
}

}  // namespace

Status validate_local(const Request& r, int set_size) {
  const std::string who = std::string(op_name(r.op)) + " '" + r.name + "'";
  if (r.op == OpType::kBroadcast && (r.root < 0 || r.root >= set_size)) {
    return invalid_argument(who + ": root rank " + std::to_string(r.root) +
                            " is out of range (process set has " + std::to_string(set_size) +
                            " ranks: 0-" + std::to_string(set_size - 1) + ")");
  }
  if (r.op == OpType::kAllreduce || r.op == OpType::kReducescatter) {
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
  return Status::OK();
}

Response build_response(const std::vector<Request>& per_rank) {
  const Request& f = per_rank.front();
  Response resp;
  resp.op = f.op;
  resp.names = {f.name};
  resp.process_set = f.process_set;
  resp.dtype = f.dtype;
  resp.device = f.device;

  using Getter = std::function<std::string(const Request&)>;
  std::vector<std::pair<const char*, Getter>> checks = {
      {"operation", [](const Request& r) { return std::string(op_name(r.op)); }},
      {"dtype", [](const Request& r) { return std::string(dtype_name(r.dtype)); }},
      {"device kind", [](const Request& r) {
         return std::string(r.device.kind == DeviceKind::kHost ? "cpu" : "cuda");
       }},
  };
  if (f.op == OpType::kAllreduce || f.op == OpType::kBroadcast) {
    checks.push_back({"shape", [](const Request& r) { return shape_str(r.shape); }});
  }
  if (f.op == OpType::kAllreduce || f.op == OpType::kReducescatter) {
    checks.push_back({"reduce op", [](const Request& r) {
                        return std::string(reduce_op_name(r.reduce_op));
                      }});
    checks.push_back({"prescale factor", [](const Request& r) { return fmt_double(r.prescale); }});
    checks.push_back(
        {"postscale factor", [](const Request& r) { return fmt_double(r.postscale); }});
  }
  if (f.op == OpType::kBroadcast) {
    checks.push_back({"root rank", [](const Request& r) { return std::to_string(r.root); }});
  }
  checks.push_back({"group", [](const Request& r) {
                      return r.group.empty() ? std::string("(not grouped)")
                                             : "'" + r.group + "' of " +
                                                   std::to_string(r.group_size);
                    }});
  for (const auto& [what, get] : checks) {
    std::string err = compare_field(per_rank, what, get);
    if (!err.empty()) {
      resp.error = err;
      return resp;
    }
  }
  resp.reduce_op = f.reduce_op;
  resp.root = f.root;
  resp.prescale = f.prescale;
  resp.postscale = f.postscale;
  resp.numels = {shape_numel(f.shape)};
  return resp;
}

}  // namespace hvd::core
