// SPDX-License-Identifier: Apache-2.0
// `hvdrun --rank-wrapper`: what mpirun starts for each rank. It runs the program in its own
// process group, reports HELLO/EXIT to the master and relays TERM/KILL (protocol in wire.h).
// The program dies with the wrapper (PR_SET_PDEATHSIG), and the wrapper stops the program when
// the master's connection drops or the master is silent (no PING) for the heartbeat timeout,
// so neither a dead or frozen master nor a killed orted (Open MPI 5: prted) leaves it behind.
// In elastic mode it also forwards the program's progress reports (HVD_ELASTIC_PROGRESS_FILE,
// polled twice a second) to the master's step watchdog as BEAT lines (elastic_watchdog.h).
// The job token comes in HVD_JOB_TOKEN (mpirun's environment, never argv) and is removed from
// the environment before the program starts. The elastic state directory must be this job's
// own (core/private_dir.h: created 0700 by the first wrapper of the host, then checked with
// lstat); anything else, such as a directory or a symbolic link another user planted under the
// same name, stops the rank with kExitElasticFatal before the program runs. Its files are
// opened with O_NOFOLLOW.
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>

#include "hvd/core/private_dir.h"
#include "hvd/runner/elastic.h"
#include "hvd/runner/launch_command.h"
#include "hvd/runner/local_system.h"
#include "hvd/runner/modes.h"
#include "hvd/runner/state_dir.h"
#include "hvd/runner/wire.h"

namespace hvd::runner {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Writes the EXIT line, then waits for hvdrun to close the connection, at most `limit` (a master
// that neither reads nor closes does not hold the rank's exit for longer). hvdrun closes once no
// wrapper of the generation is left (control_server.cc: lingering_), so this wrapper ends, and
// mpirun learns of its exit and kills the other ranks' wrappers (at once in elastic mode), only
// after every wrapper has reported: before, a rank's exit code could be lost that way (a fatal
// error restarted, a dead rank's host not blacklisted). The sending side is shut down (FIN
// behind the EXIT) and what hvdrun still sends is read and dropped: closing a socket with unread
// data resets the connection and can drop the EXIT line itself.
void send_exit(tcp::socket& socket, const std::string& line, std::chrono::milliseconds limit) {
  boost::system::error_code ec;
  asio::write(socket, asio::buffer(line + "\n"), ec);
  if (ec) return;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return;
  const int fd = socket.native_handle();
  const auto end = std::chrono::steady_clock::now() + limit;
  char drop[512];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;
    const ssize_t n = ::recv(fd, drop, sizeof drop, MSG_DONTWAIT);
    if (n == 0) return;  // hvdrun closed: it read everything before
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
  }
}

int env_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "HVD_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

// Connects to the first master address that answers within `timeout`.
bool connect_master(asio::io_context& io, tcp::socket& socket, const std::string& list,
                    std::string& error) {
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    std::string ep = list.substr(start, comma == std::string::npos ? comma : comma - start);
    start = comma == std::string::npos ? list.size() : comma + 1;
    size_t colon = ep.rfind(':');
    if (colon == std::string::npos) continue;
    boost::system::error_code ec;
    tcp::resolver resolver(io);
    auto eps = resolver.resolve(ep.substr(0, colon), ep.substr(colon + 1), ec);
    if (!ec) {
      bool done = false;
      asio::steady_timer timer(io, std::chrono::seconds(5));
      asio::async_connect(socket, eps, [&](boost::system::error_code e, const tcp::endpoint&) {
        ec = e;
        done = true;
        timer.cancel();
      });
      timer.async_wait([&](boost::system::error_code e) {
        if (!e) socket.close();
      });
      while (!done && io.run_one()) {
      }
      io.restart();
      if (!ec) return true;
    }
    error += (error.empty() ? "" : "; ") + ep + ": " + ec.message();
  }
  return false;
}

// Writes "<seq> <bits>" to `path` through a temporary file renamed over it, so the program
// reads the old content or the new, never a part.
// Files in the state directory: opened with O_NOFOLLOW (core::open_private_file).
void write_hosts_file(const std::string& path, int seq, int bits) {
  const std::string tmp = path + ".tmp";
  const std::string text = std::to_string(seq) + " " + std::to_string(bits) + "\n";
  const int fd = core::open_private_file(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (::close(fd) == 0 && ok) std::rename(tmp.c_str(), path.c_str());
}

// The file's content ("" when it is missing, unreadable or a symbolic link).
std::string read_file(const std::string& path) {
  std::string out;
  const int fd = core::open_private_file(path, O_RDONLY);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// Whether `path` exists as a file of its own (a symbolic link does not count).
bool file_exists(const std::string& path) {
  const int fd = core::open_private_file(path, O_RDONLY);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Elastic mode, once per host (local rank 0): a warning when the state directory's file system
// has less room than the last commit took (the snapshot there, or the size hvdrun saw), so the
// user learns it before the next commit fails. HVD_ELASTIC_LAST_COMMIT_BYTES is the wrapper's
// alone: removed before the program starts.
void warn_if_low_on_space(const std::string& dir, const std::string& host) {
  uint64_t last = 0;
  if (const char* seen = std::getenv(kLastCommitBytesVariable)) {
    last = std::strtoull(seen, nullptr, 10);
  }
  ::unsetenv(kLastCommitBytesVariable);
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (local != nullptr && std::atoi(local) != 0) return;
  struct stat st {};
  if (::lstat((dir + "/" + kSnapshotFileName).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    last = std::max(last, static_cast<uint64_t>(st.st_size));
  }
  const auto free = free_bytes(dir);
  if (last == 0 || !free) return;
  const std::string warning = low_space_warning("host " + host, dir, *free, last);
  if (!warning.empty()) std::cerr << warning << "\n" << std::flush;
}

}  // namespace

int run_rank_wrapper(const std::vector<std::string>& args) {
  // args: --rank-wrapper ADDRS GRACE GENERATION HEARTBEAT_TIMEOUT -- program args...
  constexpr size_t kProgram = 6;
  if (args.size() < kProgram + 1 || args[kProgram - 1] != "--") {
    std::cerr << "hvdrun --rank-wrapper: internal usage error (started by hvdrun only)\n";
    return 2;
  }
  const double grace = std::atof(args[2].c_str());
  // How long send_exit() waits for hvdrun to close: hvdrun's TERM-to-KILL grace for the other
  // ranks, and 2 s more.
  const auto exit_linger = std::chrono::milliseconds(static_cast<long>((grace + 2) * 1000));
  const int generation = std::atoi(args[3].c_str());
  const double heartbeat_timeout = std::atof(args[4].c_str());  // 0 = off
  const std::string& program = args[kProgram];
  const int rank = env_rank();
  const std::string host = local_hostname();
  const char* token_env = std::getenv(kJobTokenVariable);
  if (token_env == nullptr || *token_env == '\0') {
    std::cerr << "hvdrun: rank " << rank << " on " << host << ": no job token in $"
              << kJobTokenVariable << " (hvdrun passes it through mpirun's environment; an mpirun "
              << "that does not forward '-x " << kJobTokenVariable << "' to this host loses it); "
              << "not starting " << program << "\n";
    return 2;
  }
  const std::string token = token_env;
  ::unsetenv(kJobTokenVariable);  // the program never sees the job's token
  setenv("HVD_HOSTNAME", host.c_str(), 1);

  asio::io_context io;
  // Installed before fork so no SIGCHLD/SIGTERM is lost; exec resets them in the child.
  asio::signal_set signals(io, SIGCHLD, SIGTERM, SIGINT);
  signals.add(SIGHUP);
  tcp::socket socket(io);
  std::string error;
  if (!connect_master(io, socket, args[1], error)) {
    std::cerr << "hvdrun: rank " << rank << " on " << host << " cannot reach hvdrun at " << args[1]
              << " (" << error << "); not starting " << program << "\n";
    return 1;
  }
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  Message hello{MessageKind::kHello, token, host, rank, static_cast<int>(getpid())};
  hello.generation = generation;
  asio::write(socket, asio::buffer(format_message(hello) + "\n"), ec);

  // Elastic mode: the program proves it completed (returned from @hvd.elastic.run) by writing
  // this file; the wrapper reports DONE before EXIT, so the master can tell an early exit 0.
  // hvdrun's HOSTS messages go to the program through $HVD_ELASTIC_HOSTS_FILE ("<seq> <bits>",
  // replaced by rename), which rank 0 reads at each commit()/check_host_updates().
  std::string completion, progress;
  std::string hosts_file;
  if (const char* dir = std::getenv("HVD_ELASTIC_STATE_DIR")) {
    // The first wrapper of the host creates it; every wrapper checks that it is the job's own
    // before the program reads a snapshot from it.
    const std::string problem = core::make_private_directory(dir);
    if (!problem.empty()) {
      std::cerr << "hvdrun: rank " << rank << " on " << host
                << ": the elastic state directory is not this job's own: " << problem
                << "; not starting " << program
                << " (another user may have created it to have this job run their snapshot; "
                   "nothing was read from it. Remove it, or give hvdrun --elastic-state-dir a "
                   "directory only you can write to)\n"
                << std::flush;
      send_exit(socket, format_message({MessageKind::kExit, token, host, rank, kExitElasticFatal}),
                exit_linger);
      return kExitElasticFatal;
    }
    warn_if_low_on_space(dir, host);
    const std::string me = std::to_string(rank) + "." + std::to_string(getpid());
    completion = std::string(dir) + "/complete." + me;
    hosts_file = std::string(dir) + "/hosts." + me;
    progress = std::string(dir) + "/progress." + me;
    ::unlink(completion.c_str());
    ::unlink(hosts_file.c_str());
    ::unlink(progress.c_str());
    setenv("HVD_ELASTIC_COMPLETION_FILE", completion.c_str(), 1);
    setenv("HVD_ELASTIC_HOSTS_FILE", hosts_file.c_str(), 1);
    setenv("HVD_ELASTIC_PROGRESS_FILE", progress.c_str(), 1);
  }

  std::vector<char*> argv;
  for (size_t i = kProgram; i < args.size(); ++i) {
    argv.push_back(const_cast<char*>(args[i].c_str()));
  }
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t child = fork();
  if (child < 0) {
    std::cerr << "hvdrun: rank " << rank << " on " << host << ": fork failed\n";
    return 1;
  }
  if (child == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(argv[0], argv.data());
    std::string msg = "hvdrun: rank " + std::to_string(rank) + " on " + host + ": cannot run " +
                      argv[0] + ": " + strerror(errno) + "\n";
    (void)!write(2, msg.data(), msg.size());
    _exit(127);
  }
  setpgid(child, child);

  int exit_code = -1;
  bool stopping = false;
  asio::steady_timer kill_timer(io);
  auto stop = [&](int sig) {
    ::kill(-child, sig);
    ::kill(-child, SIGCONT);  // a stopped program (SIGSTOP) gets its TERM now, not at KILL
    if (sig == SIGKILL || stopping) return;
    stopping = true;
    kill_timer.expires_after(std::chrono::milliseconds(static_cast<long>(grace * 1000)));
    kill_timer.async_wait([&](boost::system::error_code e) {
      if (!e) ::kill(-child, SIGKILL);
    });
  };
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](boost::system::error_code e, int sig) {
      if (e) return;
      if (sig == SIGCHLD) {
        int status = 0;
        if (waitpid(child, &status, WNOHANG) == child) {
          exit_code = exit_code_from_wait_status(status);
          ::kill(-child, SIGKILL);  // anything the program left in its group
          io.stop();
          return;
        }
      } else {
        stop(sig);
      }
      wait_signal();
    });
  };
  wait_signal();
  asio::streambuf buf;
  bool master_lost = false;
  using Clock = std::chrono::steady_clock;
  auto last_heard = Clock::now();
  std::function<void()> read_master = [&] {
    asio::async_read_until(socket, buf, '\n', [&](boost::system::error_code e, std::size_t) {
      if (e) {  // the master is gone: nobody supervises this rank any more
        master_lost = true;
        stop(SIGTERM);
        return;
      }
      last_heard = Clock::now();
      std::istream in(&buf);
      std::string line;
      std::getline(in, line);
      auto m = parse_message(line);
      if (m && m->kind == MessageKind::kTerm) stop(SIGTERM);
      if (m && m->kind == MessageKind::kKill) stop(SIGKILL);
      if (m && m->kind == MessageKind::kHosts && !hosts_file.empty()) {
        write_hosts_file(hosts_file, m->rank, m->value);
      }
      read_master();
    });
  };
  read_master();

  // The master pings every second; silence for the heartbeat timeout (a frozen or partitioned
  // master whose connection stays open) counts as a dropped connection.
  asio::steady_timer heartbeat_timer(io);
  std::function<void()> watch_master = [&] {
    heartbeat_timer.expires_after(std::chrono::milliseconds(250));
    heartbeat_timer.async_wait([&](boost::system::error_code e) {
      if (e) return;
      const double silent = std::chrono::duration<double>(Clock::now() - last_heard).count();
      if (silent > heartbeat_timeout) {
        std::cerr << "hvdrun: rank " << rank << " on " << host << ": no word from hvdrun for "
                  << static_cast<int>(silent) << " s (--heartbeat-timeout " << heartbeat_timeout
                  << "); stopping the rank\n";
        master_lost = true;
        socket.close(ec);  // nothing more to or from a master taken for dead
        stop(SIGTERM);
        return;
      }
      watch_master();
    });
  };
  if (heartbeat_timeout > 0) watch_master();

  // Lines to the master while the program runs (BEAT), written one at a time.
  std::string outbox;
  bool writing = false;
  std::function<void()> flush = [&] {
    if (writing || outbox.empty()) return;
    writing = true;
    auto data = std::make_shared<std::string>(std::move(outbox));
    outbox.clear();
    asio::async_write(socket, asio::buffer(*data),
                      [&, data](boost::system::error_code, std::size_t) {
                        writing = false;
                        flush();
                      });
  };
  asio::steady_timer beat_timer(io);
  std::string seen;
  int beats = 0;
  bool completed = false;
  // A BEAT when the progress file ("<seq> <commit id>", hvd/optim/elastic_progress.h) changed.
  auto beat_if_changed = [&] {
    std::string now = read_file(progress);
    if (now.empty() || now == seen) return;
    seen = now;
    Message beat{MessageKind::kBeat, token, host, rank, ++beats};
    long long seq = 0, commit = -1;
    if (std::sscanf(now.c_str(), "%lld %lld", &seq, &commit) == 2 && commit >= 0) {
      beat.commit = commit;
    }
    outbox += format_message(beat) + "\n";
  };
  std::function<void()> watch_progress = [&] {
    beat_timer.expires_after(std::chrono::milliseconds(500));
    beat_timer.async_wait([&](boost::system::error_code e) {
      if (e) return;
      beat_if_changed();
      if (!completed && file_exists(completion)) {
        completed = true;  // returned from @hvd.elastic.run: the watchdog lets it finish
        outbox += format_message({MessageKind::kBeat, token, host, rank, -1}) + "\n";
      }
      flush();
      watch_progress();
    });
  };
  if (!progress.empty()) watch_progress();
  io.run();
  beat_timer.cancel();
  heartbeat_timer.cancel();
  if (exit_code < 0) {  // io stopped without the child: should not happen; be safe
    ::kill(-child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    exit_code = exit_code_from_wait_status(status);
  }
  if (!completion.empty()) {
    // A commit made since the last look (the program may have died right after it) still
    // counts for hvdrun's --max-restarts-without-progress: one last look before EXIT.
    beat_if_changed();
    if (!outbox.empty() && !writing) asio::write(socket, asio::buffer(outbox), ec);
    if (exit_code == 0 && file_exists(completion)) {
      asio::write(socket,
                  asio::buffer(format_message({MessageKind::kDone, token, host, rank, 0}) + "\n"),
                  ec);
    }
    ::unlink(completion.c_str());
    ::unlink(hosts_file.c_str());
    ::unlink(progress.c_str());
    if (master_lost) {
      // hvdrun died (or this host lost it): no generation will follow, so the host's snapshot
      // is garbage in host memory. Every wrapper of the host tries; a failed rename means
      // another did. Renamed away first: a rank of the host still committing (another
      // wrapper's, or a straggler of this program's group) then finds no directory (commits
      // never create it) and cannot add a file while it is being deleted.
      // Only the job's own directory (never what a link points to, nor another's directory).
      const std::string dir = std::getenv("HVD_ELASTIC_STATE_DIR");
      const std::string gone = dir + ".removed." + std::to_string(getpid());
      if (core::private_directory_problem(dir).empty() &&
          std::rename(dir.c_str(), gone.c_str()) == 0 &&
          core::private_directory_problem(gone).empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(gone, ignored);
      }
    }
  }
  if (!master_lost) {
    send_exit(socket, format_message({MessageKind::kExit, token, host, rank, exit_code}),
              exit_linger);
  }
  return exit_code;
}

}  // namespace hvd::runner
