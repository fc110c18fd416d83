// SPDX-License-Identifier: Apache-2.0
// Elastic mode's host planning, no I/O: the host discovery script's output, the blacklist of
// failed hosts and the hosts and rank count of the next generation.
//
// The host source is the discovery script (--host-discovery-script, polled every second), else
// -H/--hostfile, else the Slurm allocation, else this machine. A host whose rank failed is
// blacklisted: for good, or with --blacklist-cooldown-range MIN MAX for a cooldown drawn at
// random within the range, with a backoff on each further failure of that host (cooldown_seconds).
// A generation
// starts on the hosts not blacklisted once they offer at least --min-np slots, with
// np = min(--max-np, slots).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/runner/elastic.h"
#include "hvd/runner/hosts.h"

namespace hvd::runner {

// The discovery script's hosts, or why its output was rejected.
struct DiscoveredHosts {
  std::vector<HostSlots> hosts;
  std::string error;  // "" when the output was valid
};

// Parses the discovery script's stdout: one `host` or `host:slots` per line (blank lines and
// `#` comments ignored); a host without slots gets `default_slots` (--slots-per-host). A bad
// line, zero slots or a host listed twice sets `error` (naming the line) and no hosts.
DiscoveredHosts parse_discovery_output(std::string_view text, int default_slots);

// --blacklist-cooldown-range MIN MAX, in seconds.
struct CooldownRange {
  double min_s = 0;
  double max_s = 0;
};

// The cooldown after a host's `failures`-th failure (1, 2, ...), drawn uniformly from `rng`
// within [b, min(2 b, max_s)] where b = min(min_s * 2^(failures-1), max_s): always within
// [min_s, max_s], the lower bound doubling with each failure until it reaches max_s (then
// max_s). Random so that hosts that failed together do not all return at the same moment.
double cooldown_seconds(const CooldownRange& range, int failures, std::mt19937_64& rng);

// Hosts that failed, and until when they stay out. Times are seconds on any steady clock.
class Blacklist {
 public:
  // Without a cooldown range a blacklisted host never returns. `seed` seeds the cooldowns'
  // random draws.
  explicit Blacklist(std::optional<CooldownRange> cooldown = std::nullopt,
                     std::uint64_t seed = std::random_device{}())
      : cooldown_(cooldown), rng_(seed) {}

  // Records a failure of `host` at `now_s`; returns its cooldown in seconds (-1 = forever).
  double add(const std::string& host, double now_s);

  // True while `host` is out at `now_s`.
  bool blocked(const std::string& host, double now_s) const;

  // Failures recorded for `host` so far.
  int failures(const std::string& host) const;

 private:
  struct Entry {
    int failures = 0;
    double until_s = 0;
    bool forever = false;
  };
  std::optional<CooldownRange> cooldown_;
  std::mt19937_64 rng_;
  std::map<std::string, Entry> entries_;
};

// The hosts and rank count of the next generation.
struct GenerationPlan {
  bool ready = false;           // at least min_np slots on hosts not blacklisted
  std::vector<HostSlots> used;  // the hosts that get ranks (slot-major), slots = ranks there
  int np = 0;                   // min(max_np, available slots) when ready
  int available_slots = 0;      // slots on hosts not blacklisted
  std::string why_not;          // when not ready: slots available, blacklisted hosts, min_np
};

// Plans a generation on `hosts` (in the host source's order) less the hosts blacklisted at
// `now_s`. max_np <= 0 means no limit.
GenerationPlan plan_generation(const std::vector<HostSlots>& hosts, const Blacklist& blacklist,
                               double now_s, int min_np, int max_np);

// The spare hosts of a generation: those of `hosts` (the host source now) that it does not use
// (`used`), that are remote (not `own_hostname`), not blacklisted at `now_s` and not in `checked`
// (passed a preflight of this job before), in the host source's order. Elastic mode preflights them
// while the generation runs, so that a later generation taking them over launches without that
// check.
std::vector<std::string> spare_hosts_to_check(const std::vector<HostSlots>& hosts,
                                              const std::vector<HostSlots>& used,
                                              const Blacklist& blacklist, double now_s,
                                              const std::vector<std::string>& checked,
                                              std::string_view own_hostname);

// Bits of a host change, as Horovod's HostUpdateResult (the ranks' check_host_updates()).
enum HostUpdateBits : int { kHostsUnchanged = 0, kHostsRemoved = 1, kHostsAdded = 2 };

// How the host source's latest `hosts` differ from the running generation (`running`: its
// hosts, slots = ranks there): kHostsRemoved when a running host is gone, blacklisted or has
// fewer slots than it runs ranks; kHostsAdded when a generation planned now would have more
// ranks than the running one (a new host or more slots, below --max-np). Both may be set.
int host_update_bits(const std::vector<HostSlots>& running, const std::vector<HostSlots>& hosts,
                     const Blacklist& blacklist, double now_s, int min_np, int max_np);

// The host to blacklist after a generation on `used` (its hosts, slots = ranks there, in rank
// order) that ended with `outcome`: the host of the rank that failed first; none when the
// generation succeeded, hvdrun was signalled, no rank failed (mpirun alone), the rank left
// for a restart (kExitElasticRestart) or its host is hvdrun's own machine (`own_hostname`).
std::optional<std::string> host_to_blacklist(const GenerationOutcome& outcome,
                                             const std::vector<HostSlots>& used,
                                             std::string_view own_hostname);

}  // namespace hvd::runner
