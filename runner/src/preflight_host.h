// SPDX-License-Identifier: Apache-2.0
// One host's preflight as an asio state machine (private to preflight.cc).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "hvd/runner/liveness.h"
#include "hvd/runner/preflight.h"
#include "hvd/runner/subprocess.h"

namespace hvd::runner::detail {

// resolve -> TCP connect to the ssh port -> ssh ... hvdrun --agent; everything bounded by one
// deadline. Writes into `result`; never throws from handlers. May be destroyed at any time: its
// handlers still queued then do nothing.
class HostCheck {
 public:
  HostCheck(boost::asio::io_context& io, const PreflightConfig& config, HostResult& result);
  void start();
  bool finished() const { return finished_; }

 private:
  void connect(const boost::asio::ip::tcp::resolver::results_type& endpoints);
  void run_agent();
  void agent_done(int status);
  void fail(const std::string& problem);
  void finish();
  double remaining_s() const;

  boost::asio::io_context& io_;
  const PreflightConfig& config_;
  HostResult& result_;
  std::chrono::steady_clock::time_point start_;
  boost::asio::steady_timer deadline_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::asio::ip::tcp::socket socket_;
  std::unique_ptr<Subprocess> ssh_;
  std::string out_, err_;
  std::string step_ = "resolving the host name";
  bool finished_ = false;
  Liveness life_;  // guards every handler given to the io_context
};

}  // namespace hvd::runner::detail
