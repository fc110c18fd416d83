// SPDX-License-Identifier: Apache-2.0
// Validation: turns the requests of every rank for one name into a response or an error
// that names the tensor, the ranks on each side and both values. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "hvd/core/message.h"

namespace hvd::core {

/// Checks a single request before it leaves the rank (root range, null data is checked by the
/// caller, scale factors finite, dtype and reduce op allowed for the op, alltoall splits: one
/// per rank of the set, summing to the first dimension, or an evenly divisible first
/// dimension). `set_size` is the process set size.
Status validate_local(const Request& r, int set_size);

/// `per_rank[i]` is rank i's request for the same name. Returns an op response with the agreed
/// parameters, or an error response naming the first disagreement.
Response build_response(const std::vector<Request>& per_rank);

/// The same for a name submitted by the ranks in `present` (each request's `rank` says whose)
/// while the ranks in `joined` (ascending) have called join() without submitting it. Joined
/// ranks may take part in allreduce, allgather, broadcast (not as root) and barrier; any other
/// op gives an error response. `set_size` = present + joined. add_process_set checks that every
/// rank passed the same list and that it is valid for `set_size` global ranks.
Response build_response(const std::vector<Request>& present, int set_size,
                        const std::vector<int>& joined);

/// Refuses a user's name that lies in hvd's own name space (starts with kReservedNamePrefix),
/// naming the call `what` (e.g. "allreduce") and the name.
Status check_user_name(const std::string& what, const std::string& name);

/// The error of group `group` when its ranks submitted different numbers of members
/// ("grouped allreduce 'g': 2 tensors on ranks 0,2 but 3 on rank 1"), or "" when they agree.
/// `sizes[i]`: rank i's number of members, 0 while unknown (ignored).
std::string group_size_error(OpType op, const std::string& group,
                             const std::vector<int32_t>& sizes);

/// "0-2,5" for {0,1,2,5}.
std::string rank_ranges(std::vector<int> ranks);

}  // namespace hvd::core
