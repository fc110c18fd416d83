// SPDX-License-Identifier: Apache-2.0
// Child processes on an io_context: fork/exec, line-wise pipes, exit by polling waitpid.
#include "hvd/runner/subprocess.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/read.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <system_error>

extern char** environ;

namespace hvd::runner {
namespace asio = boost::asio;
using namespace std::chrono_literals;

Subprocess::Subprocess(asio::io_context& io, std::vector<std::string> argv, bool new_group)
    : argv_(std::move(argv)),
      new_group_(new_group),
      out_(io),
      err_(io),
      poll_timer_(io),
      drain_timer_(io) {}

Subprocess::~Subprocess() {
  if (running()) {
    signal(SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

void Subprocess::start() {
  int out_fds[2], err_fds[2];
  if (pipe2(out_fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category());
  if (pipe2(err_fds, O_CLOEXEC) != 0) {
    close(out_fds[0]);
    close(out_fds[1]);
    throw std::system_error(errno, std::generic_category());
  }
  // stdin: the payload, written now into the pipe's buffer (the child reads it, then EOF).
  int in_fds[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out_fds[0], out_fds[1], err_fds[0], err_fds[1], in_fds[0], in_fds[1]}) {
      if (fd >= 0) close(fd);
    }
  };
  if (!stdin_data_.empty()) {
    if (stdin_data_.size() > 65536 || pipe2(in_fds, O_CLOEXEC) != 0 ||
        write(in_fds[1], stdin_data_.data(), stdin_data_.size()) !=
            static_cast<ssize_t>(stdin_data_.size())) {
      const int e = stdin_data_.size() > 65536 ? E2BIG : errno;
      close_all();
      throw std::system_error(e, std::generic_category(), "stdin pipe");
    }
    close(in_fds[1]);
    in_fds[1] = -1;
  }
  std::vector<char*> argv;
  for (auto& a : argv_) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment, built before fork (the child only calls async-signal-safe functions).
  std::vector<std::string> env_entries;
  if (!env_.empty()) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const bool replaced = std::any_of(env_.begin(), env_.end(), [&](const auto& v) {
        return entry.compare(0, v.first.size() + 1, v.first + "=") == 0;
      });
      if (!replaced) env_entries.push_back(entry);
    }
    for (const auto& [name, value] : env_) env_entries.push_back(name + "=" + value);
  }
  std::vector<char*> envp;
  for (auto& e : env_entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    throw std::system_error(e, std::generic_category(), "fork");
  }
  if (pid == 0) {
    if (new_group_) setpgid(0, 0);
    int in = in_fds[0] >= 0 ? in_fds[0] : open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, 0);
    dup2(out_fds[1], 1);
    dup2(err_fds[1], 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGPIPE, SIG_DFL);
    if (env_.empty()) {
      execvp(argv[0], argv.data());
    } else {
      execvpe(argv[0], argv.data(), envp.data());
    }
    std::string msg = std::string("hvdrun: cannot run ") + argv[0] + ": " + strerror(errno) + "\n";
    (void)!write(2, msg.data(), msg.size());
    _exit(127);
  }
  pid_ = pid;
  if (new_group_) setpgid(pid, pid);  // also here: no race with signal()
  close(out_fds[1]);
  close(err_fds[1]);
  if (in_fds[0] >= 0) close(in_fds[0]);
  out_.stream.assign(out_fds[0]);
  err_.stream.assign(err_fds[0]);
  out_.open = err_.open = true;
  read_some(out_);
  read_some(err_);
  poll_exit();
}

void Subprocess::signal(int sig) {
  if (!running()) return;
  if (new_group_) {
    ::kill(-pid_, sig);
  } else {
    ::kill(pid_, sig);
  }
}

void Subprocess::read_some(Pipe& p) {
  p.stream.async_read_some(asio::buffer(p.buf),
                           life_.guard([this, &p](boost::system::error_code ec, std::size_t n) {
                             if (!ec) {
                               p.partial.append(p.buf, n);
                               size_t nl;
                               while ((nl = p.partial.find('\n')) != std::string::npos) {
                                 std::string line = p.partial.substr(0, nl);
                                 p.partial.erase(0, nl + 1);
                                 if (p.handler) p.handler(line);
                               }
                               read_some(p);
                               return;
                             }
                             if (ec == asio::error::operation_aborted && !p.open) return;
                             if (!p.partial.empty() && p.handler) p.handler(p.partial);
                             p.partial.clear();
                             p.open = false;
                             boost::system::error_code ignored;
                             p.stream.close(ignored);
                             maybe_finish();
                           }));
}

void Subprocess::poll_exit() {
  poll_timer_.expires_after(20ms);
  poll_timer_.async_wait(life_.guard([this](boost::system::error_code ec) {
    if (ec) return;
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
      reaped_ = true;
      status_ = r == pid_ ? status : 0;
      drain_timer_.expires_after(300ms);
      drain_timer_.async_wait(life_.guard([this](boost::system::error_code e) {
        if (e) return;
        for (Pipe* p : {&out_, &err_}) {
          if (p->open) {
            p->open = false;
            boost::system::error_code ignored;
            p->stream.close(ignored);
          }
        }
        maybe_finish();
      }));
      maybe_finish();
      return;
    }
    poll_exit();
  }));
}

void Subprocess::maybe_finish() {
  if (finished_ || !reaped_ || out_.open || err_.open) return;
  finished_ = true;
  drain_timer_.cancel();
  if (exit_handler_) exit_handler_(status_);
}

}  // namespace hvd::runner
