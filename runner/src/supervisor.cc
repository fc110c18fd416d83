// SPDX-License-Identifier: Apache-2.0
// Supervision: mpirun in its own process group, rank wrappers reporting over the control
// server; the first failure or a signal stops every rank (TERM, grace period, KILL).
#include "hvd/runner/supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "hvd/runner/elastic.h"
#include "hvd/runner/elastic_watchdog.h"
#include "hvd/runner/errors.h"
#include "hvd/runner/liveness.h"
#include "hvd/runner/subprocess.h"
#include "hvd/runner/tag_output.h"
#include "hvd/runner/wire.h"

namespace hvd::runner {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

void write_line(int fd, const std::string& line) {
  std::string data = line + "\n";
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

struct Failure {
  Failure(int r, std::string h, int c, bool l = false)
      : rank(r), host(std::move(h)), code(c), lost(l), at(Clock::now()) {}
  int rank;
  std::string host;
  int code;
  bool lost;             // the wrapper's connection closed without EXIT (on_close)
  Clock::time_point at;  // when hvdrun learnt of it
};

int supervise_job(asio::io_context& io, ControlServer& server, const SuperviseConfig& cfg,
                  GenerationOutcome* outcome);

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Keeps a rank's last non-empty stderr line (`[3]<stderr>: text`, retagged) in `last`, at most
// 300 characters: the error an elastic job's give-up message quotes.
void note_error_line(const std::string& line, std::map<int, std::string>& last) {
  const std::string tag = "]<stderr>: ";
  const size_t close = line.find(tag);
  if (line.empty() || line[0] != '[' || close == std::string::npos || close < 2) return;
  int rank = 0;
  for (size_t i = 1; i < close; ++i) {
    if (line[i] < '0' || line[i] > '9' || rank > 1000000) return;
    rank = rank * 10 + (line[i] - '0');
  }
  std::string text = line.substr(close + tag.size());
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  if (text.empty()) return;
  if (text.size() > 300) text = text.substr(0, 297) + "...";
  last[rank] = text;
}

}  // namespace

int supervise(asio::io_context& io, ControlServer& server, const SuperviseConfig& cfg,
              GenerationOutcome* outcome) {
  int code = supervise_job(io, server, cfg, outcome);
  if (outcome) outcome->exit_code = code;
  return code;
}

namespace {

int supervise_job(asio::io_context& io, ControlServer& server, const SuperviseConfig& cfg,
                  GenerationOutcome* outcome) {
  const auto t0 = Clock::now();
  Clock::time_point stop_started;
  std::optional<Failure> first;
  std::optional<Failure> cause;  // elastic: the first other failure after a restart request
  int stop_signal = 0;
  bool stopping = false;
  bool kill_sent = false;
  bool mpirun_done = false;
  int mpirun_code = 0;
  int hellos = 0;
  std::set<int> done;                   // ranks whose program reported completion (elastic)
  int64_t last_commit = -1;             // the highest commit id a rank reported (elastic)
  std::map<int, std::string> last_err;  // each rank's last non-empty stderr line (elastic)
  const auto grace = std::chrono::milliseconds(static_cast<long>(cfg.grace_s * 1000));
  // Every handler below refers to this frame. Some may run after it is gone: a timer that
  // expired in the pass that stopped `io` keeps its handler queued (cancel() cannot recall it)
  // until the caller runs `io` again, and the server keeps the handlers. Each is guarded.
  Liveness life;

  Subprocess mpirun(io, cfg.mpirun_argv, true);
  mpirun.set_env(cfg.mpirun_env);
  asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  asio::steady_timer kill_timer(io);
  asio::steady_timer final_timer(io);
  asio::steady_timer watchdog_timer(io);
  StepWatchdog watchdog(cfg.elastic ? cfg.step_timeout_s : 0);

  // Ranks are stopped through their wrappers; mpirun, which aborts the job by itself when a
  // rank ends non-zero, is signalled only when it outlives the grace period (a TERM in the
  // middle of its own abort can crash it and strand its remote daemons for a moment).
  auto begin_stop = [&] {
    if (stopping) return;
    stopping = true;
    stop_started = Clock::now();
    server.broadcast(MessageKind::kTerm);
    if (server.open_wrappers() == 0) mpirun.signal(SIGTERM);  // nothing started yet
    kill_timer.expires_after(grace);
    kill_timer.async_wait(life.guard([&](boost::system::error_code ec) {
      if (ec) return;
      if (cfg.verbose) write_line(2, "hvdrun: grace period over; sending KILL");
      server.broadcast(MessageKind::kKill);
      kill_sent = true;
      mpirun.signal(SIGTERM);
      kill_timer.expires_after(std::min(grace, std::chrono::milliseconds(2000)) +
                               std::chrono::milliseconds(500));
      kill_timer.async_wait(life.guard([&](boost::system::error_code ec2) {
        if (!ec2) mpirun.signal(SIGKILL);
      }));
    }));
  };
  auto maybe_done = [&] {
    if (mpirun_done && server.open_wrappers() == 0) io.stop();
  };

  ControlServer::Handlers h;
  h.on_hello = life.guard([&](const Message& m) {
    ++hellos;
    watchdog.started(m.rank, m.host);
  });
  h.on_beat = life.guard([&](const Message& m) {
    if (m.value < 0) watchdog.finished(m.rank);
    if (m.value >= 0) watchdog.progress(m.rank, since(t0));
    last_commit = std::max(last_commit, m.commit);
  });
  h.on_done = life.guard([&](const Message& m) { done.insert(m.rank); });
  h.on_exit = life.guard([&](const Message& m) {
    watchdog.finished(m.rank);
    // A later exit that is the real first failure: the cause of a lost wrapper (any mode) or of
    // a survivor's restart request (elastic).
    const bool supersedes =
        first && stop_signal == 0 &&
        ((first->lost && m.rank != first->rank &&
          supersedes_lost_rank(m.value, kill_sent, since(first->at), cfg.grace_s)) ||
         (cfg.elastic && supersedes_restart_request(first->code, m.value, kill_sent)));
    if (supersedes) {
      write_line(2, "hvdrun: rank " + std::to_string(m.rank) + " on host " + m.host + " failed (" +
                        describe_exit_code(m.value) + "): the cause of " +
                        (first->code == kExitLaunch
                             ? "losing rank " + std::to_string(first->rank)
                             : "rank " + std::to_string(first->rank) + "'s restart request"));
      first = Failure{m.rank, m.host, m.value};
      return;
    }
    if (cfg.elastic && first && !cause && first->code == kExitElasticRestart &&
        explains_restart_request(m.value, kill_sent)) {
      cause = Failure{m.rank, m.host, m.value};  // quoted by a give-up (elastic.h)
    }
    if (first || stop_signal != 0) return;
    if (m.value == 0 && cfg.elastic && done.count(m.rank) == 0) {
      first = Failure{m.rank, m.host, kExitLaunch};
      write_line(2, "hvdrun: rank " + std::to_string(m.rank) + " on host " + m.host +
                        " exited 0 without returning from @hvd.elastic.run (an early exit is a "
                        "failure in elastic mode); stopping all ranks");
      begin_stop();
      return;
    }
    if (m.value == 0) return;
    first = Failure{m.rank, m.host, m.value};
    write_line(2, "hvdrun: rank " + std::to_string(m.rank) + " on host " + m.host + " failed (" +
                      describe_exit_code(m.value) + "); stopping all ranks");
    begin_stop();
  });
  h.on_close = life.guard([&](int rank, const std::string& host, bool exited) {
    // A rank whose wrapper vanished without EXIT while a survivor's restart request stops the
    // generation: mpirun's abort can kill the failed rank's wrapper before it reports, so that
    // rank is the likeliest cause (its code unknown: kExitLaunch, "lost without a rank code").
    if (!exited && cfg.elastic && first && !cause && first->code == kExitElasticRestart &&
        stop_signal == 0 && rank != first->rank) {
      cause = Failure{rank, host, kExitLaunch};
    }
    if (!exited && !first && stop_signal == 0) {
      first = Failure{rank, host, kExitLaunch, true};
      write_line(2, "hvdrun: lost contact with rank " + std::to_string(rank) + " on host " + host +
                        " (its wrapper was killed or the host went down); stopping all ranks");
      begin_stop();
    }
    maybe_done();
  });
  server.set_handlers(h);

  std::function<void()> wait_signal = [&] {
    signals.async_wait(life.guard([&](boost::system::error_code ec, int sig) {
      if (ec) return;
      // Recorded even while a failed rank's generation is being stopped: the signal still
      // ends the job (elastic mode restarts nothing after it).
      if (stop_signal == 0) {
        stop_signal = sig;
        write_line(2,
                   std::string("hvdrun: got SIG") + sigabbrev_np(sig) +
                       (first ? "; the ranks are being stopped already (no restart follows)"
                              : "; stopping all ranks (TERM, then KILL after the grace period)"));
      }
      if (stopping && sig == SIGINT) {  // second Ctrl-C: do not wait for the grace period
        server.broadcast(MessageKind::kKill);
        mpirun.signal(SIGKILL);
      }
      begin_stop();
      wait_signal();
    }));
  };
  wait_signal();

  // The step watchdog: a rank that stopped making progress is handled like a dead one.
  std::function<void()> watch = [&] {
    watchdog_timer.expires_after(std::chrono::milliseconds(500));
    watchdog_timer.async_wait(life.guard([&](boost::system::error_code ec) {
      if (ec || stopping) return;
      if (auto stall = watchdog.check(since(t0)); stall && !first && stop_signal == 0) {
        first = Failure{stall->ranks.front(), watchdog.host_of(stall->ranks.front()), kExitStalled};
        write_line(2, describe_stall(*stall, watchdog));
        begin_stop();
        return;
      }
      watch();
    }));
  };
  if (cfg.elastic && cfg.step_timeout_s > 0) watch();

  auto retag = [&cfg](const std::string& l) { return cfg.retag ? retag_line(l, cfg.tag_end) : l; };
  mpirun.on_stdout([&](const std::string& l) { write_line(1, retag(l)); });
  mpirun.on_stderr([&](const std::string& l) {
    const std::string line = retag(l);
    write_line(2, line);
    if (cfg.elastic) note_error_line(line, last_err);
  });
  mpirun.on_exit([&](int status) {
    mpirun_done = true;
    mpirun_code = exit_code_from_wait_status(status);
    if (server.open_wrappers() > 0) {
      // mpirun is gone but some wrappers are not: stop them, and give up after the grace.
      begin_stop();
      final_timer.expires_after(grace + std::chrono::seconds(1));
      final_timer.async_wait(life.guard([&](boost::system::error_code ec) {
        if (!ec) io.stop();
      }));
    }
    maybe_done();
  });
  try {
    mpirun.start();
  } catch (const std::exception& e) {
    write_line(2, std::string("hvdrun: cannot start mpirun: ") + e.what());
    return kExitLaunch;
  }
  if (io.stopped()) io.restart();
  io.run();
  signals.cancel();
  kill_timer.cancel();
  final_timer.cancel();
  watchdog_timer.cancel();
  if (outcome) {
    outcome->rank0_done = done.count(0) > 0;
    outcome->signal = stop_signal;
    outcome->failed_rank = first ? first->rank : -1;
    outcome->failed_host = first ? first->host : "";
    outcome->last_commit = last_commit;
    if (cause) {
      outcome->error_rank = cause->rank;
      outcome->error_host = cause->host;
      outcome->error_code = cause->code;
    }
    const std::optional<Failure>& quoted = cause ? cause : first;
    if (quoted && last_err.count(quoted->rank)) outcome->last_error = last_err[quoted->rank];
  }

  if (cfg.verbose) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "hvdrun: job ran %.2f s%s", since(t0), "");
    std::string msg = buf;
    if (stopping) {
      std::snprintf(buf, sizeof buf, "; teardown took %.2f s", since(stop_started));
      msg += buf;
    }
    write_line(2, msg);
  }
  if (first) {
    write_line(2, "hvdrun: job failed: rank " + std::to_string(first->rank) + " on host " +
                      first->host + " failed first (" + describe_exit_code(first->code) + ")");
    return first->code;
  }
  if (stop_signal != 0) return kExitSignalBase + stop_signal;
  if (mpirun_code != 0) {
    std::string when = hellos < cfg.np ? " before all " + std::to_string(cfg.np) +
                                             " ranks started (" + std::to_string(hellos) + " did)"
                                       : "";
    write_line(2, "hvdrun: mpirun failed with " + describe_exit_code(mpirun_code) + when +
                      "; see its messages above");
    return mpirun_code;
  }
  return kExitOk;
}

}  // namespace

}  // namespace hvd::runner
