// SPDX-License-Identifier: Apache-2.0
// One host's preflight: resolve, TCP connect to ssh, run the agent over ssh, read its report.
#include "preflight_host.h"

#include <sys/wait.h>

#include <boost/asio/connect.hpp>
#include <cmath>
#include <csignal>
#include <iostream>

#include "hvd/runner/launch_command.h"
#include "hvd/runner/ssh_errors.h"
#include "hvd/runner/state_dir.h"
#include "hvd/runner/wire.h"

namespace hvd::runner::detail {
namespace asio = boost::asio;
using asio::ip::tcp;

HostCheck::HostCheck(asio::io_context& io, const PreflightConfig& config, HostResult& result)
    : io_(io), config_(config), result_(result), deadline_(io), resolver_(io), socket_(io) {}

double HostCheck::remaining_s() const {
  auto used = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return config_.timeout_s - used;
}

void HostCheck::start() {
  start_ = std::chrono::steady_clock::now();
  deadline_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(config_.timeout_s)));
  deadline_.async_wait(life_.guard([this](boost::system::error_code ec) {
    if (ec || finished_) return;
    fail("no answer from " + result_.host + " within --start-timeout " +
         seconds_text(config_.timeout_s) + " s while " + step_ +
         "; check that the host is up and reachable, or raise --start-timeout");
  }));
  const int port = config_.ssh_port > 0 ? config_.ssh_port : 22;
  resolver_.async_resolve(
      result_.host, std::to_string(port),
      life_.guard([this](boost::system::error_code ec, const tcp::resolver::results_type& results) {
        if (finished_) return;
        if (ec) {
          fail("cannot resolve host name '" + result_.host + "' (" + ec.message() +
               "); check the name, DNS or /etc/hosts");
          return;
        }
        connect(results);
      }));
}

void HostCheck::connect(const tcp::resolver::results_type& endpoints) {
  const int port = config_.ssh_port > 0 ? config_.ssh_port : 22;
  step_ = "connecting to the ssh port " + std::to_string(port);
  asio::async_connect(socket_, endpoints,
                      life_.guard([this, port](boost::system::error_code ec, const tcp::endpoint&) {
                        if (finished_) return;
                        boost::system::error_code ignored;
                        socket_.close(ignored);
                        if (ec) {
                          std::string why =
                              ec == asio::error::connection_refused
                                  ? "connection refused: is sshd running there? start it, or "
                                    "pass -p PORT if it listens elsewhere"
                                  : ec.message() + "; check the network, firewall and -p PORT";
                          fail("cannot connect to " + result_.host + " port " +
                               std::to_string(port) + " (" + why + ")");
                          return;
                        }
                        run_agent();
                      }));
}

void HostCheck::run_agent() {
  step_ = "running 'ssh " + result_.host + " hvdrun --agent' (key login, checks)";
  std::string connect;
  for (const auto& a : config_.master_addresses) {
    connect += (connect.empty() ? "" : ",") + a + ":" + std::to_string(config_.listener_port);
  }
  double agent_timeout = std::min(5.0, std::max(0.5, remaining_s() - 1.0));
  std::vector<std::string> remote{config_.hvdrun_path,
                                  "--agent",
                                  "--connect",
                                  connect,
                                  "--cwd",
                                  config_.cwd,
                                  "--path",
                                  config_.path_env,
                                  "--program",
                                  config_.program,
                                  "--timeout",
                                  seconds_text(agent_timeout),
                                  "--host",
                                  result_.host};
  if (!config_.state_base.empty())
    remote.insert(remote.end(), {"--state-base", config_.state_base});
  int connect_timeout = std::max(1, static_cast<int>(std::ceil(remaining_s())));
  std::vector<std::string> argv{"ssh", "-T",
                                "-o",  "BatchMode=yes",
                                "-o",  "ConnectTimeout=" + std::to_string(connect_timeout)};
  if (config_.ssh_port > 0) argv.insert(argv.end(), {"-p", std::to_string(config_.ssh_port)});
  if (!config_.ssh_identity.empty()) argv.insert(argv.end(), {"-i", config_.ssh_identity});
  argv.push_back(result_.host);
  argv.push_back(shell_join(remote));
  ssh_ = std::make_unique<Subprocess>(io_, argv, true);
  ssh_->set_stdin(config_.token + "\n");  // the token: the agent's stdin, never argv
  ssh_->on_stdout([this](const std::string& l) { out_ += l + "\n"; });
  ssh_->on_stderr([this](const std::string& l) { err_ += l + "\n"; });
  ssh_->on_exit([this](int status) { agent_done(status); });
  try {
    ssh_->start();
  } catch (const std::exception& e) {
    fail(std::string("cannot start ssh: ") + e.what());
  }
}

void HostCheck::agent_done(int status) {
  if (finished_) return;
  const int rc = exit_code_from_wait_status(status);
  AgentReport r = parse_agent_report(out_);
  result_.report = r;
  if (rc != 0 || !r.complete) {
    fail(explain_ssh_failure(result_.host, config_.ssh_port, rc, err_, config_.hvdrun_path));
    return;
  }
  auto& p = result_.problems;
  if (!r.program_found) {
    p.push_back("program '" + config_.program + "' not found on " + result_.host + " (" +
                (config_.program[0] == '/' ? std::string("no such executable file")
                 : config_.program.find('/') != std::string::npos
                     ? "looked in " + config_.cwd
                     : std::string("looked in the PATH forwarded from this machine")) +
                "); copy it to the same path on every host");
  }
  if (!config_.state_base.empty() && r.state_base_checked) {
    const std::string warning =
        remote_base_warning(result_.host, config_.state_base, r.state_base_free);
    if (!warning.empty()) std::cerr << warning << "\n" << std::flush;
  }
  if (!config_.state_base.empty() && r.state_base_checked && !r.state_base_problem.empty()) {
    p.push_back("the elastic state base on " + result_.host + ": " + r.state_base_problem +
                "; create it there (as on every host) or choose another with "
                "--elastic-state-dir");
  }
  std::string mpi = open_mpi_problem(r, config_.mpi, result_.host);
  if (!mpi.empty()) p.push_back(mpi);
  if (r.reached.empty()) {
    std::string tried;
    for (const auto& u : r.unreached) tried += (tried.empty() ? "" : "; ") + u;
    p.push_back(result_.host + " cannot connect back to this machine on port " +
                std::to_string(config_.listener_port) + " (" +
                (tried.empty() ? std::string("no address to try") : tried) +
                "); allow incoming TCP from it or choose a network with --network-interface");
  }
  finish();
}

void HostCheck::fail(const std::string& problem) {
  if (finished_) return;
  result_.problems.push_back(problem);
  finish();
}

void HostCheck::finish() {
  if (finished_) return;
  finished_ = true;
  result_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  deadline_.cancel();
  resolver_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
  if (ssh_ && ssh_->running()) ssh_->signal(SIGKILL);
}

}  // namespace hvd::runner::detail
