// SPDX-License-Identifier: Apache-2.0
// [local] hvdrun's control server over loopback TCP: wrappers of another generation than the
// running one (leftovers of a stopped mpirun) are told KILL and reach no handler; every wrapper
// gets PING each second.
#include "hvd/runner/control_server.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "hvd_catch.h"

using namespace hvd::runner;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

struct Client {
  tcp::socket socket;
  explicit Client(asio::io_context& io, unsigned short port) : socket(io) {
    socket.connect(tcp::endpoint(asio::ip::address_v4::loopback(), port));
  }
  void say(const std::string& line) { asio::write(socket, asio::buffer(line + "\n")); }
  // What the server sent so far (non-blocking), PING lines left out unless `pings`.
  std::string heard(bool pings = false) {
    std::string out;
    while (socket.available() > 0) {
      char buf[256];
      out.append(buf, socket.read_some(asio::buffer(buf)));
    }
    if (pings) return out;
    for (size_t at; (at = out.find("PING\n")) != std::string::npos;) out.erase(at, 5);
    return out;
  }
};

void run_for(asio::io_context& io, std::chrono::milliseconds ms) {
  if (io.stopped()) io.restart();
  io.run_for(ms);
}

}  // namespace

TEST_CASE("a wrapper of another generation is told KILL and ignored", "[local]") {
  using std::chrono::milliseconds;
  asio::io_context io;
  ControlServer server(io, "tok");
  server.start();
  std::vector<std::string> events;
  ControlServer::Handlers h;
  h.on_hello = [&](const Message& m) {
    events.push_back("hello " + std::to_string(m.rank) + " gen " + std::to_string(m.generation));
  };
  h.on_beat = [&](const Message& m) { events.push_back("beat " + std::to_string(m.rank)); };
  h.on_done = [&](const Message& m) { events.push_back("done " + std::to_string(m.rank)); };
  h.on_exit = [&](const Message& m) { events.push_back("exit " + std::to_string(m.rank)); };
  h.on_close = [&](int rank, const std::string&, bool exited) {
    events.push_back("close " + std::to_string(rank) + (exited ? " exited" : " lost"));
  };
  server.set_handlers(h);
  server.set_generation(1);

  Client stale(io, server.port()), fresh(io, server.port());
  stale.say("HELLO tok 0 hostA 100 0");  // rank 0 of generation 0: a leftover
  fresh.say("HELLO tok 0 hostB 200 1");  // rank 0 of generation 1
  run_for(io, milliseconds(200));
  CHECK(events == std::vector<std::string>{"hello 0 gen 1"});
  CHECK(server.open_wrappers() == 1);
  CHECK(server.stale_wrappers() == 1);
  CHECK(stale.heard() == "KILL\n");  // the leftover stops its program
  CHECK(fresh.heard().empty());

  // The leftover's messages and its end reach no handler; TERM goes to the current one only.
  stale.say("BEAT tok 0 hostA 5");
  stale.say("DONE tok 0 hostA");
  stale.say("EXIT tok 0 hostA 137");
  run_for(io, milliseconds(100));
  stale.socket.close();
  server.broadcast(MessageKind::kTerm);
  run_for(io, milliseconds(200));
  CHECK(events == std::vector<std::string>{"hello 0 gen 1"});
  CHECK(server.stale_wrappers() == 0);
  CHECK(fresh.heard() == "TERM\n");

  // Every wrapper hears PING each second, the stale ones too.
  Client late(io, server.port());
  late.say("HELLO tok 1 hostC 300 0");
  run_for(io, milliseconds(1300));
  CHECK(late.heard(true).find("PING\n") != std::string::npos);
  CHECK(fresh.heard(true).find("PING\n") != std::string::npos);

  // The next generation: generation 1's wrapper is stale from now on.
  fresh.say("EXIT tok 0 hostB 0");
  run_for(io, milliseconds(100));
  CHECK(events == std::vector<std::string>{"hello 0 gen 1", "exit 0"});
  server.set_generation(2);
  CHECK(server.open_wrappers() == 0);
  CHECK(server.stale_wrappers() == 2);
  fresh.socket.close();
  late.socket.close();
  run_for(io, milliseconds(200));
  CHECK(events == std::vector<std::string>{"hello 0 gen 1", "exit 0"});  // no close reported
  CHECK(server.stale_wrappers() == 0);

  // A current wrapper lost without EXIT is reported.
  Client now(io, server.port());
  now.say("HELLO tok 3 hostD 400 2");
  run_for(io, milliseconds(100));
  now.socket.close();
  run_for(io, milliseconds(200));
  CHECK(events ==
        std::vector<std::string>{"hello 0 gen 1", "exit 0", "hello 3 gen 2", "close 3 lost"});
  server.stop();
}
