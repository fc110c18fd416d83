// SPDX-License-Identifier: Apache-2.0
// Peer liveness over a TCP star rooted at rank 0 (see peer_monitor.h).
#include "hvd/ops/peer_monitor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "hvd/core/logging.h"
#include "hvd/ops/mpi_util.h"

namespace hvd::ops {
namespace {

constexpr int kConnectTimeoutMs = 3000;

void keepalive(int fd) {
  int on = 1, idle = 10, intvl = 2, cnt = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads one '\n'-terminated line within the timeout.
bool read_line(int fd, std::string* line, int timeout_ms) {
  line->clear();
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char c;
  while (true) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    end - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) return false;
    if (::recv(fd, &c, 1, 0) != 1) return false;
    if (c == '\n') return true;
    *line += c;
  }
}

std::vector<std::string> local_ipv4() {
  std::vector<std::string> out = {"127.0.0.1"};
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    if (std::string(buf) != "127.0.0.1") out.push_back(buf);
  }
  freeifaddrs(ifs);
  return out;
}

int connect_to(const std::string& ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (::poll(&p, 1, kConnectTimeoutMs) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
      rc = 0;
    }
  }
  if (rc != 0) {
    ::close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fl);
  return fd;
}

}  // namespace

PeerMonitor::~PeerMonitor() { stop(); }

Status PeerMonitor::start(MPI_Comm comm, const std::string& host) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  host_ = host;
  if (::pipe(wake_) != 0) return internal_error("peer monitor: pipe() failed");

  // Rank 0 listens and publishes "port pid host ip1 ip2 ..." (its pid and host name the rank
  // in the other ranks' report should it die).
  int listener = -1;
  std::string announce;
  if (rank_ == 0) {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(a);
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(listener, 128) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      announce = "0";
    } else {
      announce = std::to_string(ntohs(a.sin_port)) + " " + std::to_string(::getpid()) + " " +
                 (host.empty() || host.find(' ') != std::string::npos ? "?" : host);
      for (const auto& ip : local_ipv4()) announce += " " + ip;
    }
  }
  int n = static_cast<int>(announce.size());
  HVD_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, 0, comm));
  announce.resize(static_cast<size_t>(n));
  HVD_MPI_CHECK(MPI_Bcast(announce.data(), n, MPI_CHAR, 0, comm));

  int ok = 1;
  if (rank_ != 0) {
    std::istringstream in(announce);
    int port = 0;
    long root_pid = 0;
    std::string root_host;
    in >> port;
    if (port > 0) in >> root_pid >> root_host;
    std::string ip;
    int fd = -1;
    while (port > 0 && fd < 0 && in >> ip) fd = connect_to(ip, port);
    if (fd >= 0) {
      keepalive(fd);
      ok = send_all(fd,
                    std::to_string(rank_) + " " + std::to_string(::getpid()) + " " + host + "\n");
      peers_.push_back(Peer{fd, 0, root_host, root_pid, false, ""});
    } else {
      ok = 0;
    }
  } else if (announce != "0") {
    for (int i = 1; i < size_; ++i) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, kConnectTimeoutMs * 3) != 1) {
        ok = 0;
        break;
      }
      int fd = ::accept(listener, nullptr, nullptr);
      std::string hello;
      if (fd < 0 || !read_line(fd, &hello, kConnectTimeoutMs)) {
        ok = 0;
        break;
      }
      keepalive(fd);
      Peer p2;
      p2.fd = fd;
      std::istringstream hs(hello);
      hs >> p2.rank >> p2.pid >> p2.host;
      peers_.push_back(p2);
    }
  } else {
    ok = 0;
  }
  if (listener >= 0) ::close(listener);
  int all_ok = 0;
  HVD_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
  if (!all_ok) {
    for (auto& p : peers_) ::close(p.fd);
    peers_.clear();
    if (rank_ == 0) {
      HVD_LOG(Warning) << "peer monitor could not connect every rank to rank 0; a rank that dies "
                          "will not be reported (set HVD_PEER_MONITOR=0 to silence this)";
    }
    return Status::OK();
  }
  thread_ = std::thread([this] { watch(); });
  return Status::OK();
}

void PeerMonitor::on_failure(std::function<void(const Status&)> cb) {
  std::lock_guard<std::mutex> lk(mu_);
  callback_ = std::move(cb);
  if (!failure_.ok() && callback_) callback_(failure_);
}

Status PeerMonitor::failure() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failure_;
}

void PeerMonitor::fail(const Status& s) {
  std::function<void(const Status&)> cb;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!failure_.ok()) return;
    failure_ = s;
    cb = callback_;
  }
  HVD_LOG(Error) << s.message();
  if (cb) cb(s);
}

void PeerMonitor::watch() {
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({wake_[0], POLLIN, 0});
    for (auto& p : peers_) fds.push_back({p.fd, static_cast<short>(p.fd >= 0 ? POLLIN : 0), 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) break;  // stop(): say goodbye below
    for (size_t i = 0; i < peers_.size(); ++i) {
      Peer& p = peers_[i];
      if (p.fd < 0 || !fds[i + 1].revents) continue;
      char buf[512];
      ssize_t n = ::recv(p.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        p.inbox.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = p.inbox.find('\n')) != std::string::npos) {
          std::string line = p.inbox.substr(0, nl);
          p.inbox.erase(0, nl + 1);
          if (line == "BYE") p.bye = true;
          if (line.rfind("DEAD ", 0) == 0) fail(peer_failure(line.substr(5)));
        }
        continue;
      }
      ::close(p.fd);
      p.fd = -1;
      if (p.bye) continue;
      std::string who = "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) +
                        " on " + p.host + ")";
      std::string msg = who + " exited or lost its connection without calling hvd::shutdown()";
      if (rank_ == 0) {
        for (auto& q : peers_) {
          if (q.fd >= 0) send_all(q.fd, "DEAD " + msg + "\n");
        }
      }
      fail(peer_failure(msg));
    }
  }
  for (auto& p : peers_) {
    if (p.fd >= 0) send_all(p.fd, "BYE\n");
  }
}

void PeerMonitor::stop() {
  if (thread_.joinable()) {
    char c = 1;
    if (::write(wake_[1], &c, 1) < 0) {
      // the watcher is already gone; nothing to wake
    }
    thread_.join();
  }
  for (auto& p : peers_) {
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
  }
  for (int& fd : wake_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

}  // namespace hvd::ops
