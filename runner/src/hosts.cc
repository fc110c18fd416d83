// SPDX-License-Identifier: Apache-2.0
// Host lists, hostfiles and slot-major rank placement.
#include "hvd/runner/hosts.h"

#include <set>
#include <sstream>

#include "hvd/runner/errors.h"

namespace hvd::runner {
namespace {

bool valid_host_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return name.front() != '-' && name.front() != '.';
}

// Positive decimal integer or -1.
int parse_slots(std::string_view text) {
  if (text.empty() || text.size() > 6) return -1;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v > 0 ? v : -1;
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

HostSlots parse_one(std::string_view entry, const std::string& where) {
  const std::string e(entry);
  const std::string fix = " (write host or host:slots, e.g. -H node1:4,node2:4)";
  if (e.empty()) throw UsageError("empty host entry in " + where + fix);
  size_t colon = e.find(':');
  std::string name = e.substr(0, colon);
  if (!valid_host_name(name)) {
    throw UsageError("bad host name '" + name + "' in '" + e + "' (" + where +
                     "): use letters, digits, '.', '-' or '_'" + fix);
  }
  HostSlots h{name, 1};
  if (colon != std::string::npos) {
    h.slots = parse_slots(std::string_view(e).substr(colon + 1));
    if (h.slots < 0) {
      throw UsageError("bad slot count in host spec '" + e + "' (" + where +
                       "): slots must be a positive integer" + fix);
    }
  }
  return h;
}

}  // namespace

std::vector<HostSlots> parse_host_list(std::string_view spec) {
  std::vector<HostSlots> hosts;
  if (trim(spec).empty()) throw UsageError("-H is empty; give hosts as -H node1:4,node2:4");
  size_t start = 0;
  while (true) {
    size_t comma = spec.find(',', start);
    std::string_view entry = spec.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    hosts.push_back(parse_one(trim(entry), "-H"));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  check_no_duplicate_hosts(hosts, "-H");
  return hosts;
}

std::vector<HostSlots> parse_hostfile(std::string_view text, std::string_view file_name) {
  std::vector<HostSlots> hosts;
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  const std::string fix = "; each line is 'host slots=N' (or 'host'), '#' starts a comment";
  while (std::getline(in, line)) {
    ++line_no;
    std::string where = std::string(file_name) + ":" + std::to_string(line_no);
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    std::vector<std::string> parts;
    while (words >> word) parts.push_back(word);
    if (parts.empty()) continue;
    HostSlots h = parse_one(parts[0], where);
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string& kv = parts[i];
      size_t eq = kv.find('=');
      std::string key = kv.substr(0, eq);
      std::string val = eq == std::string::npos ? "" : kv.substr(eq + 1);
      if (key == "slots" || key == "max_slots" || key == "max-slots") {
        int n = parse_slots(val);
        if (n < 0) {
          throw UsageError(where + ": bad '" + kv + "': slots must be a positive integer" + fix);
        }
        if (key == "slots") h.slots = n;
      } else {
        throw UsageError(where + ": unknown field '" + kv + "'" + fix);
      }
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) {
    throw UsageError("hostfile " + std::string(file_name) + " lists no hosts" + fix);
  }
  check_no_duplicate_hosts(hosts, "hostfile " + std::string(file_name));
  return hosts;
}

void check_no_duplicate_hosts(const std::vector<HostSlots>& hosts, std::string_view where) {
  std::set<std::string> seen;
  for (const auto& h : hosts) {
    if (!seen.insert(h.name).second) {
      throw UsageError("host '" + h.name + "' is listed twice in " + std::string(where) +
                       "; list each host once with its total slots (e.g. " + h.name + ":8)");
    }
  }
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

std::vector<HostSlots> assign_slots(const std::vector<HostSlots>& hosts, int np) {
  if (np < 1) throw UsageError("-np must be at least 1 (e.g. -np 4)");
  int total = total_slots(hosts);
  if (np > total) {
    throw UsageError("-np " + std::to_string(np) + " needs " + std::to_string(np) +
                     " slots but the hosts have only " + std::to_string(total) + " (" +
                     format_host_list(hosts) + "); add hosts or slots (host:slots) or lower -np");
  }
  std::vector<HostSlots> used;
  int left = np;
  for (const auto& h : hosts) {
    if (left == 0) break;
    int take = h.slots < left ? h.slots : left;
    used.push_back({h.name, take});
    left -= take;
  }
  return used;
}

std::vector<RankPlacement> place_ranks(const std::vector<HostSlots>& used) {
  std::vector<RankPlacement> out;
  int rank = 0;
  for (const auto& h : used) {
    for (int local = 0; local < h.slots; ++local) out.push_back({rank++, h.name, local});
  }
  return out;
}

bool is_local_host(std::string_view name, std::string_view own_hostname) {
  if (name == "localhost" || name == "::1" || name == own_hostname) return true;
  if (name == own_hostname.substr(0, own_hostname.find('.'))) return true;
  return name.substr(0, 4) == "127." && name.find_first_not_of("0123456789.") == name.npos;
}

std::string format_host_list(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ',';
    out += h.name + ":" + std::to_string(h.slots);
  }
  return out;
}

}  // namespace hvd::runner
