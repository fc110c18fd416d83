// SPDX-License-Identifier: Apache-2.0
// A child process driven by an asio io_context: line-wise stdout/stderr, exit notification.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "hvd/runner/liveness.h"

namespace hvd::runner {

// Runs argv[0] (PATH lookup) with stdin from /dev/null (or a given payload) and stdout/stderr
// piped back line by line; the environment is hvdrun's, plus the variables given to set_env. The
// exit handler runs once, after the child is reaped and its pipes are drained (or 300 ms after
// reaping when a descendant keeps a pipe open). Not copyable. May be destroyed at any time (a
// running child is killed): its handlers still queued on the io_context then do nothing, and its
// line and exit handlers are not called.
class Subprocess {
 public:
  using LineHandler = std::function<void(const std::string&)>;
  using ExitHandler = std::function<void(int wait_status)>;

  Subprocess(boost::asio::io_context& io, std::vector<std::string> argv, bool new_process_group);
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();  // SIGKILLs a child still running

  void on_stdout(LineHandler h) { out_.handler = std::move(h); }
  void on_stderr(LineHandler h) { err_.handler = std::move(h); }
  void on_exit(ExitHandler h) { exit_handler_ = std::move(h); }

  // Before start(): NAME=VALUE pairs set (or replaced) in the child's environment only, the
  // channel for a job's secrets (never argv, which every user of the host can read).
  void set_env(std::vector<std::pair<std::string, std::string>> vars) { env_ = std::move(vars); }

  // Before start(): the child's stdin is a pipe that holds `data` and then ends (at most 64 KiB,
  // a pipe's buffer, so writing it never blocks), instead of /dev/null.
  void set_stdin(std::string data) { stdin_data_ = std::move(data); }

  // Forks and execs; throws std::system_error when fork/pipe fail. A failed exec shows as
  // exit status 127 with a message on stderr.
  void start();

  // Sends `sig` to the child (its whole process group when started in a new group).
  void signal(int sig);

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !reaped_; }

 private:
  struct Pipe {
    explicit Pipe(boost::asio::io_context& io) : stream(io) {}
    boost::asio::posix::stream_descriptor stream;
    std::string partial;
    char buf[4096];
    LineHandler handler;
    bool open = false;
  };
  void read_some(Pipe& p);
  void poll_exit();
  void maybe_finish();

  std::vector<std::string> argv_;
  std::vector<std::pair<std::string, std::string>> env_;
  std::string stdin_data_;
  bool new_group_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  bool finished_ = false;
  int status_ = 0;
  Pipe out_;
  Pipe err_;
  boost::asio::steady_timer poll_timer_;
  boost::asio::steady_timer drain_timer_;
  ExitHandler exit_handler_;
  Liveness life_;  // guards every handler given to the io_context
};

}  // namespace hvd::runner
