// SPDX-License-Identifier: Apache-2.0
// hvdrun's command line: CLI11 definitions and validation.
#include "hvd/runner/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>

#include "hvd/runner/errors.h"

namespace hvd::runner {
namespace {

constexpr const char* kUsage = "hvdrun -np N [-H host:slots,...] [options] program [args...]";
constexpr const char* kFooter = R"(Examples:
  hvdrun -np 4 ./train                      4 ranks on this machine
  hvdrun -np 8 -H a:4,b:4 ./train --lr 0.1  4 ranks on host a, 4 on host b (slot-major order)
  hvdrun -np 8 --hostfile hosts.txt --dry-run ./train
  salloc -N 2 -n 8 hvdrun ./train           in a Slurm allocation: its nodes and tasks
Inside a Slurm allocation (salloc, sbatch: SLURM_JOB_NODELIST set) -np and -H may be left out:
the allocation gives the hosts and slots; -np/-H may ask for part of it, never more.
Before launching, every remote host is checked in parallel (DNS, ssh port, key login, host key,
program, mpirun and Open MPI's daemon present (orted; Open MPI 5: prted), which network reaches
the master); one report lists all problems.
Each output line is prefixed with its rank: [3]<stdout>: ...
Exit codes: 0 all ranks succeeded; 2 bad command line; 4 preflight failed; 5 mpirun failed
without a rank's code; 130/143 interrupted (SIGINT/SIGTERM); otherwise the exit code of the
first rank that failed (128+N when killed by signal N).)";

void build_app(CLI::App& app, Options& o) {
  app.prefix_command();
  app.footer(kFooter);
  app.get_formatter()->column_width(38);
  app.add_option("-n,--np", o.np, "Number of ranks (also spelled -np)");
  app.add_option("-H,--hosts", o.hosts,
                 "Hosts and slots: host1:slots,host2:slots (slots default 1; localhost or no -H "
                 "= this machine with N slots)");
  app.add_option("--hostfile", o.hostfile,
                 "File of 'host slots=N' lines ('#' comments); instead of -H");
  app.add_option("-p,--ssh-port", o.ssh_port, "SSH port on every host (default: ssh's own)");
  app.add_option("-i,--ssh-identity-file", o.ssh_identity, "SSH private key to log in with");
  app.add_option("--network-interface", o.network_interfaces,
                 "IF[,IF] interface names or CIDRs for MPI (oob/btl tcp) and NCCL "
                 "(NCCL_SOCKET_IFNAME); default: chosen by the preflight")
      ->delimiter(',')
      ->allow_extra_args(false);
  app.add_option("-x,--env", o.env,
                 "VAR or VAR=value: forward/set on every rank (repeatable). Always forwarded: "
                 "PATH, LD_LIBRARY_PATH, PYTHONPATH, CUDA_VISIBLE_DEVICES, HVD_*, HOROVOD_*, "
                 "NCCL_*")
      ->allow_extra_args(false);
  app.add_option("--start-timeout", o.start_timeout_s,
                 "Seconds each host's preflight may take (default 30)");
  app.add_option("--grace-period", o.grace_period_s,
                 "Seconds between TERM and KILL when stopping the job (default 5)");
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout_s,
                 "Seconds a rank's wrapper waits without hearing from hvdrun (it pings every "
                 "second) before it stops the rank as if hvdrun had died, e.g. hvdrun's host "
                 "frozen or cut off (default 30; 0 = off)");
  app.add_option("--output-filename", o.output_dir,
                 "Directory for per-rank stdout/stderr files instead of the terminal "
                 "(DIR/1/rank.N/{stdout,stderr}, written on the rank's host)");
  app.add_option("--timeline-filename", o.timeline, "Write a timeline here (HVD_TIMELINE)");
  app.add_flag("--timeline-mark-cycles", o.timeline_mark_cycles,
               "Mark every negotiation round in the timeline (HVD_TIMELINE_MARK_CYCLES=1)");
  app.add_option("--fusion-threshold-mb", o.fusion_threshold_mb,
                 "Tensor fusion buffer in MiB (HVD_FUSION_THRESHOLD, in bytes)");
  app.add_option("--cycle-time-ms", o.cycle_time_ms,
                 "Background loop cycle time in ms (HVD_CYCLE_TIME)");
  app.add_option("--cache-capacity", o.cache_capacity,
                 "Response cache entries, 0 disables (HVD_CACHE_CAPACITY)");
  app.add_option("--log-level", o.log_level,
                 "trace, debug, info, warning, error or fatal (HVD_LOG_LEVEL)");
  app.add_flag("--verbose", o.verbose, "Print the plan, preflight timings and mpirun command");
  app.add_flag("--dry-run", o.dry_run,
               "Print the plan and the exact launch command; start nothing");
  app.add_flag("--no-slurm", o.no_slurm,
               "Ignore a Slurm allocation: plan from -np/-H alone, as outside Slurm");
  app.add_option("--min-np", o.min_np,
                 "Elastic mode: run in generations (each on the hosts alive then), restarting "
                 "from the last commit after a failure or a host change; start a generation once "
                 "this many slots exist (docs/elastic.md)");
  app.add_option("--max-np", o.max_np,
                 "Elastic mode: at most this many ranks (default: -np, else every slot)");
  app.add_option("--slots-per-host", o.slots_per_host,
                 "Elastic mode: slots of a discovered host that lists none (default 1)");
  app.add_option("--host-discovery-script", o.host_discovery_script,
                 "Elastic mode: program printing the available hosts, one 'host[:slots]' a "
                 "line; run every second (implies --min-np -np when --min-np is not given)");
  app.add_option("--elastic-timeout", o.elastic_timeout,
                 "Elastic mode: seconds to wait for --min-np slots before giving up (default 600)");
  app.add_option("--blacklist-cooldown-range", o.blacklist_cooldown_range,
                 "Elastic mode: MIN MAX seconds: a failed host returns after a cooldown from MIN, "
                 "doubling with each failure, up to MAX (default: never returns)")
      ->expected(2)
      ->allow_extra_args(false);
  app.add_option("--reset-limit", o.reset_limit,
                 "Elastic mode: give up after this many restarts (default: no limit)");
  app.add_option("--max-restarts-without-progress", o.max_restarts_without_progress,
                 "Elastic mode: end the job when this many restarts in a row followed "
                 "generations that failed before any new commit and the next one fails so too "
                 "(default 3; -1 = no limit)");
  app.add_option("--elastic-step-timeout", o.step_timeout_s,
                 "Elastic mode: a rank that makes no progress (no collective completed, no "
                 "commit) for this many seconds is handled like a dead one (default 300; 0 = "
                 "off; docs/elastic.md)")
      ->envname("HVD_ELASTIC_STEP_TIMEOUT");
  app.add_option("--elastic-state-dir", o.elastic_state_dir,
                 "Elastic mode: the directory (on every host) in which the job creates its "
                 "private state directory; it must exist and, if others can write to it, be "
                 "sticky (default: /dev/shm when it has 1 GiB free, else /var/tmp)");
  app.add_flag("--check-build", o.check_build,
               "Print what this build has (MPI, NCCL, CUDA, libtorch, Python) and exit");
}

bool valid_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

void validate_elastic(const Options& o) {
  if (o.min_np == 0) {
    const char* flag = o.max_np != 0                         ? "--max-np"
                       : o.slots_per_host != 0               ? "--slots-per-host"
                       : o.elastic_timeout                   ? "--elastic-timeout"
                       : !o.blacklist_cooldown_range.empty() ? "--blacklist-cooldown-range"
                                                             : nullptr;
    if (flag) throw UsageError(std::string(flag) + " needs elastic mode: add --min-np N");
  }
  if (o.max_np < 0 || (o.max_np > 0 && o.max_np < o.min_np)) {
    throw UsageError("--max-np " + std::to_string(o.max_np) + " must be at least --min-np " +
                     std::to_string(o.min_np));
  }
  if (o.max_np > 0 && o.np > o.max_np) {
    throw UsageError("-np " + std::to_string(o.np) + " is above --max-np " +
                     std::to_string(o.max_np));
  }
  if (o.slots_per_host < 0) throw UsageError("--slots-per-host must be at least 1 (e.g. 4)");
  if (o.elastic_timeout && !(*o.elastic_timeout > 0)) {
    throw UsageError("--elastic-timeout must be a positive number of seconds (e.g. 600)");
  }
  if (!o.host_discovery_script.empty() && (!o.hosts.empty() || !o.hostfile.empty())) {
    throw UsageError("--host-discovery-script and " +
                     std::string(o.hosts.empty() ? "--hostfile" : "-H") +
                     " both given; the script is the host source, drop the other");
  }
  const auto& r = o.blacklist_cooldown_range;
  if (!r.empty() && (r.size() != 2 || !(r[0] >= 0) || !(r[1] >= r[0]))) {
    throw UsageError(
        "--blacklist-cooldown-range takes MIN MAX seconds with 0 <= MIN <= MAX (e.g. 10 100)");
  }
}

void validate(Options& o, bool np_optional) {
  const std::string help = " (see hvdrun --help)";
  if (o.check_build) return;
  if (o.command.empty()) {
    throw UsageError(std::string("no program given; usage: ") + kUsage);
  }
  if (o.np < 0) throw UsageError("-np must be at least 1 (e.g. -np 4)");
  if (!o.host_discovery_script.empty() && o.min_np == 0) {
    if (o.np == 0) {
      throw UsageError(
          "--host-discovery-script needs --min-np N (or -np N): the slots to start with");
    }
    o.min_np = o.np;
  }
  if (o.np == 0 && !np_optional && o.min_np <= 0) {
    throw UsageError("missing -np: give the number of ranks, e.g. -np 4");
  }
  if (!o.hosts.empty() && !o.hostfile.empty()) {
    throw UsageError("-H and --hostfile both given; use one of them");
  }
  validate_elastic(o);
  if (o.ssh_port < 0 || o.ssh_port > 65535) {
    throw UsageError("--ssh-port " + std::to_string(o.ssh_port) +
                     " is not a port; give 1-65535 (e.g. -p 22)");
  }
  if (o.min_np < 0 || (o.min_np > 0 && o.np > 0 && o.min_np > o.np)) {
    throw UsageError("--min-np " + std::to_string(o.min_np) + " must be between 1 and -np " +
                     std::to_string(o.np));
  }
  if (o.reset_limit < -1 || (o.reset_limit >= 0 && o.min_np == 0)) {
    throw UsageError(o.reset_limit < -1 ? "--reset-limit must be 0 or more (e.g. 3)"
                                        : "--reset-limit needs elastic mode: add --min-np N");
  }
  if (const auto& k = o.max_restarts_without_progress; k && (*k < -1 || o.min_np == 0)) {
    throw UsageError(*k < -1 ? "--max-restarts-without-progress must be -1 (no limit), 0 or "
                               "more (e.g. 3)"
                             : "--max-restarts-without-progress needs elastic mode: add "
                               "--min-np N");
  }
  if (!o.elastic_state_dir.empty() && o.min_np == 0) {
    throw UsageError("--elastic-state-dir needs elastic mode: add --min-np N");
  }
  if (!(o.step_timeout_s >= 0)) {
    throw UsageError("--elastic-step-timeout must be zero (off) or more seconds (e.g. 300)");
  }
  if (!(o.start_timeout_s > 0)) {
    throw UsageError("--start-timeout must be a positive number of seconds (e.g. 30)");
  }
  if (!(o.heartbeat_timeout_s == 0 || o.heartbeat_timeout_s >= 2)) {
    throw UsageError("--heartbeat-timeout must be 0 (off) or at least 2 seconds (e.g. 30)");
  }
  if (!(o.grace_period_s >= 0)) {
    throw UsageError("--grace-period must be zero or more seconds (e.g. 5)");
  }
  if (o.fusion_threshold_mb && !(*o.fusion_threshold_mb >= 0)) {
    throw UsageError("--fusion-threshold-mb must be >= 0 (0 disables fusion, e.g. 64)");
  }
  if (o.cycle_time_ms && !(*o.cycle_time_ms > 0)) {
    throw UsageError("--cycle-time-ms must be > 0 (e.g. 1)");
  }
  if (o.cache_capacity && *o.cache_capacity < 0) {
    throw UsageError("--cache-capacity must be >= 0 (0 disables the cache, e.g. 1024)");
  }
  if (!o.log_level.empty()) {
    std::string l = o.log_level;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    const char* levels[] = {"trace", "debug", "info", "warning", "error", "fatal"};
    if (std::find(std::begin(levels), std::end(levels), l) == std::end(levels)) {
      throw UsageError("--log-level '" + o.log_level +
                       "' is unknown; use trace, debug, info, warning, error or fatal");
    }
  }
  for (const auto& iface : o.network_interfaces) {
    if (iface.empty()) throw UsageError("--network-interface has an empty entry; e.g. eth0,ib0");
  }
  for (const auto& x : o.env) {
    std::string name = x.substr(0, x.find('='));
    if (!valid_env_name(name)) {
      throw UsageError("-x '" + x + "': '" + name +
                       "' is not a variable name; write -x NAME or -x NAME=value" + help);
    }
  }
}

}  // namespace

std::string help_text() {
  Options o;
  CLI::App app{std::string("hvdrun: launch an hvd job on one or more hosts through Open MPI\n"
                           "Usage: ") +
                   kUsage,
               "hvdrun"};
  build_app(app, o);
  return app.help();
}

ParsedCommandLine parse_command_line(const std::vector<std::string>& args, bool np_optional) {
  ParsedCommandLine out;
  Options& o = out.options;
  CLI::App app{std::string("hvdrun: launch an hvd job on one or more hosts through Open MPI\n"
                           "Usage: ") +
                   kUsage,
               "hvdrun"};
  build_app(app, o);

  // `-np` is not a CLI11 option name; it is the spelling users know from mpirun/horovodrun.
  // Translate it only among hvdrun's own options (the program's args are restored below).
  std::vector<std::string> words{"hvdrun"};
  for (const auto& a : args) words.push_back(a == "-np" ? "--np" : a);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    out.help = true;
    out.help_text = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    throw UsageError(msg + " (see hvdrun --help)");
  }
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() != "--" && rest.front().size() > 1 && rest.front()[0] == '-') {
    throw UsageError("unknown option '" + rest.front() +
                     "'; see hvdrun --help (options go before the program)");
  }
  // The program and its arguments, exactly as given.
  o.command.assign(args.end() - static_cast<long>(std::min(rest.size(), args.size())), args.end());
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  validate(o, np_optional);
  return out;
}

}  // namespace hvd::runner
