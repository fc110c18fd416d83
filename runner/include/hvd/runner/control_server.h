// SPDX-License-Identifier: Apache-2.0
// The master's TCP listener for agent connect-backs and rank wrappers (protocol in wire.h).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hvd/runner/liveness.h"
#include "hvd/runner/wire.h"

namespace hvd::runner {

// True when `given` equals `expected` (the job token). The time taken depends on the lengths
// only, never on where the first differing character is: no early exit.
bool tokens_equal(const std::string& given, const std::string& expected);

// What one connection may cost hvdrun. Anyone who can reach the listener can connect, so every
// cost before authentication is bounded, and so is every wrapper's.
struct ControlLimits {
  // A connection whose first line is not AGENT or HELLO with the job token by then is closed.
  // An agent's connection is closed at this deadline too (it needs one exchange).
  std::chrono::milliseconds auth_deadline{10000};
  // Connections that have not authenticated yet, at most, open at once: a new one closes the
  // oldest of them (so a flood cannot keep out a wrapper that says HELLO at once).
  std::size_t max_unauthenticated = 256;
  // The longest line read, in bytes, newline included, before authentication and after: a
  // connection that sends a longer one is closed. This is all it buffers before authenticating.
  std::size_t max_line_bytes = 4096;
  // Bytes waiting to be written to one connection (the socket takes one write at a time).
  // PING and HOSTS replace a copy still waiting; beyond this, the wrapper cannot keep up: its
  // connection is closed and reported like a lost wrapper (on_close with exited = false).
  std::size_t max_queued_bytes = 64 * 1024;
};

// Listens on the given IPv4 addresses only (never the wildcard), one port for all of them;
// checks the job token, answers agents with OK and keeps wrapper connections open to report
// their rank's exit and to send TERM/KILL. Sends PING to every wrapper each second (its
// heartbeat timeout). A wrapper of another generation than the current one (set_generation; a
// leftover of a stopped mpirun) is told KILL, and its messages and its connection's end reach
// no handler and count in no open_wrappers(). ControlLimits bounds what each connection costs.
// An accept that fails for lack of descriptors or memory closes the oldest unauthenticated
// connection, or waits 100 ms when there is none, and accepting goes on.
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

  ControlServer(boost::asio::io_context& io, std::string token, ControlLimits limits = {});
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Listens on `addresses` (dotted IPv4, e.g. {"127.0.0.1"}), all on one ephemeral port, and
  // starts accepting. When another process holds the chosen port on one of the addresses, a new
  // port is tried (20 times at most). Throws std::invalid_argument for an address that is not
  // IPv4 or is 0.0.0.0, boost::system::system_error when it cannot listen.
  void start(const std::vector<std::string>& addresses = {"127.0.0.1"});

  // From now on listens on exactly `addresses` (after start(), on port()): binds those not
  // bound yet, closes the listeners of the others (connections they accepted stay open).
  // Returns "ADDRESS:PORT (why)" for each address that could not be bound (another process took
  // that port there meanwhile); the others listen.
  std::vector<std::string> listen_on(const std::vector<std::string>& addresses);

  // The addresses listening now, in the order given.
  std::vector<std::string> addresses() const;
  // "127.0.0.1:PORT, 10.0.0.5:PORT": what listens now.
  std::string describe() const;

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

  // Connections open that have not authenticated yet.
  std::size_t unauthenticated() const { return pending_.size(); }

  // Stops accepting and closes every connection.
  void stop();

 private:
  class Session;
  struct Listener;
  std::shared_ptr<Listener> open_listener(const std::string& address, unsigned short port);
  void accept(const std::shared_ptr<Listener>& l);
  void admit(boost::asio::ip::tcp::socket socket);
  bool close_oldest_unauthenticated();
  void ping();

  boost::asio::io_context& io_;
  std::string token_;
  ControlLimits limits_;
  std::vector<std::shared_ptr<Listener>> listeners_;
  unsigned short port_ = 0;
  bool running_ = false;
  Handlers handlers_;
  int next_id_ = 0;
  int generation_ = 0;
  std::map<int, std::shared_ptr<Session>> pending_;   // not authenticated yet, oldest first
  std::map<int, std::shared_ptr<Session>> sessions_;  // wrappers of the current generation
  std::map<int, std::shared_ptr<Session>> stale_;     // wrappers of other generations
  // Wrappers of the current generation that reported EXIT and wait for hvdrun to close.
  std::map<int, std::shared_ptr<Session>> lingering_;
  void release_lingering();  // closes them: no wrapper of the generation is left
  boost::asio::steady_timer ping_timer_;
  Liveness life_;  // handlers left on io_ after this server is gone do nothing
};

}  // namespace hvd::runner
