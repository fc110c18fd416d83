// SPDX-License-Identifier: Apache-2.0
// hvdrun's command line (CLI11): the options and their validation, no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hvd::runner {

// Everything the user asked for on the command line.
struct Options {
  int np = 0;                                   // -np; 0 = not given
  std::string hosts;                            // -H
  std::string hostfile;                         // --hostfile
  int ssh_port = 0;                             // -p; 0 = ssh's default (22 or ssh_config)
  std::string ssh_identity;                     // -i
  std::vector<std::string> network_interfaces;  // --network-interface (names or CIDRs)
  std::vector<std::string> env;                 // -x VAR or -x VAR=value
  double start_timeout_s = 30;                  // --start-timeout
  double grace_period_s = 5;                    // --grace-period: TERM -> KILL
  double heartbeat_timeout_s = 30;    // --heartbeat-timeout: a wrapper's bound on hvdrun's silence
  std::string output_dir;             // --output-filename
  std::string timeline;               // --timeline-filename
  bool timeline_mark_cycles = false;  // --timeline-mark-cycles
  std::optional<double> fusion_threshold_mb;
  std::optional<double> cycle_time_ms;
  std::optional<long> cache_capacity;
  std::string log_level;
  bool verbose = false;
  bool dry_run = false;
  bool check_build = false;
  bool no_slurm = false;  // --no-slurm: ignore a Slurm allocation (SLURM_JOB_NODELIST ...)
  // Elastic mode (--min-np given): the job runs in generations; see elastic.h.
  int min_np = 0;                                // --min-np; 0 = not elastic
  int max_np = 0;                                // --max-np; 0 = -np when given, else every slot
  int slots_per_host = 0;                        // --slots-per-host; 0 = not given (1)
  std::string host_discovery_script;             // --host-discovery-script (implies elastic mode)
  std::optional<double> elastic_timeout;         // --elastic-timeout; nullopt = 600 s
  std::vector<double> blacklist_cooldown_range;  // --blacklist-cooldown-range MIN MAX; {} = never
  int reset_limit = -1;                          // --reset-limit; -1 = no limit
  // --max-restarts-without-progress (elastic.h's RestartLimits); nullopt = 3, -1 = no limit.
  std::optional<int> max_restarts_without_progress;
  int max_without_progress() const { return max_restarts_without_progress.value_or(3); }
  double step_timeout_s = 300;    // --elastic-step-timeout / HVD_ELASTIC_STEP_TIMEOUT; 0 = off
  std::string elastic_state_dir;  // --elastic-state-dir; "" = /dev/shm or /var/tmp (state_dir.h)
  bool elastic() const { return min_np > 0; }
  double elastic_timeout_s() const { return elastic_timeout.value_or(600); }
  std::vector<std::string> command;  // program and its arguments
};

// Result of parsing: either options to run, or text to print (--help) and exit 0.
struct ParsedCommandLine {
  Options options;
  bool help = false;
  std::string help_text;
};

// Parses argv[1..] (without the program name). `-np` is accepted as the traditional spelling
// of `--np`. Options end at the first positional (the program); everything after it belongs to
// the program. Throws UsageError (one line: problem and fix) on any bad input. With
// np_optional (inside a Slurm allocation, where the allocation gives the rank count) a missing
// -np is not an error and leaves np = 0; nor is it in elastic mode (--min-np, where the hosts
// give the rank count). --host-discovery-script implies elastic mode: --min-np defaults to -np.
ParsedCommandLine parse_command_line(const std::vector<std::string>& args,
                                     bool np_optional = false);

// The full --help text.
std::string help_text();

}  // namespace hvd::runner
