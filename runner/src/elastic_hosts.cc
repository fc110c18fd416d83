// SPDX-License-Identifier: Apache-2.0
// Elastic mode's host planning (elastic_hosts.h).
#include "hvd/runner/elastic_hosts.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace hvd::runner {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool valid_host_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

}  // namespace

DiscoveredHosts parse_discovery_output(std::string_view text, int default_slots) {
  DiscoveredHosts out;
  std::set<std::string> seen;
  int line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    std::string_view line = trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    auto fail = [&](const std::string& why) {
      out.hosts.clear();
      out.error = "line " + std::to_string(line_no) + " '" + std::string(trim(raw)) + "': " + why +
                  " (want one 'host' or 'host:slots' per line)";
      return out;
    };
    std::string_view name = line;
    int slots = default_slots;
    if (size_t colon = line.find(':'); colon != std::string_view::npos) {
      name = line.substr(0, colon);
      std::string_view count = line.substr(colon + 1);
      if (count.empty() || count.size() > 6 || !std::all_of(count.begin(), count.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
          })) {
        return fail("slots must be a whole number");
      }
      slots = std::stoi(std::string(count));
    }
    if (!valid_host_name(name)) return fail("not a host name");
    if (slots < 1) return fail("a host needs at least 1 slot");
    if (!seen.insert(std::string(name)).second) return fail("host listed twice");
    out.hosts.push_back({std::string(name), slots});
  }
  return out;
}

double cooldown_seconds(const CooldownRange& range, int failures, std::mt19937_64& rng) {
  const double low =
      std::min(range.min_s * std::ldexp(1.0, std::clamp(failures, 1, 60) - 1), range.max_s);
  const double high = std::min(2 * low, range.max_s);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  return std::min(low + u * (high - low), range.max_s);
}

double Blacklist::add(const std::string& host, double now_s) {
  Entry& e = entries_[host];
  ++e.failures;
  if (!cooldown_) {
    e.forever = true;
    return -1;
  }
  const double s = cooldown_seconds(*cooldown_, e.failures, rng_);
  e.until_s = now_s + s;
  return s;
}

bool Blacklist::blocked(const std::string& host, double now_s) const {
  auto it = entries_.find(host);
  if (it == entries_.end()) return false;
  return it->second.forever || now_s < it->second.until_s;
}

int Blacklist::failures(const std::string& host) const {
  auto it = entries_.find(host);
  return it == entries_.end() ? 0 : it->second.failures;
}

GenerationPlan plan_generation(const std::vector<HostSlots>& hosts, const Blacklist& blacklist,
                               double now_s, int min_np, int max_np) {
  GenerationPlan plan;
  std::vector<HostSlots> open;
  std::string blocked;
  for (const auto& h : hosts) {
    if (blacklist.blocked(h.name, now_s)) {
      blocked += (blocked.empty() ? "" : ",") + h.name;
      continue;
    }
    open.push_back(h);
    plan.available_slots += h.slots;
  }
  if (plan.available_slots < min_np || plan.available_slots == 0) {
    plan.why_not = std::to_string(plan.available_slots) + " slot(s) available" +
                   (open.empty() ? "" : " (" + format_host_list(open) + ")") +
                   (blocked.empty() ? "" : ", blacklisted: " + blocked) + "; --min-np " +
                   std::to_string(min_np) + " needs " + std::to_string(min_np);
    return plan;
  }
  plan.ready = true;
  plan.np = max_np > 0 ? std::min(max_np, plan.available_slots) : plan.available_slots;
  int left = plan.np;
  for (const auto& h : open) {
    if (left == 0) break;
    const int take = std::min(h.slots, left);
    plan.used.push_back({h.name, take});
    left -= take;
  }
  return plan;
}

int host_update_bits(const std::vector<HostSlots>& running, const std::vector<HostSlots>& hosts,
                     const Blacklist& blacklist, double now_s, int min_np, int max_np) {
  int bits = kHostsUnchanged;
  int running_np = 0;
  for (const auto& r : running) {
    running_np += r.slots;
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const HostSlots& h) { return h.name == r.name; });
    if (it == hosts.end() || it->slots < r.slots || blacklist.blocked(r.name, now_s)) {
      bits |= kHostsRemoved;
    }
  }
  const GenerationPlan next = plan_generation(hosts, blacklist, now_s, min_np, max_np);
  if (next.ready && next.np > running_np) bits |= kHostsAdded;
  return bits;
}

std::optional<std::string> host_to_blacklist(const GenerationOutcome& o,
                                             const std::vector<HostSlots>& used,
                                             std::string_view own_hostname) {
  const bool ok = o.exit_code == 0 && o.rank0_done;
  if (ok || o.signal != 0 || o.failed_rank < 0 || o.exit_code == kExitElasticRestart ||
      o.exit_code == kExitElasticFatal) {  // the program's error, not its host's
    return std::nullopt;
  }
  const auto placement = place_ranks(used);
  if (static_cast<size_t>(o.failed_rank) >= placement.size()) return std::nullopt;
  const std::string& host = placement[o.failed_rank].host;
  if (is_local_host(host, own_hostname)) return std::nullopt;
  return host;
}

std::vector<std::string> spare_hosts_to_check(const std::vector<HostSlots>& hosts,
                                              const std::vector<HostSlots>& used,
                                              const Blacklist& blacklist, double now_s,
                                              const std::vector<std::string>& checked,
                                              std::string_view own_hostname) {
  auto listed = [](const auto& list, const std::string& name, auto name_of) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return name_of(e) == name; });
  };
  std::vector<std::string> spare;
  for (const auto& h : hosts) {
    if (listed(used, h.name, [](const HostSlots& u) { return u.name; })) continue;
    if (listed(checked, h.name, [](const std::string& c) { return c; })) continue;
    if (blacklist.blocked(h.name, now_s)) continue;
    if (is_local_host(h.name, own_hostname)) continue;
    spare.push_back(h.name);
  }
  return spare;
}

}  // namespace hvd::runner
