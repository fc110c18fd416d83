// SPDX-License-Identifier: Apache-2.0
// Builds the exact mpirun command line for a planned job: pure, no I/O.
#pragma once

#include <string>
#include <vector>

#include "hvd/runner/env_forward.h"
#include "hvd/runner/hosts.h"
#include "hvd/runner/mpi_profile.h"

namespace hvd::runner {

// Everything that decides the mpirun command line.
struct LaunchSpec {
  std::string mpirun = "mpirun";
  MpiProfile mpi = open_mpi_profile(4);  // how this mpirun spells each option (mpi_profile.h)
  int np = 0;
  std::vector<HostSlots> hosts;  // hosts that get ranks, with the slots they use
  bool all_local = true;         // every host is this machine: no ssh agent, --oversubscribe
  bool as_root = false;          // adds --allow-run-as-root
  // Inside a Slurm allocation Open MPI would start its remote daemons through srun; with remote
  // hosts `--mca plm rsh` (Open MPI 5: `--prtemca plm ssh`) keeps it on the ssh launcher that
  // hvdrun's preflight checked.
  bool in_slurm_allocation = false;
  int ssh_port = 0;  // 0 = ssh's default
  std::string ssh_identity;
  std::vector<std::string> mpi_interfaces;  // oob(prte)/btl *_if_include (names or CIDRs)
  std::vector<EnvVar> env;                  // -x entries
  // The job's secrets (HVD_JOB_TOKEN, HVD_ELASTIC_KEY): `-x NAME` only, after `env` (which loses
  // any entry of the same name); their values are in mpirun's environment alone
  // (SuperviseConfig::mpirun_env), never on a command line another user can read with ps.
  std::vector<std::string> secret_env;
  std::string output_dir;            // per-rank files (else tagged output)
  std::vector<std::string> wrapper;  // prefix run in front of the program on each rank
  std::vector<std::string> command;  // program and arguments
  // Elastic mode: a failed generation is torn down at once (the state is in the last commit):
  // Open MPI 4 kills the other ranks' wrappers without its 1 s wait between TERM and KILL
  // (odls_base_sigkill_timeout 0), which took 1.0 of the 1.1 s of a generation's teardown.
  // Open MPI 5 has no such knob (PRRTE waits a fixed 0.25 s before TERM and again before KILL).
  bool elastic = false;
  // MPI's waits yield the core (`--mca mpi_yield_when_idle 1`) unless the user's environment
  // sets OMPI_MCA_mpi_yield_when_idle (see sets_mca_param): each rank has a compute thread and
  // hvd's background thread, which polls MPI while it waits for a peer; where they share cores
  // with the other ranks, spinning took the compute threads' time (ResNet-18 at np 2 on 2
  // cores: 0.82 -> 0.93 of no-comm, docs/performance.md).
  bool yield_when_idle = true;
  // The profile's other defaults that the user's environment leaves unset (`--mca NAME VALUE`).
  std::vector<std::pair<std::string, std::string>> mca;
};

// The fields every launch fills alike (hvdrun's plain and elastic jobs): `np` ranks on `hosts`,
// ssh, output, the program and the options from `o`, --allow-run-as-root when root, the Slurm
// launcher, MPI's yield unless `environ` sets it, the spellings of `mpi`. The caller adds the
// network, env and wrapper.
LaunchSpec base_launch_spec(const Options& o, int np, std::vector<HostSlots> hosts, bool all_local,
                            bool in_slurm_allocation, const std::vector<std::string>& environ,
                            const MpiProfile& mpi);

// A number of seconds as hvdrun prints and passes it: "%g" (5, 2.5, 0.001).
std::string seconds_text(double s);

// The variable that carries the job token to the rank wrappers (through mpirun's environment
// and `-x HVD_JOB_TOKEN`); each wrapper removes it before it starts the program.
inline constexpr const char* kJobTokenVariable = "HVD_JOB_TOKEN";

// What mpirun runs in front of the program on each rank: `self --rank-wrapper CONNECT GRACE
// GENERATION HEARTBEAT --` (the order run_rank_wrapper parses; GRACE and HEARTBEAT are
// --grace-period and --heartbeat-timeout from `o`). No secret: the token is in
// kJobTokenVariable.
std::vector<std::string> rank_wrapper_prefix(const std::string& self, const std::string& connect,
                                             const Options& o, int generation);

// True when `environ` ("NAME=VALUE" entries) sets the Open MPI parameter `param`
// (OMPI_MCA_<param>): hvdrun then leaves it to the user's value.
bool sets_mca_param(const std::vector<std::string>& environ, const std::string& param);

// The ssh command Open MPI uses to start its daemons: ssh -o BatchMode=yes [-p P] [-i ID].
std::string ssh_agent_command(int ssh_port, const std::string& identity);

// mpirun argv (argv[0] is spec.mpirun).
std::vector<std::string> build_mpirun_command(const LaunchSpec& spec);

// Quotes one word for a POSIX shell (only when needed).
std::string shell_quote(const std::string& word);

// Words joined with spaces, each shell-quoted: what --dry-run prints.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace hvd::runner
