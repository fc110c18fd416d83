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
        rank_ = m->rank;
        host_ = m->host;
        wrapper_ = true;
        server_.sessions_[id_] = shared_from_this();
        if (h.on_hello) h.on_hello(*m);
        return true;
      case MessageKind::kBeat:
        if (h.on_beat) h.on_beat(*m);
        return true;
      case MessageKind::kDone:
        if (h.on_done) h.on_done(*m);
        return true;
      case MessageKind::kExit:
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
    server_.sessions_.erase(id_);
    if (server_.handlers_.on_close) server_.handlers_.on_close(rank_, host_, exited_);
  }

  ControlServer& server_;
  int id_;
  tcp::socket socket_;
  asio::streambuf buf_;
  int rank_ = -1;
  std::string host_;
  bool wrapper_ = false;
  bool exited_ = false;
};

ControlServer::ControlServer(asio::io_context& io, std::string token)
    : token_(std::move(token)), acceptor_(io) {}

ControlServer::~ControlServer() { stop(); }

void ControlServer::start() {
  tcp::endpoint ep(tcp::v4(), 0);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(ep);
  acceptor_.listen(1024);
  port_ = acceptor_.local_endpoint().port();
  accept();
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
  auto sessions = sessions_;
  for (auto& [id, s] : sessions) s->close();
}

}  // namespace hvd::runner
