// SPDX-License-Identifier: Apache-2.0
// Host lists, hostfiles and rank placement: pure functions, no I/O.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvd::runner {

// One host and how many ranks it may run.
struct HostSlots {
  std::string name;
  int slots = 1;
  bool operator==(const HostSlots& o) const { return name == o.name && slots == o.slots; }
};

// Where one rank runs.
struct RankPlacement {
  int rank = 0;
  std::string host;
  int local_rank = 0;
};

// Parses `-H a:4,b,c:2` (slots default to 1). Throws UsageError naming the bad entry.
std::vector<HostSlots> parse_host_list(std::string_view spec);

// Parses hostfile text: one `host [slots=N] [max_slots=M]` (or `host:N`) per line, `#` comments
// and blank lines allowed. `file_name` is used in error messages only. Throws UsageError.
std::vector<HostSlots> parse_hostfile(std::string_view text, std::string_view file_name);

// Throws UsageError when a host appears twice; `where` names the source (e.g. "-H").
void check_no_duplicate_hosts(const std::vector<HostSlots>& hosts, std::string_view where);

// Sum of slots.
int total_slots(const std::vector<HostSlots>& hosts);

// The hosts that get ranks, filled in order (slot-major, as Horovod): each host takes
// min(slots, ranks left). Throws UsageError when np exceeds the total slots.
std::vector<HostSlots> assign_slots(const std::vector<HostSlots>& hosts, int np);

// Rank -> host/local rank for the result of assign_slots().
std::vector<RankPlacement> place_ranks(const std::vector<HostSlots>& used);

// True for names that mean "this machine": localhost, 127.x.y.z, ::1, own_hostname and its
// first label ("vm" for "vm.example.com").
bool is_local_host(std::string_view name, std::string_view own_hostname);

// "a:4,b:2" (the form mpirun's -H takes).
std::string format_host_list(const std::vector<HostSlots>& hosts);

}  // namespace hvd::runner
