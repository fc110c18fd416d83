// SPDX-License-Identifier: Apache-2.0
// Network interfaces and the choice of the network every host can use: pure, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hvd::runner {

// One IPv4 address of one interface.
struct Interface {
  std::string name;     // e.g. eth0
  std::string address;  // e.g. 10.0.0.5
  int prefix_len = 32;  // e.g. 24
  bool operator==(const Interface& o) const {
    return name == o.name && address == o.address && prefix_len == o.prefix_len;
  }
};

// What a remote host's agent found: its interfaces and which master addresses it reached.
struct HostNetwork {
  std::string host;
  std::vector<Interface> interfaces;
  std::vector<std::string> reached;  // master addresses the agent connected back to
};

// The networks the job uses.
struct InterfaceChoice {
  std::vector<std::string> cidrs;             // for oob_tcp_if_include / btl_tcp_if_include
  std::vector<std::string> nccl_ifnames;      // interface names on those networks, all hosts
  std::vector<std::string> master_addresses;  // master addresses in those networks
  std::string error;                          // non-empty when no common network exists
};

// Parses a dotted IPv4 address.
std::optional<std::uint32_t> parse_ipv4(const std::string& text);

// "10.1.2.0/24" for 10.1.2.7 with prefix 24.
std::string network_cidr(const Interface& iface);

// True when `address` lies in `cidr` ("a.b.c.d/n").
bool cidr_contains(const std::string& cidr, const std::string& address);

// True for 127/8.
bool is_loopback(const Interface& iface);

// Picks the master's non-loopback networks that every remote host reached the master on and
// has an address in. Deterministic: master interface order.
InterfaceChoice choose_interfaces(const std::vector<Interface>& master,
                                  const std::vector<HostNetwork>& remotes);

}  // namespace hvd::runner
