// SPDX-License-Identifier: Apache-2.0
// --host-discovery-script polling (discovery.h).
#include "discovery.h"

#include <csignal>
#include <iostream>

#include "hvd/runner/elastic_hosts.h"
#include "hvd/runner/wire.h"

namespace hvd::runner {

HostDiscovery::HostDiscovery(boost::asio::io_context& io, std::string script, int default_slots)
    : io_(io), script_(std::move(script)), default_slots_(default_slots), timer_(io) {}

void HostDiscovery::start() {
  launch();
  timer_.expires_after(std::chrono::seconds(1));
  timer_.async_wait(life_.guard([this](boost::system::error_code ec) {
    if (!ec) tick();
  }));
}

void HostDiscovery::tick() {
  if (busy_) {  // until its exit handler ran: reaped is not enough (its output may be unread)
    if (std::chrono::steady_clock::now() - started_ > std::chrono::seconds(30)) {
      proc_->signal(SIGKILL);
    }
  } else {
    launch();
  }
  timer_.expires_after(std::chrono::seconds(1));
  timer_.async_wait(life_.guard([this](boost::system::error_code ec) {
    if (!ec) tick();
  }));
}

void HostDiscovery::launch() {
  proc_ =
      std::make_unique<Subprocess>(io_, std::vector<std::string>{"/bin/sh", "-c", script_}, true);
  output_.clear();
  started_ = std::chrono::steady_clock::now();
  proc_->on_stdout([this](const std::string& line) { output_ += line + "\n"; });
  proc_->on_stderr([](const std::string& line) {
    std::cerr << "hvdrun: host discovery script: " << line << "\n";
  });
  proc_->on_exit([this](int status) {
    busy_ = false;
    ++runs_;
    const int code = exit_code_from_wait_status(status);
    std::string problem;
    DiscoveredHosts d;
    if (code != 0) {
      problem = "failed (" + describe_exit_code(code) + ")";
    } else {
      d = parse_discovery_output(output_, default_slots_);
      if (!d.error.empty()) problem = "printed a bad " + d.error;
    }
    if (!problem.empty()) {
      if (problem != last_problem_) {
        std::cerr << "hvdrun: elastic: --host-discovery-script '" << script_ << "' " << problem
                  << "; keeping the previous hosts\n";
      }
      last_problem_ = problem;
      return;
    }
    last_problem_.clear();
    hosts_ = std::move(d.hosts);
  });
  try {
    proc_->start();
    busy_ = true;
  } catch (const std::exception& e) {
    std::cerr << "hvdrun: elastic: cannot run --host-discovery-script: " << e.what() << "\n";
    proc_.reset();
  }
}

}  // namespace hvd::runner
