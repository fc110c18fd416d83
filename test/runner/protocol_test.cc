// SPDX-License-Identifier: Apache-2.0
// [unit] wire protocol, output tagging, agent reports, network choice, ssh/preflight messages.
#include "hvd/runner/agent_report.h"
#include "hvd/runner/interfaces.h"
#include "hvd/runner/mpi_profile.h"
#include "hvd/runner/preflight.h"
#include "hvd/runner/ssh_errors.h"
#include "hvd/runner/tag_output.h"
#include "hvd/runner/wire.h"
#include "hvd_catch.h"

using namespace hvd::runner;
using hvd::test::Contains;

TEST_CASE("wire messages round-trip and junk is rejected", "[unit]") {
  Message exit{MessageKind::kExit, "tok", "node1", 3, 137};
  CHECK(format_message(exit) == "EXIT tok 3 node1 137");
  auto back = parse_message("EXIT tok 3 node1 137\r\n");
  REQUIRE(back);
  CHECK((back->kind == MessageKind::kExit && back->rank == 3 && back->host == "node1" &&
         back->value == 137 && back->token == "tok"));
  Message hello{MessageKind::kHello, "tok", "node1", 2, 42};
  hello.generation = 3;
  CHECK(format_message(hello) == "HELLO tok 2 node1 42 3");
  auto he = parse_message("HELLO tok 2 node1 42 3");
  REQUIRE(he);
  CHECK(
      (he->kind == MessageKind::kHello && he->rank == 2 && he->value == 42 && he->generation == 3));
  CHECK_FALSE(parse_message("HELLO t 0 h 42"));  // without its generation
  CHECK_FALSE(parse_message("HELLO t 0 h 42 -1"));
  CHECK(parse_message("PING")->kind == MessageKind::kPing);
  CHECK(format_message(Message{MessageKind::kPing, "", "", -1, 0}) == "PING");
  CHECK(parse_message("TERM")->kind == MessageKind::kTerm);
  Message done{MessageKind::kDone, "tok", "node1", 2, 0};
  CHECK(format_message(done) == "DONE tok 2 node1");
  auto d = parse_message("DONE tok 2 node1");
  REQUIRE(d);
  CHECK((d->kind == MessageKind::kDone && d->rank == 2 && d->host == "node1"));
  CHECK_FALSE(parse_message("DONE tok -2 node1"));
  Message beat{MessageKind::kBeat, "tok", "node1", 1, -1};
  CHECK(format_message(beat) == "BEAT tok 1 node1 -1");
  auto b = parse_message("BEAT tok 1 node1 17");
  REQUIRE(b);
  CHECK((b->kind == MessageKind::kBeat && b->rank == 1 && b->host == "node1" && b->value == 17));
  CHECK_FALSE(parse_message("BEAT tok 1 node1"));
  CHECK(parse_message("KILL")->kind == MessageKind::kKill);
  CHECK(parse_message("AGENT t h")->kind == MessageKind::kAgent);
  CHECK(parse_message("OK t")->kind == MessageKind::kOk);
  CHECK_FALSE(parse_message("GET / HTTP/1.1"));
  CHECK_FALSE(parse_message("EXIT t x h 1"));
  CHECK_FALSE(parse_message("EXIT t -1 h 1"));
  CHECK_FALSE(parse_message(""));
}

TEST_CASE("HOSTS carries a host change's number and bits to the wrappers", "[unit]") {
  Message m{MessageKind::kHosts, "", "", 3, 2};
  CHECK(format_message(m) == "HOSTS 3 2");
  auto p = parse_message("HOSTS 3 2\r");
  REQUIRE(p);
  CHECK(p->kind == MessageKind::kHosts);
  CHECK(p->rank == 3);
  CHECK(p->value == 2);
  CHECK_FALSE(parse_message("HOSTS 0 2"));  // changes count from 1
  CHECK_FALSE(parse_message("HOSTS 1"));
  CHECK_FALSE(parse_message("HOSTS x 1"));
}

TEST_CASE("exit codes and their descriptions", "[unit]") {
  CHECK(exit_code_from_wait_status(3 << 8) == 3);
  CHECK(exit_code_from_wait_status(9) == 137);  // killed by SIGKILL
  CHECK(describe_exit_code(3) == "exit code 3");
  CHECK(describe_exit_code(137) == "killed by signal 9 (SIGKILL), exit code 137");
}

TEST_CASE("mpirun's [job,rank] tags become [rank]", "[unit]") {
  const std::string v4 = open_mpi_profile(4).tag_end;
  CHECK(retag_line("[1,3]<stdout>:hello world", v4) == "[3]<stdout>: hello world");
  CHECK(retag_line("[1,12]<stderr>:", v4) == "[12]<stderr>: ");
  CHECK(retag_line("[1,3]<stdout>: indented", v4) == "[3]<stdout>:  indented");
  CHECK(retag_line("plain mpirun message", v4) == "plain mpirun message");
  CHECK(retag_line("[vm:123] *** Process received signal", v4) ==
        "[vm:123] *** Process received signal");
  CHECK(retag_line("[1,x]<stdout>:a", v4) == "[1,x]<stdout>:a");
  CHECK(retag_line("[,1]<stdout>:a", v4) == "[,1]<stdout>:a");
  // A line written in pieces carries its tag again inside; another rank's tag stays.
  CHECK(retag_line("[1,0]<stdout>:epoch 2 (2 ranks)[1,0]<stdout>:", v4) ==
        "[0]<stdout>: epoch 2 (2 ranks)");
  CHECK(retag_line("[1,0]<stdout>:a[1,0]<stdout>:b[1,1]<stdout>:c", v4) ==
        "[0]<stdout>: ab[1,1]<stdout>:c");
}

TEST_CASE("Open MPI 5's tags end with a space, which is not the rank's", "[unit]") {
  const std::string v5 = open_mpi_profile(5).tag_end;
  CHECK(retag_line("[1,3]<stdout>: hello world", v5) == "[3]<stdout>: hello world");
  CHECK(retag_line("[1,3]<stdout>:   x", v5) == "[3]<stdout>:   x");  // two of the rank's
  CHECK(retag_line("[1,12]<stderr>: ", v5) == "[12]<stderr>: ");
  CHECK(retag_line("[1,0]<stdout>: epoch 2[1,0]<stdout>: ", v5) == "[0]<stdout>: epoch 2");
  CHECK(retag_line("[1,0]<stdout>:a", v5) == "[1,0]<stdout>:a");  // not Open MPI 5's tag
}

TEST_CASE("agent report round-trips and ignores login noise", "[unit]") {
  AgentReport r;
  r.hostname = "node1";
  r.interfaces = {{"lo", "127.0.0.1", 8}, {"eth0", "10.0.0.5", 24}};
  r.reached = {"10.0.0.1"};
  r.unreached = {"192.0.2.2: Network is unreachable"};
  r.program_found = true;
  r.program = "/work/train";
  r.mpirun_found = true;
  r.orted_found = false;
  r.prted_found = true;
  auto back = parse_agent_report("Welcome!\n" + format_agent_report(r) + "bye\n");
  CHECK(back.hostname == "node1");
  CHECK(back.interfaces == r.interfaces);
  CHECK(back.reached == r.reached);
  CHECK(back.unreached == r.unreached);
  CHECK((back.program_found && back.program == "/work/train"));
  CHECK((back.mpirun_found && !back.orted_found && back.prted_found && back.complete));
  CHECK_FALSE(parse_agent_report("HVDAGENT hostname x\n").complete);
}

TEST_CASE("the preflight names a missing or mismatched Open MPI on a host", "[unit]") {
  AgentReport r;
  r.mpirun_found = true;
  r.orted_found = true;
  CHECK(open_mpi_problem(r, open_mpi_profile(4), "n1").empty());
  CHECK(open_mpi_problem(r, open_mpi_profile(5), "n1") ==
        "n1 has Open MPI 4 (orted) but this machine's mpirun is Open MPI 5 (its daemon prted is "
        "not in the PATH of a non-interactive ssh login there); install the same Open MPI major "
        "version on every host");
  r.orted_found = false;
  r.prted_found = true;
  CHECK(open_mpi_problem(r, open_mpi_profile(5), "n1").empty());
  CHECK_THAT(open_mpi_problem(r, open_mpi_profile(4), "n1"),
             Contains("n1 has Open MPI 5 (prted) but this machine's mpirun is Open MPI 4"));
  r.prted_found = false;
  CHECK(open_mpi_problem(r, open_mpi_profile(5), "n1") ==
        "prted (Open MPI 5) not found in the PATH of a non-interactive ssh login on n1; install "
        "Open MPI there, or set PATH where non-interactive shells read it");
  r.mpirun_found = false;
  r.orted_found = true;
  CHECK_THAT(open_mpi_problem(r, open_mpi_profile(4), "n1"),
             Contains("mpirun (Open MPI 4) not found"));
}

TEST_CASE("IPv4 helpers", "[unit]") {
  CHECK(parse_ipv4("10.1.2.3") == 0x0a010203u);
  CHECK_FALSE(parse_ipv4("10.1.2"));
  CHECK_FALSE(parse_ipv4("10.1.2.256"));
  CHECK_FALSE(parse_ipv4("10.1.2.3x"));
  CHECK(network_cidr({"eth0", "10.1.2.3", 24}) == "10.1.2.0/24");
  CHECK(network_cidr({"eth0", "172.16.5.9", 12}) == "172.16.0.0/12");
  CHECK(cidr_contains("10.1.2.0/24", "10.1.2.200"));
  CHECK_FALSE(cidr_contains("10.1.2.0/24", "10.1.3.1"));
}

TEST_CASE("the chosen network is the master's that every host reached and is on", "[unit]") {
  std::vector<Interface> master{
      {"lo", "127.0.0.1", 8}, {"eth0", "192.0.2.2", 24}, {"br0", "10.201.5.1", 24}};
  std::vector<HostNetwork> remotes{
      {"h1", {{"lo", "127.0.0.1", 8}, {"eth0", "10.201.5.11", 24}}, {"10.201.5.1"}},
      {"h2", {{"lo", "127.0.0.1", 8}, {"ens3", "10.201.5.12", 24}}, {"10.201.5.1"}}};
  auto c = choose_interfaces(master, remotes);
  CHECK(c.error.empty());
  CHECK(c.cidrs == std::vector<std::string>{"10.201.5.0/24"});
  CHECK(c.nccl_ifnames == std::vector<std::string>{"br0", "eth0", "ens3"});
  CHECK(c.master_addresses == std::vector<std::string>{"10.201.5.1"});

  remotes[1].reached.clear();  // h2 cannot connect back
  auto none = choose_interfaces(master, remotes);
  CHECK(none.cidrs.empty());
  CHECK_THAT(none.error, Contains("--network-interface"));
}

TEST_CASE("ssh failures explained with the fix", "[unit]") {
  CHECK(explain_ssh_failure("n1", 0, 255, "Host key verification failed.\n", "/h") ==
        "the host key of n1 is not in known_hosts (hvdrun never disables host-key checking); "
        "after checking the fingerprint run: ssh-keyscan -p 22 n1 >> ~/.ssh/known_hosts");
  CHECK_THAT(explain_ssh_failure("n1", 2222, 255,
                                 "@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@\n"
                                 "Host key verification failed.\n",
                                 "/h"),
             Contains("CHANGED") && Contains("ssh-keygen -R n1") &&
                 Contains("ssh-keyscan -p 2222 n1 >> ~/.ssh/known_hosts"));
  CHECK_THAT(explain_ssh_failure("n1", 0, 255, "root@n1: Permission denied (publickey).\n", "/h"),
             Contains("ssh-copy-id n1") && Contains("-i KEY"));
  CHECK_THAT(explain_ssh_failure("n1", 0, 127, "bash: /opt/hvdrun: No such file or directory\n",
                                 "/opt/hvdrun"),
             Contains("hvdrun is not installed at /opt/hvdrun on n1"));
  CHECK_THAT(explain_ssh_failure("n1", 0, 255,
                                 "ssh: connect to host n1 port 22: Connection "
                                 "refused\n",
                                 "/h"),
             Contains("start sshd"));
}

TEST_CASE("the preflight report lists every host's problems at once", "[unit]") {
  PreflightResult r;
  r.seconds = 1.25;
  r.hosts = {{"a", {"problem one"}, {}, 0.5}, {"b", {}, {}, 0.4}, {"c", {"p2", "p3"}, {}, 1.2}};
  CHECK_FALSE(r.ok());
  CHECK(format_preflight_report(r) ==
        "hvdrun: preflight failed on 2 of 3 hosts (1.2 s); nothing was started:\n"
        "  a: problem one\n"
        "  c: p2\n"
        "  c: p3\n");
  r.hosts = {{"a", {}, {}, 0.5}};
  CHECK(r.ok());
  CHECK(format_preflight_report(r).empty());
}
