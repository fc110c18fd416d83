// SPDX-License-Identifier: Apache-2.0
// Queries about this machine: hostname, interfaces, own path, program lookup, tokens, the
// Open MPI version.
#include "hvd/runner/local_system.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bitset>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "hvd/runner/launch_command.h"
#include "hvd/runner/mpi_profile.h"

namespace hvd::runner {

std::string local_hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::vector<Interface> local_interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0) continue;
    char addr[INET_ADDRSTRLEN] = {};
    auto* sin = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    inet_ntop(AF_INET, &sin->sin_addr, addr, sizeof addr);
    int prefix = 32;
    if (i->ifa_netmask != nullptr) {
      auto* mask = reinterpret_cast<sockaddr_in*>(i->ifa_netmask);
      prefix = static_cast<int>(std::bitset<32>(ntohl(mask->sin_addr.s_addr)).count());
    }
    out.push_back({i->ifa_name, addr, prefix});
  }
  freeifaddrs(list);
  return out;
}

std::string self_executable() {
  char buf[PATH_MAX + 1] = {};
  ssize_t n = readlink("/proc/self/exe", buf, PATH_MAX);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "hvdrun";
}

namespace {
bool executable_file(const std::string& p) {
  struct stat st = {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}
}  // namespace

std::string find_program(const std::string& program, const std::string& cwd,
                         const std::string& path) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) {
    std::string p = program[0] == '/' ? program : cwd + "/" + program;
    return executable_file(p) ? p : "";
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = cwd;
    std::string p = dir + "/" + program;
    if (executable_file(p)) return p;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return "";
}

std::string current_directory() {
  char buf[PATH_MAX + 1] = {};
  return getcwd(buf, PATH_MAX) ? std::string(buf) : std::string(".");
}

std::string random_token() {
  // The kernel's CSPRNG (getrandom(2)) for a job's secrets: std::random_device's source is the
  // library's choice.
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  char buf[33];
  for (size_t i = 0; i < sizeof bytes; ++i) std::snprintf(buf + 2 * i, 3, "%02x", bytes[i]);
  return buf;
}

std::optional<int> open_mpi_major(const std::string& mpirun) {
  FILE* f = popen((shell_quote(mpirun) + " --version 2>/dev/null").c_str(), "r");
  if (f == nullptr) return std::nullopt;
  std::string out;
  char buf[256];
  while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  pclose(f);
  return parse_open_mpi_major(out);
}

}  // namespace hvd::runner
