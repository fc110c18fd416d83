// SPDX-License-Identifier: Apache-2.0
// The master's TCP listener for agent connect-backs and rank wrappers (protocol in wire.h).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "hvd/runner/wire.h"

namespace hvd::runner {

// Accepts connections on 0.0.0.0:<ephemeral>, checks the job token, answers agents with OK and
// keeps wrapper connections open to report their rank's exit and to send TERM/KILL. Sends PING
// to every wrapper each second (its heartbeat timeout). A wrapper of another generation than
// the current one (set_generation; a leftover of a stopped mpirun) is told KILL, and its
// messages and its connection's end reach no handler and count in no open_wrappers().
class ControlServer {
 public:
  struct Handlers {
    std::function<void(const Message&)> on_hello;
    std::function<void(const Message&)> on_beat;  // elastic: progress (elastic_watchdog.h)
    std::function<void(const Message&)> on_done;  // elastic: the rank's program completed
    std::function<void(const Message&)> on_exit;
    // A wrapper connection closed; `exited` says whether it had sent EXIT first.
    std::function<void(int rank, const std::string& host, bool exited)> on_close;
  };

  ControlServer(boost::asio::io_context& io, std::string token);
  ~ControlServer();

  // Binds and starts accepting. Throws boost::system::system_error when it cannot listen.
  void start();
  void set_handlers(Handlers h) { handlers_ = std::move(h); }
  unsigned short port() const { return port_; }

  // Sends TERM or KILL to every connected wrapper.
  void broadcast(MessageKind kind);
  // Sends `m` (e.g. HOSTS) to every connected wrapper.
  void broadcast(const Message& m);

  // The generation whose wrappers are served (HELLO's generation; 0 outside elastic mode).
  // Wrappers of the previous ones connected now are ignored from now on.
  void set_generation(int generation);

  // Wrapper connections of the current generation still open.
  std::size_t open_wrappers() const { return sessions_.size(); }

  // Wrapper connections of other generations still open (ignored, pinged only).
  std::size_t stale_wrappers() const { return stale_.size(); }

  // Stops accepting and closes every connection.
  void stop();

 private:
  class Session;
  void accept();
  void ping();

  std::string token_;
  boost::asio::ip::tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  Handlers handlers_;
  int next_id_ = 0;
  int generation_ = 0;
  std::map<int, std::shared_ptr<Session>> sessions_;  // wrappers of the current generation
  std::map<int, std::shared_ptr<Session>> stale_;     // wrappers of other generations
  boost::asio::steady_timer ping_timer_;
};

}  // namespace hvd::runner
