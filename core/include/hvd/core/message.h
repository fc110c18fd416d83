// SPDX-License-Identifier: Apache-2.0
// Requests (what a rank wants) and responses (what every rank will run), and their wire format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
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
  kJoin,  ///< `splits` {microseconds since this rank called join()}, read when sent to rank 0
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

  /// True when two requests describe the same collective: every field for_each_request_field
  /// calls a parameter (everything but `rank` and `refused`). The response cache relies on it.
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

/// How a Request field takes part in negotiation (see for_each_request_field).
enum class FieldRole : uint8_t {
  kSender,     ///< who sent it (`rank`): never compared
  kParameter,  ///< compared by same_params: a cached name needs every one equal
  kRefusal,    ///< carried to rank 0, never compared (`refused`)
};

/// The one list of Request's fields, in wire order: calls `f(member, role, response_member)`
/// for each, in order, while f returns true, and returns whether all did. `response_member`
/// is the Response field response_of() copies it to, or nullptr where none (a field that
/// response_of maps by hand, `name` and `shape`, or that negotiation turns into something
/// else). same_params, the wire writer and reader, response_of and reset_for_reuse all walk
/// this list; request_field_count() must equal Request's member count (a static_assert in
/// message.cc), so a field added to Request and not here does not compile.
template <typename F>
constexpr bool for_each_request_field(F&& f) {
  using R = Response;
  constexpr std::nullptr_t kNone = nullptr;
  return f(&Request::rank, FieldRole::kSender, kNone) &&
         f(&Request::op, FieldRole::kParameter, &R::op) &&
         f(&Request::name, FieldRole::kParameter, kNone) &&  // names = {name}
         f(&Request::dtype, FieldRole::kParameter, &R::dtype) &&
         f(&Request::shape, FieldRole::kParameter, kNone) &&  // numels by the op's convention
         f(&Request::reduce_op, FieldRole::kParameter, &R::reduce_op) &&
         f(&Request::root, FieldRole::kParameter, &R::root) &&
         f(&Request::prescale, FieldRole::kParameter, &R::prescale) &&
         f(&Request::postscale, FieldRole::kParameter, &R::postscale) &&
         f(&Request::device, FieldRole::kParameter, &R::device) &&
         f(&Request::process_set, FieldRole::kParameter, &R::process_set) &&
         f(&Request::group, FieldRole::kParameter, kNone) &&
         f(&Request::group_size, FieldRole::kParameter, kNone) &&
         f(&Request::splits, FieldRole::kParameter, kNone) &&  // rank_rows, by negotiation
         f(&Request::refused, FieldRole::kRefusal, kNone);
}

/// The number of fields for_each_request_field lists.
constexpr size_t request_field_count() {
  size_t n = 0;
  for_each_request_field([&n](auto, FieldRole, auto) { return ++n > 0; });
  return n;
}

/// The response that runs `r` alone: its name and parameters (op, dtype, reduce op, root,
/// scale factors, device, process set) and `numels` by the op's convention (elements of one
/// row for allgather, alltoall and reducescatter). Negotiation adds what depends on every rank
/// (rows, joined ranks, errors).
Response response_of(const Request& r);
/// Copies `r`'s parameters into `*out` (the Request fields that for_each_request_field maps to a
/// Response field): the one place a request's fields are copied into a response (response_of,
/// and the runtime's responses of cached batches, which reuse their names' memory).
void copy_params(const Request& r, Response* out);

/// hvd's own names (automatic names, group members, join, process set operations) start with
/// this character and user names may not (check_user_name), so the two never meet.
inline constexpr char kReservedNamePrefix = '@';
/// `base` in hvd's own name space: "@<base>".
std::string internal_name(const std::string& base);
/// The name of member `i` of the group keyed `group`: "@<group>/<i>", distinct for every
/// (group, i) and from every other name.
std::string member_name(const std::string& group, size_t i);
/// member_name() written into `*out`, reusing its capacity (a group's members in turn).
void member_name_into(std::string* out, const std::string& group, size_t i);
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
  /// Calls this rank refused before it knew their tensor (a reserved name, an unknown process
  /// set: Controller::notice), each "rank <r> refused ...": the coordinator fails with it the
  /// tensor the other ranks then wait for from this rank alone.
  std::vector<std::string> notices;
};

/// The coordinator's answer for one round.
struct ResponseList {
  std::vector<Response> responses;      ///< each carries its own joined ranks
  std::vector<int32_t> shutdown_ranks;  ///< ranks that asked to shut down (empty: none)
  /// Non-empty: the round failed (a rank's error, a request list rank 0 could not read or an
  /// exception on rank 0); every rank stops with this error, the same on all of them.
  std::string error;
  /// With shutdown_ranks: the refusals those ranks made that no other rank's call met yet,
  /// added to the message of every call the shutdown fails.
  std::string shutdown_note;
};

std::vector<uint8_t> serialize(const RequestList& l);
/// The same bytes as serialize(RequestList{requests, shutdown, error, notices}), from pointers.
std::vector<uint8_t> serialize_requests(const std::vector<const Request*>& requests, bool shutdown,
                                        const std::string& error = "",
                                        const std::vector<std::string>& notices = {});
std::vector<uint8_t> serialize(const ResponseList& l);
Result<RequestList> parse_request_list(const uint8_t* data, size_t size);
Result<ResponseList> parse_response_list(const uint8_t* data, size_t size);

}  // namespace hvd::core
