// SPDX-License-Identifier: Apache-2.0
// The exact mpirun command line for a planned job.
#include "hvd/runner/launch_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace hvd::runner {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

LaunchSpec base_launch_spec(const Options& o, int np, std::vector<HostSlots> hosts, bool all_local,
                            bool in_slurm_allocation, const std::vector<std::string>& environ,
                            const MpiProfile& mpi) {
  LaunchSpec spec;
  spec.mpi = mpi;
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
  for (const auto& [name, value] : mpi.mca_defaults) {
    if (!sets_mca_param(environ, name)) spec.mca.emplace_back(name, value);
  }
  return spec;
}

std::vector<std::string> rank_wrapper_prefix(const std::string& self, const std::string& connect,
                                             const Options& o, int generation) {
  return {self,
          "--rank-wrapper",
          connect,
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
  const MpiProfile& m = s.mpi;
  std::vector<std::string> c{s.mpirun};
  auto add = [&c](const std::vector<std::string>& words) {
    c.insert(c.end(), words.begin(), words.end());
  };
  if (s.as_root) c.push_back("--allow-run-as-root");
  add({"-np", std::to_string(s.np), "-H", format_host_list(s.hosts)});
  add({"--bind-to", "none"});
  if (s.all_local) {
    add(m.oversubscribe);
  } else {
    if (s.in_slurm_allocation) add({m.runtime_mca, "plm", m.ssh_launcher});
    add({m.runtime_mca, m.ssh_agent_param, ssh_agent_command(s.ssh_port, s.ssh_identity)});
  }
  if (s.elastic && !m.sigkill_timeout.empty()) add({m.runtime_mca, m.sigkill_timeout, "0"});
  if (s.yield_when_idle) add({"--mca", "mpi_yield_when_idle", "1"});
  for (const auto& [name, value] : s.mca) add({"--mca", name, value});
  if (!s.mpi_interfaces.empty()) {
    std::string list;
    for (const auto& i : s.mpi_interfaces) list += (list.empty() ? "" : ",") + i;
    add({m.runtime_mca, m.oob_if_include, list, "--mca", "btl_tcp_if_include", list});
  }
  if (s.output_dir.empty()) {
    add(m.tag_output);
  } else {
    add(output_dir_words(m, s.output_dir));
  }
  for (const auto& e : s.env) {
    if (std::find(s.secret_env.begin(), s.secret_env.end(), e.name) != s.secret_env.end()) {
      continue;
    }
    c.push_back("-x");
    c.push_back(e.value ? e.name + "=" + *e.value : e.name);
  }
  for (const auto& name : s.secret_env) add({"-x", name});
  add(s.wrapper);
  add(s.command);
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
