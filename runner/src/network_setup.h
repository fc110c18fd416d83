// SPDX-License-Identifier: Apache-2.0
// The preflight of the remote hosts and the network choice that follows it (private to the
// launcher: app.cc runs it once, elastic mode once per generation).
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <vector>

#include "hvd/runner/cli.h"
#include "hvd/runner/control_server.h"
#include "hvd/runner/interfaces.h"
#include "hvd/runner/preflight.h"

namespace hvd::runner {

// What the preflight found and what the job's network is.
struct NetworkSetup {
  bool ok = true;
  std::string report;                          // the preflight's report when !ok
  std::vector<std::string> failed_hosts;       // hosts with problems, when !ok
  std::vector<std::string> mpi_interfaces;     // oob/btl *_if_include
  std::vector<std::string> nccl_names;         // NCCL_SOCKET_IFNAME
  std::vector<std::string> wrapper_addresses;  // master addresses every host reached
  std::vector<HostNetwork> checked;            // what each remote host's preflight found
};

// Where the preflight runs and what it checks.
struct NetworkTarget {
  std::vector<std::string> remote;  // remote hosts (empty: this machine only)
  unsigned short listener_port = 0;
  std::string token;
  std::string self;  // hvdrun's own path
  std::string cwd;
  std::string path;  // PATH
  MpiProfile mpi;    // this machine's mpirun (the preflight checks its daemon on each host)
  // Hosts that passed a preflight of this job before: not checked again, their networks
  // taken from here (elastic mode's later generations).
  std::vector<HostNetwork> known;
  // The addresses the control server listens on (ControlServer::addresses()): the agents
  // connect back to the non-loopback ones among them, and to nothing else.
  std::vector<std::string> listening;
};

// What the control server listens on while a preflight needs it: this machine's non-loopback
// IPv4 addresses (the candidates the agents try to connect back to), then 127.0.0.1.
std::vector<std::string> preflight_listen_addresses();

// `wrappers` plus, when `preflight`, preflight_listen_addresses(): what the control server
// listens on while ranks run (and, with `preflight`, a preflight runs too).
std::vector<std::string> job_listen_addresses(const std::vector<std::string>& wrappers,
                                              bool preflight);

// Makes `server` listen on `addresses` only (ControlServer::listen_on). Says on stderr which
// could not be bound, and with `verbose` what listens now and `why` (e.g. "for the preflight").
void listen_only_on(ControlServer& server, const std::vector<std::string>& addresses, bool verbose,
                    const std::string& why);

// Without remote hosts: the interfaces of --network-interface and no preflight. Otherwise the
// preflight of every remote host not in `known`, in parallel (preflight.h), then the
// interfaces that reach all of them (or the user's): the wrappers' addresses. 127.0.0.1 is one
// only when every rank runs on this machine (a remote rank never tries its own loopback, where
// another user could listen on hvdrun's port). The agents connect back to `target.listening`'s
// non-loopback addresses.
NetworkSetup prepare_network(boost::asio::io_context& io, const Options& o,
                             const NetworkTarget& target);

// Starts the preflight of `target.remote` (spare hosts; `known` is ignored) in the background on
// `io` (BackgroundPreflight: it advances while it exists and `io` runs); passed_hosts() then gives
// those that passed, as `known` takes them. A spare that fails is not reported: it is checked
// again, and blacklisted on failure, when a generation needs it.
std::unique_ptr<BackgroundPreflight> start_spare_preflight(boost::asio::io_context& io,
                                                           const Options& o,
                                                           const NetworkTarget& target);

// The hosts of a finished background preflight that passed it (none before it is done).
std::vector<HostNetwork> passed_hosts(const BackgroundPreflight& run);

// "ADDR:PORT,ADDR:PORT": the wrappers' connect list.
std::string wrapper_connect_list(const std::vector<std::string>& addresses, unsigned short port);

}  // namespace hvd::runner
