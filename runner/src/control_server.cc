// SPDX-License-Identifier: Apache-2.0
// The master's listener: agent connect-backs and rank wrapper sessions (protocol in wire.h).
#include "hvd/runner/control_server.h"

#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <istream>

namespace hvd::runner {
namespace asio = boost::asio;
using asio::ip::tcp;

class ControlServer::Session : public std::enable_shared_from_this<ControlServer::Session> {
 public:
  Session(ControlServer& server, int id, tcp::socket socket)
      : server_(server), id_(id), socket_(std::move(socket)) {}

  void start() { read_line(); }

  void send(const std::string& line) {
    auto data = std::make_shared<std::string>(line + "\n");
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(*data),
                      [self, data](boost::system::error_code, std::size_t) {});
  }

  void close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

  int generation() const { return generation_; }

 private:
  void read_line() {
    auto self = shared_from_this();
    asio::async_read_until(socket_, buf_, '\n', [self](boost::system::error_code ec, std::size_t) {
      if (ec) {
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
    });
  }

  // Returns false to drop the connection.
  bool handle(const std::string& line) {
    auto m = parse_message(line);
    if (!m || m->token != server_.token_) return false;  // not ours
    auto& h = server_.handlers_;
    switch (m->kind) {
      case MessageKind::kAgent:
        send(format_message({MessageKind::kOk, m->token, "", -1, 0}));
        return true;  // the agent closes
      case MessageKind::kHello:
        if (wrapper_) return false;  // one HELLO per connection
        rank_ = m->rank;
        host_ = m->host;
        generation_ = m->generation;
        wrapper_ = true;
        if (!current()) {  // a leftover of a stopped generation's mpirun: stop it, ignore it
          server_.stale_[id_] = shared_from_this();
          send(format_message({MessageKind::kKill, "", "", -1, 0}));
          return true;
        }
        server_.sessions_[id_] = shared_from_this();
        if (h.on_hello) h.on_hello(*m);
        return true;
      case MessageKind::kBeat:
        if (wrapper_ && current() && h.on_beat) h.on_beat(*m);
        return true;
      case MessageKind::kDone:
        if (wrapper_ && current() && h.on_done) h.on_done(*m);
        return true;
      case MessageKind::kExit:
        if (!wrapper_ || !current()) return true;
        exited_ = true;
        if (h.on_exit) h.on_exit(*m);
        return true;
      default:
        return false;
    }
  }

  void finish() {
    close();
    if (!wrapper_) return;
    wrapper_ = false;
    auto keep = shared_from_this();
    server_.stale_.erase(id_);
    if (server_.sessions_.erase(id_) == 0 || !current()) return;
    if (server_.handlers_.on_close) server_.handlers_.on_close(rank_, host_, exited_);
  }

  bool current() const { return generation_ == server_.generation_; }

  ControlServer& server_;
  int id_;
  tcp::socket socket_;
  asio::streambuf buf_;
  int rank_ = -1;
  std::string host_;
  int generation_ = 0;
  bool wrapper_ = false;
  bool exited_ = false;
};

ControlServer::ControlServer(asio::io_context& io, std::string token)
    : token_(std::move(token)), acceptor_(io), ping_timer_(io) {}

ControlServer::~ControlServer() { stop(); }

void ControlServer::start() {
  tcp::endpoint ep(tcp::v4(), 0);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(ep);
  acceptor_.listen(1024);
  port_ = acceptor_.local_endpoint().port();
  accept();
  ping();
}

void ControlServer::ping() {
  ping_timer_.expires_after(std::chrono::seconds(1));
  ping_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || !acceptor_.is_open()) return;
    const std::string line = format_message({MessageKind::kPing, "", "", -1, 0});
    for (auto& [id, s] : sessions_) s->send(line);
    for (auto& [id, s] : stale_) s->send(line);
    ping();
  });
}

void ControlServer::set_generation(int generation) {
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

void ControlServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(*this, next_id_++, std::move(socket))->start();
    }
    accept();
  });
}

void ControlServer::broadcast(MessageKind kind) { broadcast(Message{kind, "", "", -1, 0}); }

void ControlServer::broadcast(const Message& m) {
  const std::string line = format_message(m);
  for (auto& [id, s] : sessions_) s->send(line);
}

void ControlServer::stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  ping_timer_.cancel();
  auto sessions = sessions_;
  for (auto& [id, s] : sessions) s->close();
  auto stale = stale_;
  for (auto& [id, s] : stale) s->close();
}

}  // namespace hvd::runner
