// SPDX-License-Identifier: Apache-2.0
// --host-discovery-script: runs the script every second on the launcher's io_context and keeps
// the latest valid host list (parse_discovery_output, elastic_hosts.h).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <vector>

#include "hvd/runner/hosts.h"
#include "hvd/runner/liveness.h"
#include "hvd/runner/subprocess.h"

namespace hvd::runner {

// Polls `sh -c script` once a second (a run still going at the next tick, its output not all
// read, is left alone; one that runs past 30 s is killed). A run that fails or prints a bad line is
// reported on stderr (each distinct problem once) and leaves the previous hosts in place.
class HostDiscovery {
 public:
  HostDiscovery(boost::asio::io_context& io, std::string script, int default_slots);
  HostDiscovery(const HostDiscovery&) = delete;
  HostDiscovery& operator=(const HostDiscovery&) = delete;

  // Runs the script now and then every second.
  void start();

  // The hosts of the latest valid run (empty before the first).
  const std::vector<HostSlots>& hosts() const { return hosts_; }
  // Runs that ended (valid or not) so far.
  int runs() const { return runs_; }

 private:
  void tick();
  void launch();

  boost::asio::io_context& io_;
  std::string script_;
  int default_slots_;
  boost::asio::steady_timer timer_;
  std::unique_ptr<Subprocess> proc_;
  bool busy_ = false;  // proc_ started, its exit handler not run yet
  std::chrono::steady_clock::time_point started_;
  std::string output_;
  std::vector<HostSlots> hosts_;
  int runs_ = 0;
  std::string last_problem_;
  Liveness life_;  // guards the timer's handler
};

}  // namespace hvd::runner
