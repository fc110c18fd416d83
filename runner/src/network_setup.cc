// SPDX-License-Identifier: Apache-2.0
// The preflight of the remote hosts and the network choice (network_setup.h).
#include "network_setup.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <utility>

#include "hvd/runner/interfaces.h"
#include "hvd/runner/local_system.h"
#include "hvd/runner/preflight.h"

namespace hvd::runner {
namespace {

HostNetwork host_network(const HostResult& h) {
  return {h.host, h.report.interfaces, h.report.reached};
}

PreflightConfig preflight_config(const Options& o, const NetworkTarget& t,
                                 std::vector<std::string> hosts,
                                 const std::vector<Interface>& master_ifaces) {
  PreflightConfig pc;
  pc.hosts = std::move(hosts);
  pc.ssh_port = o.ssh_port;
  pc.ssh_identity = o.ssh_identity;
  pc.timeout_s = o.start_timeout_s;
  pc.hvdrun_path = t.self;
  pc.program = o.command[0];
  pc.cwd = t.cwd;
  pc.path_env = t.path;
  // Only where the control server listens: an address it could not bind may be another
  // process's, which must not hear the token.
  for (const auto& i : master_ifaces) {
    if (is_loopback(i)) continue;
    if (std::find(t.listening.begin(), t.listening.end(), i.address) == t.listening.end()) continue;
    pc.master_addresses.push_back(i.address);
  }
  pc.listener_port = t.listener_port;
  pc.token = t.token;
  pc.mpi = t.mpi;
  if (o.elastic()) pc.state_base = o.elastic_state_dir;
  return pc;
}

}  // namespace

std::vector<std::string> preflight_listen_addresses() {
  std::vector<std::string> out;
  for (const auto& i : local_interfaces()) {
    if (!is_loopback(i) && std::find(out.begin(), out.end(), i.address) == out.end()) {
      out.push_back(i.address);
    }
  }
  out.push_back("127.0.0.1");
  return out;
}

std::vector<std::string> job_listen_addresses(const std::vector<std::string>& wrappers,
                                              bool preflight) {
  std::vector<std::string> out = wrappers;
  if (preflight) {
    for (const auto& a : preflight_listen_addresses()) {
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
  }
  return out;
}

void listen_only_on(ControlServer& server, const std::vector<std::string>& addresses, bool verbose,
                    const std::string& why) {
  if (server.addresses() == addresses) return;
  for (const auto& f : server.listen_on(addresses)) {
    std::cerr << "hvdrun: warning: cannot listen on " << f
              << " (another process holds that port there); hosts cannot reach hvdrun at that "
                 "address\n";
  }
  if (verbose) std::cerr << "hvdrun: listening on " << server.describe() << " " << why << "\n";
}

std::unique_ptr<BackgroundPreflight> start_spare_preflight(boost::asio::io_context& io,
                                                           const Options& o,
                                                           const NetworkTarget& target) {
  auto run = std::make_unique<BackgroundPreflight>(
      io, preflight_config(o, target, target.remote, local_interfaces()));
  run->start();
  return run;
}

std::vector<HostNetwork> passed_hosts(const BackgroundPreflight& run) {
  std::vector<HostNetwork> passed;
  if (!run.done()) return passed;
  for (const auto& h : run.hosts()) {
    if (h.problems.empty()) passed.push_back(host_network(h));
  }
  return passed;
}

NetworkSetup prepare_network(boost::asio::io_context& io, const Options& o,
                             const NetworkTarget& t) {
  NetworkSetup out;
  for (const auto& i : o.network_interfaces) {
    out.mpi_interfaces.push_back(i);
    if (i.find('/') == std::string::npos) out.nccl_names.push_back(i);
  }
  if (!t.remote.empty()) {
    std::vector<HostNetwork> nets;
    const auto master_ifaces = local_interfaces();
    PreflightConfig pc = preflight_config(o, t, {}, master_ifaces);
    for (const auto& h : t.remote) {
      auto k = std::find_if(t.known.begin(), t.known.end(),
                            [&](const HostNetwork& n) { return n.host == h; });
      if (k == t.known.end()) {
        pc.hosts.push_back(h);
      } else {
        nets.push_back(*k);
      }
    }
    PreflightResult pre;
    if (!pc.hosts.empty()) pre = run_preflight(io, pc);
    for (const auto& h : pre.hosts) nets.push_back(host_network(h));
    InterfaceChoice choice;
    if (pre.ok()) {
      choice = choose_interfaces(master_ifaces, nets);
      if (!choice.error.empty() && o.network_interfaces.empty()) {
        if (pre.hosts.empty()) pre.hosts.push_back({t.remote.front(), {}, {}, 0});
        pre.hosts.front().problems.push_back(choice.error);
      }
    }
    if (o.verbose) {
      for (const auto& h : pre.hosts) {
        std::fprintf(stderr, "hvdrun: preflight %s: %s in %.2f s\n", h.host.c_str(),
                     h.problems.empty() ? "ok" : "FAILED", h.seconds);
      }
    }
    if (!pre.ok()) {
      out.ok = false;
      out.report = format_preflight_report(pre);
      for (const auto& h : pre.hosts) {
        if (!h.problems.empty()) out.failed_hosts.push_back(h.host);
      }
      return out;
    }
    if (o.network_interfaces.empty()) {
      out.mpi_interfaces = choice.cidrs;
      out.nccl_names = choice.nccl_ifnames;
      out.wrapper_addresses = choice.master_addresses;
    } else {
      // The user chose the network; wrappers use any master address every host reached.
      for (const auto& a : pc.master_addresses) {
        bool all = true;
        for (const auto& n : nets) {
          all = all && std::find(n.reached.begin(), n.reached.end(), a) != n.reached.end();
        }
        if (all) out.wrapper_addresses.push_back(a);
      }
    }
    if (o.verbose) {
      std::fprintf(stderr, "hvdrun: preflight passed for %zu host(s) in %.2f s", pre.hosts.size(),
                   pre.seconds);
      if (nets.size() > pre.hosts.size()) {
        std::fprintf(stderr, "; %zu host(s) passed it before, not checked again",
                     nets.size() - pre.hosts.size());
      }
      std::fprintf(stderr, "\n");
    }
    out.checked = nets;
  }
  // Loopback only where every rank runs on this machine: a rank on a remote host that fell back
  // to 127.0.0.1 would hand the token to whoever listens on that port there.
  if (t.remote.empty() || out.wrapper_addresses.empty())
    out.wrapper_addresses.push_back("127.0.0.1");
  return out;
}

std::string wrapper_connect_list(const std::vector<std::string>& addresses, unsigned short port) {
  std::string connect;
  for (const auto& a : addresses) {
    connect += (connect.empty() ? "" : ",") + a + ":" + std::to_string(port);
  }
  return connect;
}

}  // namespace hvd::runner
