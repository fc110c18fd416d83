// SPDX-License-Identifier: Apache-2.0
// IPv4 address arithmetic and the choice of the networks a job uses.
#include "hvd/runner/interfaces.h"

#include <algorithm>

namespace hvd::runner {
namespace {

std::uint32_t mask_of(int prefix) {
  return prefix <= 0 ? 0u : prefix >= 32 ? 0xffffffffu : ~((1u << (32 - prefix)) - 1u);
}

std::string format_ipv4(std::uint32_t a) {
  return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." +
         std::to_string((a >> 8) & 255) + "." + std::to_string(a & 255);
}

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

}  // namespace

std::optional<std::uint32_t> parse_ipv4(const std::string& text) {
  std::uint32_t out = 0;
  int parts = 0;
  size_t i = 0;
  while (parts < 4) {
    if (i >= text.size() || text[i] < '0' || text[i] > '9') return std::nullopt;
    unsigned v = 0;
    size_t digits = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 4) {
      v = v * 10 + static_cast<unsigned>(text[i++] - '0');
      ++digits;
    }
    if (v > 255) return std::nullopt;
    out = (out << 8) | v;
    ++parts;
    if (parts < 4) {
      if (i >= text.size() || text[i] != '.') return std::nullopt;
      ++i;
    }
  }
  if (i != text.size()) return std::nullopt;
  return out;
}

std::string network_cidr(const Interface& iface) {
  auto a = parse_ipv4(iface.address);
  if (!a) return "";
  return format_ipv4(*a & mask_of(iface.prefix_len)) + "/" + std::to_string(iface.prefix_len);
}

bool cidr_contains(const std::string& cidr, const std::string& address) {
  size_t slash = cidr.find('/');
  if (slash == std::string::npos) return false;
  auto net = parse_ipv4(cidr.substr(0, slash));
  auto a = parse_ipv4(address);
  int prefix = 0;
  try {
    prefix = std::stoi(cidr.substr(slash + 1));
  } catch (...) {
    return false;
  }
  if (!net || !a || prefix < 0 || prefix > 32) return false;
  return (*a & mask_of(prefix)) == (*net & mask_of(prefix));
}

bool is_loopback(const Interface& iface) { return iface.address.rfind("127.", 0) == 0; }

InterfaceChoice choose_interfaces(const std::vector<Interface>& master,
                                  const std::vector<HostNetwork>& remotes) {
  InterfaceChoice c;
  for (const auto& m : master) {
    if (is_loopback(m)) continue;
    const std::string cidr = network_cidr(m);
    if (cidr.empty()) continue;
    std::vector<std::string> names{m.name};
    bool all = true;
    for (const auto& r : remotes) {
      bool reached = std::find(r.reached.begin(), r.reached.end(), m.address) != r.reached.end();
      const Interface* there = nullptr;
      for (const auto& i : r.interfaces) {
        if (cidr_contains(cidr, i.address)) {
          there = &i;
          break;
        }
      }
      if (!reached || there == nullptr) {
        all = false;
        break;
      }
      add_unique(names, there->name);
    }
    if (!all) continue;
    add_unique(c.cidrs, cidr);
    add_unique(c.master_addresses, m.address);
    for (const auto& n : names) add_unique(c.nccl_ifnames, n);
  }
  if (c.cidrs.empty()) {
    c.error =
        "no network reaches the master from every host and has an address on every host; "
        "check routing/firewalls or choose one with --network-interface";
  }
  return c;
}

}  // namespace hvd::runner
