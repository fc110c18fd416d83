// SPDX-License-Identifier: Apache-2.0
// The launcher's flow: parse, plan, preflight, build the mpirun command, supervise.
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "hvd/runner/cli.h"
#include "hvd/runner/control_server.h"
#include "hvd/runner/elastic.h"
#include "hvd/runner/errors.h"
#include "hvd/runner/hosts.h"
#include "hvd/runner/interfaces.h"
#include "hvd/runner/launch_command.h"
#include "hvd/runner/local_system.h"
#include "hvd/runner/modes.h"
#include "hvd/runner/preflight.h"
#include "hvd/runner/slurm.h"
#include "hvd/runner/supervisor.h"

extern char** environ;

namespace hvd::runner {
namespace {

// The hosts of -H or --hostfile; empty when neither was given.
std::vector<HostSlots> read_requested_hosts(const Options& o) {
  if (!o.hostfile.empty()) {
    std::ifstream in(o.hostfile);
    if (!in) {
      throw UsageError("cannot read hostfile '" + o.hostfile +
                       "'; check the path (lines look like 'node1 slots=4')");
    }
    std::stringstream text;
    text << in.rdbuf();
    return parse_hostfile(text.str(), o.hostfile);
  }
  if (!o.hosts.empty()) return parse_host_list(o.hosts);
  return {};
}

std::string getenv_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// The Slurm variables hvdrun reads, each with the older spelling as fallback.
SlurmEnv read_slurm_env() {
  return {getenv_or("SLURM_JOB_ID", getenv_or("SLURM_JOBID", "").c_str()),
          getenv_or("SLURM_JOB_NODELIST", getenv_or("SLURM_NODELIST", "").c_str()),
          getenv_or("SLURM_TASKS_PER_NODE", ""),
          getenv_or("SLURM_NTASKS", getenv_or("SLURM_NPROCS", "").c_str())};
}

bool slurm_env_present() {
  SlurmEnv e = read_slurm_env();
  return !e.job_id.empty() && !e.nodelist.empty();
}

// The hosts (with slots) and rank count to launch: the Slurm allocation when there is one
// (checked against -np/-H), else -np with -H/--hostfile or this machine.
SlurmPlan plan_hosts(const Options& o, const std::optional<SlurmAllocation>& alloc,
                     const std::string& own) {
  auto requested = read_requested_hosts(o);
  if (alloc) {
    auto plan = plan_in_allocation(*alloc, o.np, requested, own);
    if (o.verbose || o.dry_run) {
      std::cerr << "hvdrun: inside Slurm " << describe_allocation(*alloc) << "\n";
    }
    return plan;
  }
  if (o.np == 0) throw UsageError("missing -np: give the number of ranks, e.g. -np 4");
  if (requested.empty()) return {{{"localhost", o.np}}, o.np};
  return {requested, o.np};
}

void print_plan(const std::vector<HostSlots>& used, bool all_local) {
  std::cerr << "hvdrun: plan: " << (all_local ? "this machine only" : "hosts ")
            << (all_local ? "" : format_host_list(used)) << "\n";
  for (const auto& p : place_ranks(used)) {
    std::cerr << "  rank " << p.rank << " -> " << p.host << " (local rank " << p.local_rank
              << ")\n";
  }
}

// Elastic mode: one mpirun per generation until one succeeds or the policy gives up
// (elastic.h); the ranks' committed state lives in /dev/shm between generations.
int run_generations(boost::asio::io_context& io, ControlServer& server, const LaunchSpec& spec,
                    SuperviseConfig sc, const Options& o, const std::string& token) {
  const std::string dir = "/dev/shm/hvd-elastic-" + token;
  int resets = 0;
  int code = kExitLaunch;
  for (int generation = 0;; ++generation) {
    LaunchSpec g = spec;
    for (auto& e : elastic_env(dir, generation)) g.env.push_back(e);
    sc.mpirun_argv = build_mpirun_command(g);
    sc.elastic = true;
    if (o.verbose)
      std::cerr << "hvdrun: generation " << generation << ": " << shell_join(sc.mpirun_argv)
                << "\n";
    std::cerr << std::flush;
    GenerationOutcome outcome;
    supervise(io, server, sc, &outcome);
    ElasticDecision d = decide_after_generation(outcome, resets, o.reset_limit);
    if (!d.message.empty()) std::cerr << d.message << "\n" << std::flush;
    code = d.exit_code;
    if (d.step != NextStep::kRestart) break;
    ++resets;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return code;
}

int launch(const Options& o) {
  const std::string own = local_hostname();
  std::optional<SlurmAllocation> alloc;
  if (!o.no_slurm) alloc = slurm_allocation(read_slurm_env());
  const SlurmPlan plan = plan_hosts(o, alloc, own);
  const int np = plan.np;
  auto used = assign_slots(plan.hosts, np);
  const std::string cwd = current_directory();
  const std::string path = getenv_or("PATH", "/usr/bin:/bin");
  if (find_program(o.command[0], cwd, path).empty()) {
    throw UsageError("program '" + o.command[0] + "' not found " +
                     (o.command[0][0] == '/' ? std::string("(or not executable)")
                      : o.command[0].find('/') != std::string::npos
                          ? "(or not executable) relative to " + cwd
                          : std::string("in PATH")) +
                     "; check the path, build it first, or give its full path");
  }
  const std::string own_short = own.substr(0, own.find('.'));
  std::vector<std::string> remote;
  for (const auto& h : used) {
    if (!is_local_host(h.name, own) && h.name != own_short) remote.push_back(h.name);
  }
  const bool all_local = remote.empty();
  if (o.min_np > 0 && !all_local) {
    throw UsageError(
        "--min-np: elastic mode runs on this machine only so far (multi-host "
        "elastic is not done yet, docs/elastic.md); drop -H/--hostfile");
  }
  const std::string self = self_executable();
  const std::string token = random_token();
  std::vector<std::string> environ_entries;
  for (char** e = environ; *e != nullptr; ++e) environ_entries.emplace_back(*e);

  LaunchSpec spec;
  spec.np = np;
  spec.hosts = used;
  spec.all_local = all_local;
  spec.in_slurm_allocation = alloc.has_value();
  spec.as_root = geteuid() == 0;
  spec.ssh_port = o.ssh_port;
  spec.ssh_identity = o.ssh_identity;
  spec.output_dir = o.output_dir;
  spec.command = o.command;
  std::vector<std::string> nccl_names;
  for (const auto& i : o.network_interfaces) {
    spec.mpi_interfaces.push_back(i);
    if (i.find('/') == std::string::npos) nccl_names.push_back(i);
  }
  char grace[32];
  std::snprintf(grace, sizeof grace, "%g", o.grace_period_s);

  if (o.dry_run) {
    print_plan(used, all_local);
    if (!all_local && o.network_interfaces.empty()) {
      std::cerr << "hvdrun: (the preflight would check " << remote.size()
                << " remote host(s) and choose the network; not run with --dry-run)\n";
    }
    spec.env = forwarded_env(o, environ_entries, nccl_names);
    spec.wrapper = {self,
                    "--rank-wrapper",
                    all_local ? "127.0.0.1:<port>" : "<master>:<port>",
                    "<token>",
                    grace,
                    "--"};
    std::cout << shell_join(build_mpirun_command(spec)) << "\n";
    return kExitOk;
  }
  if (o.verbose) print_plan(used, all_local);

  boost::asio::io_context io;
  ControlServer server(io, token);
  server.start();
  std::vector<std::string> wrapper_addresses;
  PreflightResult pre;
  if (!all_local) {
    PreflightConfig pc;
    pc.hosts = remote;
    pc.ssh_port = o.ssh_port;
    pc.ssh_identity = o.ssh_identity;
    pc.timeout_s = o.start_timeout_s;
    pc.hvdrun_path = self;
    pc.program = o.command[0];
    pc.cwd = cwd;
    pc.path_env = path;
    auto master_ifaces = local_interfaces();
    for (const auto& i : master_ifaces) {
      if (!is_loopback(i)) pc.master_addresses.push_back(i.address);
    }
    pc.listener_port = server.port();
    pc.token = token;
    pre = run_preflight(io, pc);
    std::vector<HostNetwork> nets;
    for (const auto& h : pre.hosts) {
      nets.push_back({h.host, h.report.interfaces, h.report.reached});
    }
    InterfaceChoice choice;
    if (pre.ok()) {
      choice = choose_interfaces(master_ifaces, nets);
      if (!choice.error.empty() && o.network_interfaces.empty()) {
        pre.hosts.front().problems.push_back(choice.error);
      }
    }
    if (o.verbose) {
      for (const auto& h : pre.hosts) {
        std::fprintf(stderr, "hvdrun: preflight %s: %s in %.2f s\n", h.host.c_str(),
                     h.problems.empty() ? "ok" : "FAILED", h.seconds);
      }
    }
    if (!pre.ok()) {
      std::cerr << format_preflight_report(pre);
      return kExitPreflight;
    }
    if (o.network_interfaces.empty()) {
      spec.mpi_interfaces = choice.cidrs;
      nccl_names = choice.nccl_ifnames;
      wrapper_addresses = choice.master_addresses;
    } else {
      // The user chose the network; wrappers use any master address every host reached.
      for (const auto& a : pc.master_addresses) {
        bool all = true;
        for (const auto& n : nets) {
          all = all && std::find(n.reached.begin(), n.reached.end(), a) != n.reached.end();
        }
        if (all) wrapper_addresses.push_back(a);
      }
    }
    if (o.verbose) {
      std::fprintf(stderr, "hvdrun: preflight passed for %zu host(s) in %.2f s\n", pre.hosts.size(),
                   pre.seconds);
    }
  }
  wrapper_addresses.push_back("127.0.0.1");
  std::string connect;
  for (const auto& a : wrapper_addresses) {
    connect += (connect.empty() ? "" : ",") + a + ":" + std::to_string(server.port());
  }
  spec.env = forwarded_env(o, environ_entries, nccl_names);
  spec.wrapper = {self, "--rank-wrapper", connect, token, grace, "--"};
  SuperviseConfig sc;
  sc.mpirun_argv = build_mpirun_command(spec);
  sc.np = np;
  sc.grace_s = o.grace_period_s;
  sc.verbose = o.verbose;
  if (o.min_np > 0) return run_generations(io, server, spec, sc, o, token);
  if (o.verbose) std::cerr << "hvdrun: " << shell_join(sc.mpirun_argv) << "\n";
  std::cerr << std::flush;
  return supervise(io, server, sc);
}

}  // namespace

int run_launcher(const std::vector<std::string>& args) {
  try {
    ParsedCommandLine p = parse_command_line(args, slurm_env_present());
    if (p.help) {
      std::cout << p.help_text;
      return kExitOk;
    }
    if (p.options.check_build) return run_check_build();
    return launch(p.options);
  } catch (const UsageError& e) {
    std::cerr << "hvdrun: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "hvdrun: error: " << e.what() << "\n";
    return kExitLaunch;
  }
}

}  // namespace hvd::runner
