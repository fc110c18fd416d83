// SPDX-License-Identifier: Apache-2.0
// `hvdrun --agent`: run over ssh by the preflight; reports this host and connects back. The job
// token arrives as the first line of stdin (never in argv, which every user of the host can
// read with ps).
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>

#include "hvd/runner/agent_report.h"
#include "hvd/runner/local_system.h"
#include "hvd/runner/modes.h"
#include "hvd/runner/state_dir.h"
#include "hvd/runner/wire.h"

namespace hvd::runner {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// One connect-back attempt: connect, send AGENT, expect OK with our token.
struct Probe : std::enable_shared_from_this<Probe> {
  Probe(asio::io_context& io, std::string address, std::string port)
      : address(std::move(address)), port(std::move(port)), resolver(io), socket(io) {}
  std::string address, port, result;
  bool ok = false;
  bool finished = false;
  bool timed_out = false;
  tcp::resolver resolver;
  tcp::socket socket;
  asio::streambuf buf;
  std::string hello;

  void start(const std::string& token, const std::string& host) {
    hello = format_message({MessageKind::kAgent, token, host, -1, 0}) + "\n";
    auto self = shared_from_this();
    resolver.async_resolve(address, port, [self, token](auto ec, auto eps) {
      if (ec) return self->done(ec.message());
      asio::async_connect(self->socket, eps, [self, token](auto ec2, const tcp::endpoint&) {
        if (ec2) return self->done(ec2.message());
        asio::async_write(
            self->socket, asio::buffer(self->hello), [self, token](auto ec3, std::size_t) {
              if (ec3) return self->done(ec3.message());
              asio::async_read_until(self->socket, self->buf, '\n',
                                     [self, token](auto ec4, std::size_t) {
                                       if (ec4) return self->done("no answer: " + ec4.message());
                                       std::istream in(&self->buf);
                                       std::string line;
                                       std::getline(in, line);
                                       auto m = parse_message(line);
                                       if (m && m->kind == MessageKind::kOk && m->token == token) {
                                         self->ok = true;
                                         return self->done("ok");
                                       }
                                       self->done("unexpected answer (another service?)");
                                     });
            });
      });
    });
  }
  void done(const std::string& why) {
    if (finished) return;
    finished = true;
    result = timed_out ? "timed out" : why;
    boost::system::error_code ignored;
    socket.close(ignored);
  }
};

}  // namespace

int run_agent(const std::vector<std::string>& args) {
  std::map<std::string, std::string> opt;
  for (size_t i = 1; i + 1 < args.size(); i += 2) opt[args[i]] = args[i + 1];
  std::string token;
  if (!std::getline(std::cin, token) || token.empty()) {
    std::cerr << "hvdrun --agent: no job token on stdin (the agent is started by hvdrun's "
                 "preflight only, which writes it there)\n";
    return 2;
  }
  AgentReport r;
  r.hostname = local_hostname();
  for (const auto& i : local_interfaces()) r.interfaces.push_back(i);
  const char* own_path = std::getenv("PATH");
  const std::string path = own_path ? own_path : "/usr/bin:/bin";
  std::string found = find_program(opt["--program"], opt["--cwd"], opt["--path"]);
  r.program_found = !found.empty();
  r.program = r.program_found ? found : opt["--program"];
  r.mpirun_found = !find_program("mpirun", opt["--cwd"], path).empty();
  r.orted_found = !find_program("orted", opt["--cwd"], path).empty();
  r.prted_found = !find_program("prted", opt["--cwd"], path).empty();
  if (opt.count("--state-base")) {
    r.state_base_checked = true;
    r.state_base_problem = state_base_problem(opt["--state-base"]);
    const auto free = free_bytes(opt["--state-base"]);
    r.state_base_free = free ? static_cast<long long>(*free) : -1;
  }

  double timeout = 5;
  try {
    timeout = std::stod(opt["--timeout"]);
  } catch (...) {
  }
  asio::io_context io;
  std::vector<std::shared_ptr<Probe>> probes;
  const std::string list = opt["--connect"];
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    std::string ep = list.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t colon = ep.rfind(':');
    if (colon != std::string::npos) {
      probes.push_back(std::make_shared<Probe>(io, ep.substr(0, colon), ep.substr(colon + 1)));
      probes.back()->start(token, opt.count("--host") ? opt["--host"] : r.hostname);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  asio::steady_timer deadline(io, std::chrono::milliseconds(static_cast<long>(timeout * 1000)));
  deadline.async_wait([&](boost::system::error_code ec) {
    if (ec) return;
    for (auto& p : probes) {
      boost::system::error_code ignored;
      p->timed_out = true;
      p->resolver.cancel();
      p->socket.close(ignored);
    }
  });
  auto unfinished = [&] {
    for (auto& p : probes) {
      if (!p->finished) return true;
    }
    return false;
  };
  while (unfinished() && io.run_one()) {
  }
  for (auto& p : probes) {
    if (p->ok) {
      r.reached.push_back(p->address);
    } else {
      r.unreached.push_back(p->address + ": " + p->result);
    }
  }
  std::cout << format_agent_report(r) << std::flush;
  return 0;
}

}  // namespace hvd::runner
