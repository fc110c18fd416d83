// SPDX-License-Identifier: Apache-2.0
// Requests (what a rank wants) and responses (what every rank will run), and their wire format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd::core {

/// Collective kinds. Numbering is part of the wire format: append only.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kBroadcast,
  kBarrier,
  kAllgather,
  kAlltoall,
  kReducescatter,
  kJoin,
  kAddProcessSet,     ///< global set only: `splits` holds the new set's global ranks
  kRemoveProcessSet,  ///< global set only: `root` holds the id, `splits` {1} when busy here
};
const char* op_name(OpType op);

/// One rank's wish to run a collective on a named tensor.
struct Request {
  int32_t rank = 0;  ///< rank within the process set
  OpType op = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::kSum;
  int32_t root = 0;  ///< broadcast root
  double prescale = 1.0;
  double postscale = 1.0;
  Device device;
  int32_t process_set = 0;
  std::string group;            ///< non-empty for grouped ops: shared key of the group
  int32_t group_size = 0;       ///< number of members of `group`
  std::vector<int64_t> splits;  ///< alltoall: rows sent to each rank (empty: equal split);
                                ///< add_process_set: the global ranks of the new set
  /// Non-empty: this rank refused the call (bad input on this rank only, e.g. a root out of
  /// range); negotiated like any request so that the other ranks' calls fail with this message
  /// instead of waiting for this rank forever. Not a parameter (same_params ignores it).
  std::string refused;

  /// True when two requests describe the same collective (everything but `rank`).
  bool same_params(const Request& o) const;
};

/// What every rank of a process set executes, in order. An error response fails the named
/// tensors' handles on every rank with `error`.
struct Response {
  OpType op = OpType::kAllreduce;
  std::vector<std::string> names;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  Device device;
  int32_t process_set = 0;
  /// Elements of each named tensor (on this rank's side). allgather, alltoall and
  /// reducescatter: elements of one row (product of the dimensions after the first).
  std::vector<int64_t> numels;
  /// allgather: first dimension of every rank, per name (rank_rows[name * size + rank]).
  /// alltoall: rows rank i sends to rank j at [i * size + j]. add_process_set: the new set's
  /// global ranks.
  std::vector<int64_t> rank_rows;
  /// Ranks that joined (hvd::join) without submitting this collective: they take part with
  /// zeros (allreduce), no rows (allgather) or a scratch buffer (broadcast). Ascending.
  std::vector<int64_t> joined;
  std::string error;  ///< non-empty: this is an error response
  bool is_error() const { return !error.empty(); }
};

/// The response that runs `r` alone: its name and parameters (op, dtype, reduce op, root,
/// scale factors, device, process set) and `numels` by the op's convention (elements of one
/// row for allgather, alltoall and reducescatter). The one place a request's fields are
/// copied into a response; negotiation adds what depends on every rank (rows, joined ranks,
/// errors).
Response response_of(const Request& r);

/// hvd's own names (automatic names, group members, join, process set operations) start with
/// this character and user names may not (check_user_name), so the two never meet.
inline constexpr char kReservedNamePrefix = '@';
/// `base` in hvd's own name space: "@<base>".
std::string internal_name(const std::string& base);
/// The name of member `i` of the group keyed `group`: "@<group>/<i>", distinct for every
/// (group, i) and from every other name.
std::string member_name(const std::string& group, size_t i);
/// How messages name a collective: "allreduce 'w'", or for a group member (member_name)
/// "grouped allreduce 'g' (member 1)".
std::string describe(OpType op, const std::string& name);

/// `s` for one collective: "allreduce 'w': <message>" (describe), same code.
Status about(const Request& r, const Status& s);

/// One round's message from a rank to the coordinator.
struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;
  /// Non-empty: this rank failed (an exception on its background thread); every rank stops.
  std::string error;
};

/// The coordinator's answer for one round.
struct ResponseList {
  std::vector<Response> responses;      ///< each carries its own joined ranks
  std::vector<int32_t> shutdown_ranks;  ///< ranks that asked to shut down (empty: none)
  /// Non-empty: the round failed (a rank's error, a request list rank 0 could not read or an
  /// exception on rank 0); every rank stops with this error, the same on all of them.
  std::string error;
};

std::vector<uint8_t> serialize(const RequestList& l);
/// The same bytes as serialize(RequestList{requests, shutdown, error}), from pointers.
std::vector<uint8_t> serialize_requests(const std::vector<const Request*>& requests, bool shutdown,
                                        const std::string& error = "");
std::vector<uint8_t> serialize(const ResponseList& l);
Result<RequestList> parse_request_list(const uint8_t* data, size_t size);
Result<ResponseList> parse_response_list(const uint8_t* data, size_t size);

}  // namespace hvd::core
