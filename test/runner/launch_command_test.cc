// SPDX-License-Identifier: Apache-2.0
// [unit] the exact mpirun command lines and the forwarded environment.
#include "hvd/runner/launch_command.h"

#include <unistd.h>

#include <algorithm>

#include "hvd/runner/errors.h"
#include "hvd_catch.h"

using namespace hvd::runner;
using Words = std::vector<std::string>;

TEST_CASE("localhost job as root: oversubscribe, tagged output, no ssh agent", "[unit]") {
  LaunchSpec s;
  s.np = 2;
  s.hosts = {{"localhost", 2}};
  s.as_root = true;
  s.env = {{"PATH", std::nullopt}};
  s.wrapper = {"/opt/hvd/bin/hvdrun", "--rank-wrapper", "127.0.0.1:4000", "5", "0", "30", "--"};
  s.command = {"./train", "--epochs", "1"};
  CHECK(build_mpirun_command(s) == Words{"mpirun",
                                         "--allow-run-as-root",
                                         "-np",
                                         "2",
                                         "-H",
                                         "localhost:2",
                                         "--bind-to",
                                         "none",
                                         "--oversubscribe",
                                         "--mca",
                                         "mpi_yield_when_idle",
                                         "1",
                                         "--tag-output",
                                         "-x",
                                         "PATH",
                                         "/opt/hvd/bin/hvdrun",
                                         "--rank-wrapper",
                                         "127.0.0.1:4000",
                                         "5",
                                         "0",
                                         "30",
                                         "--",
                                         "./train",
                                         "--epochs",
                                         "1"});
}

TEST_CASE("two hosts as a user: ssh agent with port and key, interfaces, output files", "[unit]") {
  LaunchSpec s;
  s.np = 8;
  s.hosts = {{"a", 4}, {"b", 4}};
  s.all_local = false;
  s.ssh_port = 2222;
  s.ssh_identity = "/home/u/.ssh/id ed";
  s.mpi_interfaces = {"10.0.0.0/24"};
  s.env = {{"HVD_LOG_LEVEL", std::string("debug")}, {"NCCL_SOCKET_IFNAME", std::string("eth0")}};
  s.output_dir = "logs";
  s.command = {"python", "train.py"};
  auto c = build_mpirun_command(s);
  CHECK(c == Words{"mpirun",
                   "-np",
                   "8",
                   "-H",
                   "a:4,b:4",
                   "--bind-to",
                   "none",
                   "--mca",
                   "plm_rsh_agent",
                   "ssh -o BatchMode=yes -p 2222 -i '/home/u/.ssh/id ed'",
                   "--mca",
                   "mpi_yield_when_idle",
                   "1",
                   "--mca",
                   "oob_tcp_if_include",
                   "10.0.0.0/24",
                   "--mca",
                   "btl_tcp_if_include",
                   "10.0.0.0/24",
                   "--output-filename",
                   "logs",
                   "-x",
                   "HVD_LOG_LEVEL=debug",
                   "-x",
                   "NCCL_SOCKET_IFNAME=eth0",
                   "python",
                   "train.py"});
  CHECK(shell_join(c).find("'ssh -o BatchMode=yes -p 2222 -i '\\''/home/u/.ssh/id ed'\\'''") !=
        std::string::npos);
}

TEST_CASE("Open MPI 5's mpirun gets PRRTE's spellings for the same job", "[unit]") {
  LaunchSpec s;
  s.mpi = open_mpi_profile(5);
  s.np = 3;
  s.hosts = {{"localhost", 3}};
  s.as_root = true;
  s.elastic = true;  // Open MPI 5 has no TERM-to-KILL knob: nothing added
  s.command = {"./train"};
  CHECK(build_mpirun_command(s) == Words{"mpirun", "--allow-run-as-root", "-np", "3", "-H",
                                         "localhost:3", "--bind-to", "none", "--map-by",
                                         ":OVERSUBSCRIBE", "--mca", "mpi_yield_when_idle", "1",
                                         "--output", "tag", "./train"});
  s.np = 2;
  s.hosts = {{"a", 1}, {"b", 1}};
  s.all_local = false;
  s.in_slurm_allocation = true;
  s.as_root = false;
  s.elastic = false;
  s.ssh_port = 2222;
  s.mpi_interfaces = {"10.0.0.0/24", "eth1"};
  s.output_dir = "logs";
  s.mca = {{"btl_tcp_disable_family", "6"}};
  CHECK(build_mpirun_command(s) == Words{"mpirun",
                                         "-np",
                                         "2",
                                         "-H",
                                         "a:1,b:1",
                                         "--bind-to",
                                         "none",
                                         "--prtemca",
                                         "plm",
                                         "ssh",
                                         "--prtemca",
                                         "plm_ssh_agent",
                                         "ssh -o BatchMode=yes -p 2222",
                                         "--mca",
                                         "mpi_yield_when_idle",
                                         "1",
                                         "--mca",
                                         "btl_tcp_disable_family",
                                         "6",
                                         "--prtemca",
                                         "prte_if_include",
                                         "10.0.0.0/24,eth1",
                                         "--mca",
                                         "btl_tcp_if_include",
                                         "10.0.0.0/24,eth1",
                                         "--output",
                                         "dir=logs",
                                         "./train"});
}

TEST_CASE("the Open MPI major version is read from mpirun --version", "[unit]") {
  CHECK(parse_open_mpi_major("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/"
                             "community/help/\n") == 4);
  CHECK(parse_open_mpi_major("mpirun (Open MPI) 5.0.7\n") == 5);
  CHECK(parse_open_mpi_major("prterun (Open MPI) 10.1a1") == 10);
  CHECK_FALSE(parse_open_mpi_major("HYDRA build details:\n    Version: 4.0.2\n"));
  CHECK_FALSE(parse_open_mpi_major("mpirun (Open MPI) x"));
  CHECK_FALSE(parse_open_mpi_major(""));
  CHECK(open_mpi_profile(4).daemon == "orted");
  CHECK(open_mpi_profile(3).major == 4);  // older than 5: Open MPI 4.1's spellings
  CHECK(open_mpi_profile(5).daemon == "prted");
  CHECK(open_mpi_profile(6).major == 5);
  CHECK(open_mpi_profile(4).shared_memory_btl == "vader");
  CHECK(open_mpi_profile(5).shared_memory_btl == "sm");
}

TEST_CASE("an elastic generation is torn down without Open MPI's TERM-to-KILL wait", "[unit]") {
  LaunchSpec s;
  s.np = 2;
  s.hosts = {{"localhost", 2}};
  s.command = {"./train"};
  auto has_fast_kill = [](const Words& w) {
    for (size_t i = 0; i + 2 < w.size(); ++i) {
      if (w[i] == "--mca" && w[i + 1] == "odls_base_sigkill_timeout" && w[i + 2] == "0")
        return true;
    }
    return false;
  };
  CHECK_FALSE(has_fast_kill(build_mpirun_command(s)));  // a plain job keeps the grace period
  s.elastic = true;
  CHECK(has_fast_kill(build_mpirun_command(s)));
}

TEST_CASE("MPI's waits yield the core unless the user's environment says otherwise", "[unit]") {
  LaunchSpec s;
  s.np = 2;
  s.hosts = {{"localhost", 2}};
  s.command = {"./train"};
  auto yields = [](const Words& w) {
    for (size_t i = 0; i + 2 < w.size(); ++i) {
      if (w[i] == "--mca" && w[i + 1] == "mpi_yield_when_idle") return w[i + 2] == "1";
    }
    return false;
  };
  CHECK(yields(build_mpirun_command(s)));
  CHECK_FALSE(
      sets_mca_param({"PATH=/bin", "OMPI_MCA_mpi_yield_when_idle_x=0"}, "mpi_yield_when_idle"));
  CHECK(sets_mca_param({"PATH=/bin", "OMPI_MCA_mpi_yield_when_idle=0"}, "mpi_yield_when_idle"));
  s.yield_when_idle = false;  // what hvdrun sets when the environment has the parameter
  CHECK_FALSE(yields(build_mpirun_command(s)));
}

TEST_CASE("ssh agent command and shell quoting", "[unit]") {
  CHECK(ssh_agent_command(0, "") == "ssh -o BatchMode=yes");
  CHECK(ssh_agent_command(22, "/k") == "ssh -o BatchMode=yes -p 22 -i /k");
  CHECK(shell_quote("a.b/c:1,2") == "a.b/c:1,2");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_join({"echo", "a b", "$X"}) == "echo 'a b' '$X'");
}

TEST_CASE("default forwarded variables, tuning flags and -x", "[unit]") {
  Options o;
  o.timeline = "/tmp/tl.json";
  o.timeline_mark_cycles = true;
  o.fusion_threshold_mb = 64;
  o.cycle_time_ms = 3.5;
  o.cache_capacity = 1024;
  o.log_level = "info";
  o.env = {"MY_VAR", "OTHER=x y", "HVD_LOG_LEVEL=trace"};
  std::vector<std::string> env{"PATH=/bin",          "HOME=/root",
                               "HVD_FOO=1",          "HOROVOD_BAR=2",
                               "NCCL_DEBUG=INFO",    "CUDA_VISIBLE_DEVICES=0",
                               "LD_LIBRARY_PATH=/l", "PYTHONPATH=/p",
                               "MY_VAR=7",           "SECRET=s"};
  auto v = forwarded_env(o, env, {"eth0", "ib0"});
  std::vector<EnvVar> want{{"CUDA_VISIBLE_DEVICES", std::nullopt},
                           {"HOROVOD_BAR", std::nullopt},
                           {"HVD_FOO", std::nullopt},
                           {"LD_LIBRARY_PATH", std::nullopt},
                           {"NCCL_DEBUG", std::nullopt},
                           {"PATH", std::nullopt},
                           {"PYTHONPATH", std::nullopt},
                           {"HVD_TIMELINE", std::string("/tmp/tl.json")},
                           {"HVD_TIMELINE_MARK_CYCLES", std::string("1")},
                           {"HVD_FUSION_THRESHOLD", std::string("67108864")},
                           {"HVD_CYCLE_TIME", std::string("3.5")},
                           {"HVD_CACHE_CAPACITY", std::string("1024")},
                           {"HVD_LOG_LEVEL", std::string("trace")},
                           {"NCCL_SOCKET_IFNAME", std::string("eth0,ib0")},
                           {"MY_VAR", std::nullopt},
                           {"OTHER", std::string("x y")}};
  CHECK(v == want);
}

TEST_CASE("a user's NCCL_SOCKET_IFNAME wins over the chosen interfaces", "[unit]") {
  auto v = forwarded_env(Options{}, {"NCCL_SOCKET_IFNAME=ib0"}, {"eth0"});
  CHECK(v == std::vector<EnvVar>{{"NCCL_SOCKET_IFNAME", std::nullopt}});
}

TEST_CASE("-x of a variable not set here says how to fix it", "[unit]") {
  Options o;
  o.env = {"NOPE"};
  try {
    forwarded_env(o, {"PATH=/bin"}, {});
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()) ==
          "-x NOPE: NOPE is not set here; set it first or write -x NOPE=value");
  }
}

TEST_CASE("a launch's common fields come from the options, the plan and the environment",
          "[unit]") {
  Options o;
  o.ssh_port = 2222;
  o.ssh_identity = "/k";
  o.output_dir = "logs";
  o.command = {"./train"};
  LaunchSpec s =
      base_launch_spec(o, 3, {{"a", 2}, {"b", 1}}, false, true, {"PATH=/bin"}, open_mpi_profile(5));
  CHECK(s.np == 3);
  CHECK(format_host_list(s.hosts) == "a:2,b:1");
  CHECK_FALSE(s.all_local);
  CHECK(s.in_slurm_allocation);
  CHECK(s.as_root == (geteuid() == 0));
  CHECK(s.ssh_port == 2222);
  CHECK(s.ssh_identity == "/k");
  CHECK(s.output_dir == "logs");
  CHECK(s.command == Words{"./train"});
  CHECK(s.yield_when_idle);
  CHECK(s.mpi.major == 5);
  CHECK_FALSE(s.elastic);  // the elastic job sets it, as the network, env and wrapper
  CHECK(s.env.empty());
  CHECK(s.wrapper.empty());
  // Open MPI 5's TCP BTL stays on IPv4 (mpi_profile.cc), unless the user says otherwise.
  CHECK(s.mca == std::vector<std::pair<std::string, std::string>>{{"btl_tcp_disable_family", "6"}});
  CHECK(base_launch_spec(o, 1, {{"a", 1}}, true, false, {"OMPI_MCA_btl_tcp_disable_family=0"},
                         open_mpi_profile(5))
            .mca.empty());
  CHECK(base_launch_spec(o, 1, {{"a", 1}}, true, false, {}, open_mpi_profile(4)).mca.empty());
  // The user's own OMPI_MCA_mpi_yield_when_idle wins: hvdrun adds none.
  CHECK_FALSE(base_launch_spec(o, 1, {{"a", 1}}, true, false, {"OMPI_MCA_mpi_yield_when_idle=0"},
                               open_mpi_profile(4))
                  .yield_when_idle);
}

TEST_CASE("the rank wrapper's prefix carries the grace period, generation and heartbeat",
          "[unit]") {
  Options o;
  o.grace_period_s = 2.5;
  o.heartbeat_timeout_s = 30;
  CHECK(seconds_text(5) == "5");
  CHECK(seconds_text(0.25) == "0.25");
  CHECK(rank_wrapper_prefix("/bin/hvdrun", "10.0.0.1:7000", o, 4) ==
        Words{"/bin/hvdrun", "--rank-wrapper", "10.0.0.1:7000", "2.5", "4", "30", "--"});
}

TEST_CASE("the job's secrets are named on mpirun's command line, never given a value", "[unit]") {
  LaunchSpec s;
  s.np = 2;
  s.hosts = {{"localhost", 2}};
  // A user's `-x HVD_JOB_TOKEN=...` (or an HVD_* variable forwarded by default) gives way: the
  // values come from mpirun's environment, which hvdrun sets (SuperviseConfig::mpirun_env).
  s.env = {{"PATH", std::nullopt},
           {"HVD_JOB_TOKEN", std::string("0123456789abcdef0123456789abcdef")},
           {"HVD_ELASTIC_KEY", std::nullopt},
           {"HVD_LOG_LEVEL", std::string("info")}};
  s.secret_env = {kJobTokenVariable, "HVD_ELASTIC_KEY"};
  s.wrapper = rank_wrapper_prefix("/bin/hvdrun", "127.0.0.1:4000", Options{}, 0);
  s.command = {"./train"};
  const auto c = build_mpirun_command(s);
  for (const auto& word : c) {
    CHECK(word.find("0123456789abcdef") == std::string::npos);
    CHECK(word.find("HVD_JOB_TOKEN=") == std::string::npos);
  }
  auto x_of = [&c](const std::string& name) {
    int n = 0;
    for (size_t i = 0; i + 1 < c.size(); ++i) n += c[i] == "-x" && c[i + 1] == name;
    return n;
  };
  CHECK(x_of("HVD_JOB_TOKEN") == 1);
  CHECK(x_of("HVD_ELASTIC_KEY") == 1);
  CHECK(x_of("PATH") == 1);
  CHECK(x_of("HVD_LOG_LEVEL=info") == 1);
  // Named after the other -x entries and before the wrapper.
  const auto token_at = std::find(c.begin(), c.end(), "HVD_JOB_TOKEN") - c.begin();
  const auto wrapper_at = std::find(c.begin(), c.end(), "--rank-wrapper") - c.begin();
  CHECK(token_at < wrapper_at);
}
