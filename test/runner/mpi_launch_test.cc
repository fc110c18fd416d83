// SPDX-License-Identifier: Apache-2.0
// [mpi] hvdrun on localhost: runs the example, forwards exit codes, Ctrl-C leaves nothing.
#include <dirent.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "hvd_catch.h"

namespace {

// A running hvdrun with stdout+stderr captured.
struct Run {
  pid_t pid = -1;
  int fd = -1;
  std::string output;
  int code = -1;

  explicit Run(std::vector<std::string> args) {
    args.insert(args.begin(), HVDRUN_PATH);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    fd = fds[0];
  }
  ~Run() {
    if (code < 0 && pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (fd >= 0) close(fd);
  }
  // Reads until `count` occurrences of `text` or the timeout; true when seen.
  bool wait_for(const std::string& text, int count, double timeout_s) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (occurrences(text) < count) {
      if (std::chrono::steady_clock::now() > end) return false;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) return occurrences(text) >= count;
        output.append(buf, static_cast<size_t>(n));
      }
    }
    return true;
  }
  int wait_exit() {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) output.append(buf, static_cast<size_t>(n));
    int status = 0;
    waitpid(pid, &status, 0);
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return code;
  }
  int occurrences(const std::string& text) const {
    int n = 0;
    for (size_t at = output.find(text); at != std::string::npos; at = output.find(text, at + 1)) {
      ++n;
    }
    return n;
  }
};

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// Live (non-zombie) processes whose command line contains `marker`, from /proc.
int count_processes(const std::string& marker) {
  int n = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return -1;
  while (dirent* e = readdir(proc)) {
    std::string pid = e->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline("/proc/" + pid + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string st((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    bool zombie = st.find(") Z ") != std::string::npos;
    if (!zombie && cmd.find(marker) != std::string::npos) ++n;
  }
  closedir(proc);
  return n;
}

}  // namespace

TEST_CASE("hvdrun -np 2 runs the example and every line carries its rank", "[mpi]") {
  Run r({"-np", "2", PROBE_PATH});
  REQUIRE(r.wait_exit() == 0);
  INFO(r.output);
  CHECK(r.occurrences("[0]<stdout>: PROBE rank=0 size=2") == 1);
  CHECK(r.occurrences("[1]<stdout>: PROBE rank=1 size=2") == 1);
  CHECK(r.occurrences("hvd_hostname=" + hostname()) == 2);  // HVD_HOSTNAME is set for ranks
}

TEST_CASE("a rank exiting 3 makes hvdrun exit 3 and name the rank and host", "[mpi]") {
  auto t0 = std::chrono::steady_clock::now();
  Run r({"-np", "2", "--grace-period", "2", PROBE_PATH, "--exit-rank", "1", "--code", "3"});
  REQUIRE(r.wait_exit() == 3);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  CHECK(r.occurrences("hvdrun: job failed: rank 1 on host " + hostname() +
                      " failed first (exit code 3)") == 1);
  CHECK(s < 20);
}

TEST_CASE("SIGINT to hvdrun stops every rank and leaves no process behind", "[mpi]") {
  const std::string marker = "hvdrunsigint" + std::to_string(getpid());
  Run r({"-np", "2", PROBE_PATH, "--sleep", "60", "--marker", marker});
  REQUIRE(r.wait_for("PROBE ready", 2, 60));
  REQUIRE(count_processes(marker) >= 2);
  auto t0 = std::chrono::steady_clock::now();
  kill(r.pid, SIGINT);
  CHECK(r.wait_exit() == 130);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  CHECK_THAT(r.output, hvd::test::Contains("got SIGINT; stopping all ranks"));
  CHECK(count_processes(marker) == 0);
  CHECK(s < 10);
}

TEST_CASE("SIGTERM while a failed generation is stopped ends an elastic job, no restart", "[mpi]") {
  // Rank 1 exits 0 early (a failure in elastic mode); rank 0 ignores TERM, so the generation's
  // teardown lasts the grace period (4 s), and hvdrun gets SIGTERM inside it.
  Run r({"-np", "2", "--min-np", "2", "--grace-period", "4", "--reset-limit", "1", "sh", "-c",
         "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exit 0; fi; trap '' TERM; sleep 30"});
  REQUIRE(r.wait_for("exited 0 without returning from @hvd.elastic.run", 1, 60));
  kill(r.pid, SIGTERM);
  CHECK(r.wait_exit() == 143);
  INFO(r.output);
  CHECK_THAT(r.output, hvd::test::Contains("got SIGTERM; the ranks are being stopped"));
  CHECK_THAT(r.output, hvd::test::Contains("stopped by a signal; not restarting"));
  CHECK(r.occurrences("generation 1:") == 0);
}

TEST_CASE("bad input exits 2 with one line", "[mpi]") {
  Run r({"-np", "4", "-H", "localhost:2", PROBE_PATH});
  CHECK(r.wait_exit() == 2);
  CHECK(r.output ==
        "hvdrun: error: -np 4 needs 4 slots but the hosts have only 2 (localhost:2); add hosts "
        "or slots (host:slots) or lower -np\n");
  Run missing({"-np", "1", "./no-such-program"});
  CHECK(missing.wait_exit() == 2);
  CHECK_THAT(missing.output, hvd::test::Contains("program './no-such-program' not found"));
}

TEST_CASE("--dry-run prints the exact command and starts nothing", "[mpi]") {
  Run r({"--dry-run", "-np", "2", PROBE_PATH, "--marker", "dryrunmarker"});
  CHECK(r.wait_exit() == 0);
  CHECK_THAT(r.output, hvd::test::Contains("mpirun ") &&
                           hvd::test::Contains("-np 2 -H localhost:2 --bind-to none") &&
                           hvd::test::Contains("rank 1 -> localhost"));
  CHECK(r.occurrences("PROBE rank") == 0);
}
