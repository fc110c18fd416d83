// SPDX-License-Identifier: Apache-2.0
// The master's listener: agent connect-backs and rank wrapper sessions (protocol in wire.h).
// Every connection starts unauthenticated: its first line must be AGENT or HELLO with the job
// token within the deadline, and it may buffer one line of max_line_bytes at most. Writes go
// through one queue per connection, one async_write at a time (control_server.h).
#include "hvd/runner/control_server.h"

#include <algorithm>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <deque>
#include <iostream>
#include <istream>
#include <stdexcept>
#include <vector>

#include "hvd/runner/liveness.h"

namespace hvd::runner {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

bool tokens_equal(const std::string& given, const std::string& expected) {
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

struct ControlServer::Listener {
  Listener(asio::io_context& io, std::string address)
      : address(std::move(address)), acceptor(io), retry(io) {}
  void close() {
    error_code ignored;
    acceptor.close(ignored);
    retry.cancel();
  }
  std::string address;
  tcp::acceptor acceptor;
  asio::steady_timer retry;  // the pause after an accept failed for lack of descriptors
};

class ControlServer::Session : public std::enable_shared_from_this<ControlServer::Session> {
 public:
  Session(ControlServer& server, int id, tcp::socket socket)
      : server_(server),
        id_(id),
        socket_(std::move(socket)),
        deadline_(server.io_),
        buf_(server.limits_.max_line_bytes) {}

  void start() {
    deadline_.expires_after(server_.limits_.auth_deadline);
    deadline_.async_wait(server_.life_.guard([self = shared_from_this()](error_code ec) {
      if (!ec && !self->wrapper_) self->finish();  // silent, or an agent done with its exchange
    }));
    read_line();
  }

  // Queues `line` (one message, no newline) behind what is being written.
  void send(MessageKind kind, const std::string& line) {
    if (closed_ || write_failed_) return;
    if (kind == MessageKind::kPing || kind == MessageKind::kHosts) {
      // A copy still waiting (not being written) is replaced: only the latest counts.
      for (std::size_t i = in_flight_; i < queue_.size(); ++i) {
        if (queue_[i].kind != kind) continue;
        queued_bytes_ -= queue_[i].data.size();
        queue_[i].data = line + "\n";
        queued_bytes_ += queue_[i].data.size();
        return;
      }
    }
    if (queued_bytes_ + line.size() + 1 > server_.limits_.max_queued_bytes) {
      if (wrapper_) {
        std::cerr << "hvdrun: rank " << rank_ << " on host " << host_ << " has not taken "
                  << queued_bytes_ << " bytes of hvdrun's messages (its wrapper is stopped or "
                  << "its network stalled); closing its connection, the rank counts as lost\n"
                  << std::flush;
      }
      close();  // the pending read ends with operation_aborted: finish() reports it
      return;
    }
    queue_.push_back({kind, line + "\n"});
    queued_bytes_ += queue_.back().data.size();
    if (in_flight_ == 0) write_next();
  }

  void close() {
    closed_ = true;
    error_code ignored;
    socket_.close(ignored);
    deadline_.cancel();
  }

  int generation() const { return generation_; }

 private:
  struct Outgoing {
    MessageKind kind;
    std::string data;
  };

  // A write failed: the wrapper is gone (it reset the connection) or unreachable. What it sent
  // before may still wait unread (its EXIT, written just before it ended): the read side goes on
  // until it ends by itself, then finish() reports the wrapper. Closing here would drop that
  // EXIT and count an exited rank as lost. A read that does not end (a peer that neither reads
  // nor closes) is cut after kWriteFailedGrace.
  void write_failed() {
    write_failed_ = true;
    queued_bytes_ = 0;
    queue_.clear();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    deadline_.expires_after(kWriteFailedGrace);
    deadline_.async_wait(server_.life_.guard([self = shared_from_this()](error_code ec) {
      if (!ec) self->close();
    }));
  }
  static constexpr std::chrono::seconds kWriteFailedGrace{2};

  // Writes everything queued in one async_write; what is queued meanwhile waits for it.
  void write_next() {
    std::vector<asio::const_buffer> buffers;
    for (const auto& o : queue_) buffers.push_back(asio::buffer(o.data));
    in_flight_ = queue_.size();
    asio::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, std::size_t) {
      for (; self->in_flight_ > 0; --self->in_flight_) {
        self->queued_bytes_ -= self->queue_.front().data.size();
        self->queue_.pop_front();
      }
      if (ec) {
        self->write_failed();
        return;
      }
      if (!self->queue_.empty() && !self->closed_ && !self->write_failed_) self->write_next();
    });
  }

  void read_line() {
    asio::async_read_until(
        socket_, buf_, '\n',
        server_.life_.guard([self = shared_from_this()](error_code ec, std::size_t) {
          // not_found: a line longer than max_line_bytes.
          if (ec || self->closed_) {
            self->finish();
            return;
          }
          std::istream in(&self->buf_);
          std::string line;
          std::getline(in, line);
          if (!self->handle(line)) {
            self->finish();
            return;
          }
          self->read_line();
        }));
  }

  // Leaves the unauthenticated ones: an agent or a wrapper.
  void authenticated() {
    authenticated_ = true;
    server_.pending_.erase(id_);
  }

  // Returns false to drop the connection.
  bool handle(const std::string& line) {
    auto m = parse_message(line);
    if (!m || !tokens_equal(m->token, server_.token_)) return false;  // not ours
    auto& h = server_.handlers_;
    switch (m->kind) {
      case MessageKind::kAgent:
        if (authenticated_) return false;
        authenticated();
        send(MessageKind::kOk, format_message({MessageKind::kOk, m->token, "", -1, 0}));
        return true;  // the agent closes (or the deadline does)
      case MessageKind::kHello:
        if (authenticated_) return false;  // one HELLO per connection, none after AGENT
        authenticated();
        deadline_.cancel();
        rank_ = m->rank;
        host_ = m->host;
        generation_ = m->generation;
        wrapper_ = true;
        if (!current()) {  // a leftover of a stopped generation's mpirun: stop it, ignore it
          server_.stale_[id_] = shared_from_this();
          send(MessageKind::kKill, format_message({MessageKind::kKill, "", "", -1, 0}));
          return true;
        }
        server_.sessions_[id_] = shared_from_this();
        if (h.on_hello) h.on_hello(*m);
        return true;
      case MessageKind::kBeat:
        if (wrapper_ && current() && h.on_beat) h.on_beat(*m);
        return wrapper_;
      case MessageKind::kDone:
        if (wrapper_ && current() && h.on_done) h.on_done(*m);
        return wrapper_;
      case MessageKind::kExit:
        if (!wrapper_ || !current()) return wrapper_;
        exited_ = true;
        if (h.on_exit) h.on_exit(*m);
        return true;
      default:
        return false;
    }
  }

  void finish() {
    // A current wrapper that reported its EXIT and then closed its sending side waits for
    // hvdrun to close (rank_wrapper.cc): its socket stays open (lingering_) until no wrapper of
    // the generation is left, so no wrapper ends, and no mpirun kills the others for it, before
    // every rank's exit code is in.
    const bool linger =
        exited_ && !closed_ && wrapper_ && current() && server_.sessions_.count(id_) > 0;
    if (!linger) close();
    server_.pending_.erase(id_);
    if (!wrapper_) return;
    wrapper_ = false;
    auto keep = shared_from_this();
    server_.stale_.erase(id_);
    if (server_.sessions_.erase(id_) == 0 || !current()) return;
    if (linger) server_.lingering_[id_] = keep;
    if (server_.sessions_.empty()) server_.release_lingering();
    if (server_.handlers_.on_close) server_.handlers_.on_close(rank_, host_, exited_);
  }

  bool current() const { return generation_ == server_.generation_; }

  ControlServer& server_;
  int id_;
  tcp::socket socket_;
  asio::steady_timer deadline_;  // authentication's
  asio::streambuf buf_;
  std::deque<Outgoing> queue_;  // the first in_flight_ are being written
  std::size_t queued_bytes_ = 0;
  std::size_t in_flight_ = 0;
  bool closed_ = false;
  bool write_failed_ = false;  // see write_failed()
  bool authenticated_ = false;
  int rank_ = -1;
  std::string host_;
  int generation_ = 0;
  bool wrapper_ = false;
  bool exited_ = false;
};

ControlServer::ControlServer(asio::io_context& io, std::string token, ControlLimits limits)
    : io_(io), token_(std::move(token)), limits_(limits), ping_timer_(io) {}

ControlServer::~ControlServer() { stop(); }

std::shared_ptr<ControlServer::Listener> ControlServer::open_listener(const std::string& address,
                                                                      unsigned short port) {
  error_code ec;
  const auto ip = asio::ip::make_address_v4(address, ec);
  if (ec || ip.is_unspecified()) {
    throw std::invalid_argument("hvdrun's control server cannot listen on '" + address +
                                "': give an IPv4 address of this machine (0.0.0.0, every "
                                "network, is refused)");
  }
  auto l = std::make_shared<Listener>(io_, address);
  const tcp::endpoint ep(ip, port);
  l->acceptor.open(ep.protocol());
  // Rebinding a port whose earlier connections linger in TIME_WAIT (listen_on() again).
  l->acceptor.set_option(tcp::acceptor::reuse_address(true));
  l->acceptor.bind(ep);
  l->acceptor.listen(1024);
  return l;
}

namespace {

std::vector<std::string> unique_in_order(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& a : in) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  return out;
}

}  // namespace

void ControlServer::start(const std::vector<std::string>& addresses) {
  const auto wanted = unique_in_order(addresses);
  if (wanted.empty()) throw std::invalid_argument("hvdrun's control server: no address given");
  constexpr int kTries = 20;
  for (int attempt = 1;; ++attempt) {
    std::vector<std::shared_ptr<Listener>> opened;
    unsigned short port = 0;
    try {
      for (const auto& a : wanted) {
        opened.push_back(open_listener(a, port));
        if (port == 0) port = opened.back()->acceptor.local_endpoint().port();
      }
    } catch (const boost::system::system_error& e) {
      // Another process holds this port on one of the addresses: all of them on a new one.
      if (e.code() != asio::error::address_in_use || port == 0 || attempt == kTries) throw;
      for (auto& l : opened) l->close();
      continue;
    }
    listeners_ = std::move(opened);
    port_ = port;
    break;
  }
  running_ = true;
  for (auto& l : listeners_) accept(l);
  ping();
}

std::vector<std::string> ControlServer::listen_on(const std::vector<std::string>& addresses) {
  std::vector<std::string> failed;
  std::vector<std::shared_ptr<Listener>> next;
  for (const auto& a : unique_in_order(addresses)) {
    auto it = std::find_if(listeners_.begin(), listeners_.end(),
                           [&](const std::shared_ptr<Listener>& l) { return l->address == a; });
    if (it != listeners_.end()) {
      next.push_back(*it);
      continue;
    }
    try {
      next.push_back(open_listener(a, port_));
      if (running_) accept(next.back());
    } catch (const boost::system::system_error& e) {
      failed.push_back(a + ":" + std::to_string(port_) + " (" + e.code().message() + ")");
    }
  }
  for (auto& l : listeners_) {
    if (std::find(next.begin(), next.end(), l) == next.end()) l->close();
  }
  listeners_ = std::move(next);
  return failed;
}

std::vector<std::string> ControlServer::addresses() const {
  std::vector<std::string> out;
  for (const auto& l : listeners_) out.push_back(l->address);
  return out;
}

std::string ControlServer::describe() const {
  std::string out;
  for (const auto& l : listeners_) {
    out += (out.empty() ? "" : ", ") + l->address + ":" + std::to_string(port_);
  }
  return out.empty() ? "nothing" : out;
}

void ControlServer::ping() {
  ping_timer_.expires_after(std::chrono::seconds(1));
  ping_timer_.async_wait(life_.guard([this](error_code ec) {
    if (ec || !running_) return;
    const std::string line = format_message({MessageKind::kPing, "", "", -1, 0});
    for (auto& [id, s] : sessions_) s->send(MessageKind::kPing, line);
    for (auto& [id, s] : stale_) s->send(MessageKind::kPing, line);
    ping();
  }));
}

void ControlServer::release_lingering() {
  auto copy = std::move(lingering_);
  lingering_.clear();
  for (auto& [id, s] : copy) s->close();
}

void ControlServer::set_generation(int generation) {
  release_lingering();
  generation_ = generation;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second->generation() != generation) {
      stale_[it->first] = it->second;
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

void ControlServer::accept(const std::shared_ptr<Listener>& l) {
  l->acceptor.async_accept(life_.guard([this, l](error_code ec, tcp::socket socket) {
    if (!running_ || !l->acceptor.is_open() || ec == asio::error::operation_aborted) return;
    if (!ec) {
      admit(std::move(socket));
      accept(l);
      return;
    }
    if (ec == asio::error::connection_aborted || ec == asio::error::connection_reset) {
      accept(l);  // that connection ended before it was accepted: the next one
      return;
    }
    const bool out_of_resources =
        ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
        ec == asio::error::no_memory || ec == error_code(ENFILE, boost::system::system_category());
    if (out_of_resources && close_oldest_unauthenticated()) {
      accept(l);  // a descriptor is free again
      return;
    }
    // Nothing to free (or an unexpected error): try again later, never in a busy loop.
    l->retry.expires_after(std::chrono::milliseconds(100));
    l->retry.async_wait(life_.guard([this, l](error_code ec2) {
      if (!ec2 && running_ && l->acceptor.is_open()) accept(l);
    }));
  }));
}

bool ControlServer::close_oldest_unauthenticated() {
  if (pending_.empty()) return false;
  auto oldest = pending_.begin()->second;
  pending_.erase(pending_.begin());
  oldest->close();
  return true;
}

void ControlServer::admit(tcp::socket socket) {
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  // The kernel's share of what waits for a peer that does not read is bounded too (messages are
  // a few bytes; the kernel doubles this).
  socket.set_option(asio::socket_base::send_buffer_size(64 * 1024), ignored);
  while (pending_.size() >= std::max<std::size_t>(limits_.max_unauthenticated, 1)) {
    close_oldest_unauthenticated();
  }
  auto s = std::make_shared<Session>(*this, next_id_++, std::move(socket));
  pending_[next_id_ - 1] = s;
  s->start();
}

void ControlServer::broadcast(MessageKind kind) { broadcast(Message{kind, "", "", -1, 0}); }

void ControlServer::broadcast(const Message& m) {
  const std::string line = format_message(m);
  for (auto& [id, s] : sessions_) s->send(m.kind, line);
}

void ControlServer::stop() {
  running_ = false;
  for (auto& l : listeners_) l->close();
  ping_timer_.cancel();
  for (auto* group : {&pending_, &sessions_, &stale_, &lingering_}) {
    auto copy = *group;
    for (auto& [id, s] : copy) s->close();
  }
}

}  // namespace hvd::runner
