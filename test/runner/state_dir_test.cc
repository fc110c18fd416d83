// SPDX-License-Identifier: Apache-2.0
// [unit][local] the elastic job's state base, directory name, key and free-space warning.
#include "hvd/runner/state_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "hvd/runner/agent_report.h"
#include "hvd/runner/errors.h"
#include "hvd_catch.h"

using namespace hvd::runner;

namespace {

bool all_hex(const std::string& s) {
  return s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

TEST_CASE("the state directory's name and the key are fresh random hex, not each other", "[unit]") {
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    const std::string dir = new_state_dir_name("/dev/shm");
    REQUIRE(dir.rfind("/dev/shm/hvd-elastic-", 0) == 0);
    const std::string random = dir.substr(std::string("/dev/shm/hvd-elastic-").size());
    CHECK(random.size() == 32);
    CHECK(all_hex(random));
    const std::string key = new_elastic_key();
    CHECK(key.size() == 64);
    CHECK(all_hex(key));
    CHECK(key.find(random) == std::string::npos);
    CHECK(seen.insert(random).second);
    CHECK(seen.insert(key).second);
  }
}

TEST_CASE("/dev/shm is the base when it is safe and has 1 GiB free, else /var/tmp", "[unit]") {
  const uint64_t gib = uint64_t{1} << 30;
  auto roomy = pick_state_base("", 24 * gib);
  CHECK(roomy.dir == "/dev/shm");
  CHECK(roomy.why.find("24.0 GiB free") != std::string::npos);
  auto docker = pick_state_base("", 64ull << 20);
  CHECK(docker.dir == "/var/tmp");
  CHECK(docker.why.find("/dev/shm has only 64.0 MiB free") != std::string::npos);
  CHECK(pick_state_base("", gib).dir == "/dev/shm");
  CHECK(pick_state_base("", gib - 1).dir == "/var/tmp");
  CHECK(pick_state_base("", std::nullopt).dir == "/var/tmp");
  auto unsafe = pick_state_base("'/dev/shm' (mode 0777) lets other users write", 24 * gib);
  CHECK(unsafe.dir == "/var/tmp");
  CHECK(unsafe.why.find("mode 0777") != std::string::npos);
}

TEST_CASE("the free-space warning names the host, the directory and both sizes", "[unit]") {
  CHECK(size_text(112) == "112 bytes");
  CHECK(size_text(8192) == "8.0 KiB");
  CHECK(size_text(64ull << 20) == "64.0 MiB");
  CHECK(size_text(24ull << 30) == "24.0 GiB");
  CHECK(low_space_warning("host a", "/dev/shm/hvd-elastic-x", 300 << 20, 300 << 20).empty());
  const std::string w = low_space_warning("host a", "/dev/shm/hvd-elastic-x", 40 << 20, 100 << 20);
  CHECK(w ==
        "hvdrun: elastic: host a: /dev/shm/hvd-elastic-x has 40.0 MiB free, the last commit took "
        "100.0 MiB; the next commit there will fail (free space, or give hvdrun "
        "--elastic-state-dir a larger file system)");
}

TEST_CASE("a remote /dev/shm below the default's rule is warned about in the preflight", "[unit]") {
  const long long gib = 1ll << 30;
  CHECK(remote_base_warning("n1", "/dev/shm", 2 * gib).empty());
  CHECK(remote_base_warning("n1", "/dev/shm", -1).empty());
  CHECK(remote_base_warning("n1", "/scratch", 1 << 20).empty());  // the user's choice
  CHECK(remote_base_warning("n1", "/dev/shm", 64ll << 20) ==
        "hvdrun: elastic: host n1: /dev/shm has only 64.0 MiB free (this machine's has at least "
        "1.0 GiB, so it is the job's state base); a commit larger than that fails there: give "
        "hvdrun --elastic-state-dir /var/tmp (or another directory on every host)");
}

TEST_CASE("the agent's report carries the state base's check", "[unit]") {
  AgentReport r;
  r.hostname = "h";
  r.state_base_checked = true;
  r.state_base_free = 1234;
  auto back = parse_agent_report(format_agent_report(r));
  CHECK(back.complete);
  CHECK(back.state_base_checked);
  CHECK(back.state_base_free == 1234);
  CHECK(back.state_base_problem.empty());
  r.state_base_problem = "'/scratch' is not a directory";
  r.state_base_free = -1;
  back = parse_agent_report(format_agent_report(r));
  CHECK(back.state_base_problem == "'/scratch' is not a directory");
  CHECK(back.state_base_free == -1);
  CHECK_FALSE(parse_agent_report(format_agent_report(AgentReport{})).state_base_checked);
}

TEST_CASE("a base others can write to must be sticky; a missing one is refused", "[local]") {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/hvd-state-base-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl;
  const std::string open_dir = root + "/open", sticky = root + "/sticky", own = root + "/own";
  for (const auto& d : {open_dir, sticky, own}) REQUIRE(::mkdir(d.c_str(), 0700) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0777) == 0);
  REQUIRE(::chmod(sticky.c_str(), 01777) == 0);
  REQUIRE(::chmod(own.c_str(), 0755) == 0);

  const std::string open_problem = state_base_problem(open_dir);
  CHECK(open_problem.find("mode 0777") != std::string::npos);
  CHECK(open_problem.find("not sticky") != std::string::npos);
  CHECK(state_base_problem(sticky).empty());
  CHECK(state_base_problem(own).empty());
  CHECK(state_base_problem(root + "/missing").find("No such file") != std::string::npos);
  CHECK_THROWS_AS(choose_state_base(open_dir), UsageError);
  CHECK(choose_state_base(sticky).dir == sticky);
  CHECK(choose_state_base("").dir.size() > 0);
  CHECK(free_bytes(sticky).has_value());
  fs::remove_all(root);
}
