// SPDX-License-Identifier: Apache-2.0
// The exact mpirun command line for a planned job.
#include "hvd/runner/launch_command.h"

#include <unistd.h>

#include <cstdio>

namespace hvd::runner {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

LaunchSpec base_launch_spec(const Options& o, int np, std::vector<HostSlots> hosts, bool all_local,
                            bool in_slurm_allocation, const std::vector<std::string>& environ) {
  LaunchSpec spec;
  spec.np = np;
  spec.hosts = std::move(hosts);
  spec.all_local = all_local;
  spec.in_slurm_allocation = in_slurm_allocation;
  spec.as_root = geteuid() == 0;
  spec.ssh_port = o.ssh_port;
  spec.ssh_identity = o.ssh_identity;
  spec.output_dir = o.output_dir;
  spec.command = o.command;
  spec.yield_when_idle = !sets_mca_param(environ, "mpi_yield_when_idle");
  return spec;
}

std::vector<std::string> rank_wrapper_prefix(const std::string& self, const std::string& connect,
                                             const std::string& token, const Options& o,
                                             int generation) {
  return {self,
          "--rank-wrapper",
          connect,
          token,
          seconds_text(o.grace_period_s),
          std::to_string(generation),
          seconds_text(o.heartbeat_timeout_s),
          "--"};
}

std::string ssh_agent_command(int ssh_port, const std::string& identity) {
  std::string cmd = "ssh -o BatchMode=yes";
  if (ssh_port > 0) cmd += " -p " + std::to_string(ssh_port);
  if (!identity.empty()) cmd += " -i " + shell_quote(identity);
  return cmd;
}

std::vector<std::string> build_mpirun_command(const LaunchSpec& s) {
  std::vector<std::string> c{s.mpirun};
  if (s.as_root) c.push_back("--allow-run-as-root");
  c.insert(c.end(), {"-np", std::to_string(s.np), "-H", format_host_list(s.hosts)});
  c.insert(c.end(), {"--bind-to", "none"});
  if (s.all_local) {
    c.push_back("--oversubscribe");
  } else {
    if (s.in_slurm_allocation) c.insert(c.end(), {"--mca", "plm", "rsh"});
    c.insert(c.end(), {"--mca", "plm_rsh_agent", ssh_agent_command(s.ssh_port, s.ssh_identity)});
  }
  if (s.elastic) c.insert(c.end(), {"--mca", "odls_base_sigkill_timeout", "0"});
  if (s.yield_when_idle) c.insert(c.end(), {"--mca", "mpi_yield_when_idle", "1"});
  if (!s.mpi_interfaces.empty()) {
    std::string list;
    for (const auto& i : s.mpi_interfaces) list += (list.empty() ? "" : ",") + i;
    c.insert(c.end(), {"--mca", "oob_tcp_if_include", list, "--mca", "btl_tcp_if_include", list});
  }
  if (s.output_dir.empty()) {
    c.push_back("--tag-output");
  } else {
    c.insert(c.end(), {"--output-filename", s.output_dir});
  }
  for (const auto& e : s.env) {
    c.push_back("-x");
    c.push_back(e.value ? e.name + "=" + *e.value : e.name);
  }
  c.insert(c.end(), s.wrapper.begin(), s.wrapper.end());
  c.insert(c.end(), s.command.begin(), s.command.end());
  return c;
}

bool sets_mca_param(const std::vector<std::string>& environ, const std::string& param) {
  const std::string prefix = "OMPI_MCA_" + param + "=";
  for (const auto& e : environ) {
    if (e.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

std::string shell_quote(const std::string& w) {
  if (w.empty()) return "''";
  bool plain = true;
  for (char c : w) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::string("_-./:=,@%+").find(c) != std::string::npos;
    if (!ok) plain = false;
  }
  if (plain) return w;
  std::string out = "'";
  for (char c : w) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

}  // namespace hvd::runner
