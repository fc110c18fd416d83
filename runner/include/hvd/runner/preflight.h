// SPDX-License-Identifier: Apache-2.0
// Preflight: every remote host checked in parallel before anything starts (Boost.Asio).
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <vector>

#include "hvd/runner/agent_report.h"
#include "hvd/runner/mpi_profile.h"

namespace hvd::runner {

struct PreflightConfig {
  std::vector<std::string> hosts;  // remote hosts only
  int ssh_port = 0;                // 0 = 22 for the TCP check, ssh's default for ssh
  std::string ssh_identity;
  double timeout_s = 30;    // per host, all steps together
  std::string hvdrun_path;  // this executable; must exist at the same path remotely
  std::string program;      // the user's program as given
  std::string cwd;          // master's working directory (ranks start there)
  std::string path_env;     // master's PATH (forwarded to ranks)
  std::vector<std::string> master_addresses;  // the agent tries to connect back to these
  unsigned short listener_port = 0;
  std::string token;       // sent on the agent's stdin (never in argv)
  std::string state_base;  // elastic mode: the base of the job's state directory, checked on
                           // each host (state_dir.h); "" = not checked
  MpiProfile mpi = open_mpi_profile(4);  // this machine's mpirun: which daemon hosts need
};

struct HostResult {
  std::string host;
  std::vector<std::string> problems;  // one line each: problem and fix
  AgentReport report;
  double seconds = 0;
};

struct PreflightResult {
  std::vector<HostResult> hosts;  // in the order given
  double seconds = 0;
  bool ok() const;
};

// For each host, bounded by timeout_s: resolve; TCP connect to the ssh port; one
// `ssh -o BatchMode=yes [-p] [-i] host hvdrun --agent ...` that proves key login and host key,
// checks the program, mpirun and Open MPI's daemon (orted/prted), lists interfaces and connects
// back to the master's listener (which must already be accepting on `listener_port`). Runs `io`
// until all finish. Checks every host of `config` in parallel; returns when all are done.
PreflightResult run_preflight(boost::asio::io_context& io, const PreflightConfig& config);

namespace detail {
class HostCheck;
}

// A preflight that runs in the background: start() queues every host's check on `io`, and they
// advance whenever `io` runs (elastic mode checks spare hosts while a generation runs).
// Destroying it abandons the checks still running (their handlers left on `io` do nothing).
class BackgroundPreflight {
 public:
  BackgroundPreflight(boost::asio::io_context& io, PreflightConfig config);
  ~BackgroundPreflight();
  BackgroundPreflight(const BackgroundPreflight&) = delete;
  BackgroundPreflight& operator=(const BackgroundPreflight&) = delete;
  void start();
  // True once every host's check has finished (passed or failed).
  bool done() const;
  // Each host's result, complete once done().
  const std::vector<HostResult>& hosts() const { return hosts_; }

 private:
  boost::asio::io_context& io_;
  const PreflightConfig config_;
  std::vector<HostResult> hosts_;
  std::vector<std::unique_ptr<detail::HostCheck>> checks_;
};

// The report listing every host's problems at once (empty when all passed).
std::string format_preflight_report(const PreflightResult& result);

}  // namespace hvd::runner
