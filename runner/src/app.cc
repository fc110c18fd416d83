// SPDX-License-Identifier: Apache-2.0
// The launcher's flow: parse, plan, preflight, build the mpirun command, supervise.

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "elastic_job.h"
#include "hvd/runner/cli.h"
#include "hvd/runner/control_server.h"
#include "hvd/runner/errors.h"
#include "hvd/runner/hosts.h"
#include "hvd/runner/launch_command.h"
#include "hvd/runner/local_system.h"
#include "hvd/runner/modes.h"
#include "hvd/runner/mpi_profile.h"
#include "hvd/runner/slurm.h"
#include "hvd/runner/state_dir.h"
#include "hvd/runner/supervisor.h"
#include "network_setup.h"

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

void check_program(const Options& o, const std::string& cwd, const std::string& path) {
  if (find_program(o.command[0], cwd, path).empty()) {
    throw UsageError("program '" + o.command[0] + "' not found " +
                     (o.command[0][0] == '/' ? std::string("(or not executable)")
                      : o.command[0].find('/') != std::string::npos
                          ? "(or not executable) relative to " + cwd
                          : std::string("in PATH")) +
                     "; check the path, build it first, or give its full path");
  }
}

// The spellings of the Open MPI behind `mpirun` in the PATH, asked once per hvdrun. A dry run
// without Open MPI here still prints a command (Open MPI 4's, said so); a launch fails.
MpiProfile detect_mpi_profile(const Options& o) {
  const std::string mpirun = LaunchSpec().mpirun;
  if (auto major = open_mpi_major(mpirun)) return open_mpi_profile(*major);
  const std::string what = "'" + mpirun + " --version' did not name Open MPI (is it installed " +
                           "and in the PATH, and not another MPI's mpirun?)";
  if (!o.dry_run) throw std::runtime_error(what + "; hvdrun launches through Open MPI 4.1 or 5");
  std::cerr << "hvdrun: " << what << "; showing Open MPI 4's command\n";
  return open_mpi_profile(4);
}

std::vector<std::string> environ_entries() {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

// Elastic mode: the host source and limits, then generations (elastic_job.h).
int launch_elastic(const Options& o, const std::optional<SlurmAllocation>& alloc,
                   const std::string& own, const std::string& cwd, const std::string& path) {
  ElasticJob job;
  job.options = o;
  job.max_np = o.max_np > 0 ? o.max_np : o.np;
  if (o.host_discovery_script.empty()) {
    auto requested = read_requested_hosts(o);
    if (alloc) {
      auto plan = plan_in_allocation(*alloc, o.np, requested, own);
      job.static_hosts = plan.hosts;
      if (o.max_np == 0) job.max_np = plan.np;
    } else if (!requested.empty()) {
      job.static_hosts = requested;
    } else {
      const int slots = std::max(o.np, o.max_np);
      if (slots == 0) {
        throw UsageError(
            "elastic mode on this machine needs -np N or --max-np N (the slots); "
            "for other hosts give -H, --hostfile or --host-discovery-script");
      }
      job.static_hosts = {{"localhost", slots}};
    }
  }
  const StateBase base = choose_state_base(o.elastic_state_dir);
  job.options.elastic_state_dir = base.dir;
  job.state_base_why = base.why;
  if (o.dry_run) {
    std::cerr << "hvdrun: elastic: hosts "
              << (job.static_hosts.empty() ? "from " + o.host_discovery_script
                                           : format_host_list(job.static_hosts))
              << ", --min-np " << o.min_np << ", --max-np "
              << (job.max_np > 0 ? std::to_string(job.max_np) : std::string("every slot"))
              << " (nothing started with --dry-run)\n";
    return kExitOk;
  }
  job.in_slurm_allocation = alloc.has_value();
  job.own_hostname = own;
  job.self = self_executable();
  job.cwd = cwd;
  job.path = path;
  job.token = random_token();
  job.environ_entries = environ_entries();
  job.mpi = detect_mpi_profile(o);
  boost::asio::io_context io;
  ControlServer server(io, job.token);
  server.start({"127.0.0.1"});  // a generation with remote hosts widens it (elastic_job.cc)
  if (o.verbose) std::cerr << "hvdrun: listening on " << server.describe() << "\n";
  return run_elastic_job(io, server, job);
}

int launch(const Options& o) {
  const std::string own = local_hostname();
  std::optional<SlurmAllocation> alloc;
  if (!o.no_slurm) alloc = slurm_allocation(read_slurm_env());
  const std::string cwd = current_directory();
  const std::string path = getenv_or("PATH", "/usr/bin:/bin");
  if (o.elastic()) {
    check_program(o, cwd, path);
    return launch_elastic(o, alloc, own, cwd, path);
  }
  const SlurmPlan plan = plan_hosts(o, alloc, own);
  const int np = plan.np;
  auto used = assign_slots(plan.hosts, np);
  check_program(o, cwd, path);
  std::vector<std::string> remote;
  for (const auto& h : used) {
    if (!is_local_host(h.name, own)) remote.push_back(h.name);
  }
  const bool all_local = remote.empty();
  const std::string self = self_executable();
  const std::string token = random_token();
  const std::vector<std::string> env_entries = environ_entries();

  const MpiProfile mpi = detect_mpi_profile(o);
  if (o.verbose) std::cerr << "hvdrun: mpirun is " << mpi.name << "\n";
  LaunchSpec spec = base_launch_spec(o, np, used, all_local, alloc.has_value(), env_entries, mpi);
  std::vector<std::string> nccl_names;
  for (const auto& i : o.network_interfaces) {
    spec.mpi_interfaces.push_back(i);
    if (i.find('/') == std::string::npos) nccl_names.push_back(i);
  }

  if (o.dry_run) {
    print_plan(used, all_local);
    if (!all_local && o.network_interfaces.empty()) {
      std::cerr << "hvdrun: (the preflight would check " << remote.size()
                << " remote host(s) and choose the network; not run with --dry-run)\n";
    }
    spec.env = forwarded_env(o, env_entries, nccl_names);
    spec.wrapper =
        rank_wrapper_prefix(self, all_local ? "127.0.0.1:<port>" : "<master>:<port>", o, 0);
    spec.secret_env = {kJobTokenVariable};
    std::cout << shell_join(build_mpirun_command(spec)) << "\n";
    return kExitOk;
  }
  if (o.verbose) print_plan(used, all_local);

  boost::asio::io_context io;
  ControlServer server(io, token);
  // The agents connect back to this machine's addresses; the ranks then use those chosen.
  server.start(all_local ? std::vector<std::string>{"127.0.0.1"} : preflight_listen_addresses());
  if (o.verbose) {
    std::cerr << "hvdrun: listening on " << server.describe()
              << (all_local ? "" : " for the preflight") << "\n";
  }
  NetworkSetup net = prepare_network(
      io, o, {remote, server.port(), token, self, cwd, path, mpi, {}, server.addresses()});
  if (!net.ok) {
    std::cerr << net.report;
    return kExitPreflight;
  }
  listen_only_on(server, net.wrapper_addresses, o.verbose, "for the ranks");
  spec.mpi_interfaces = net.mpi_interfaces;
  nccl_names = net.nccl_names;
  const std::string connect = wrapper_connect_list(net.wrapper_addresses, server.port());
  spec.env = forwarded_env(o, env_entries, nccl_names);
  spec.wrapper = rank_wrapper_prefix(self, connect, o, 0);
  spec.secret_env = {kJobTokenVariable};
  SuperviseConfig sc;
  sc.mpirun_argv = build_mpirun_command(spec);
  sc.mpirun_env = {{kJobTokenVariable, token}};
  sc.tag_end = mpi.tag_end;
  sc.np = np;
  sc.grace_s = o.grace_period_s;
  sc.verbose = o.verbose;
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
