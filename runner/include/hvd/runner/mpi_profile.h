// SPDX-License-Identifier: Apache-2.0
// The MPI launcher profile: how Open MPI 4.1 (ORTE) and Open MPI 5 (PRRTE) spell what hvdrun
// asks of mpirun. The one place their differences live; pure, no I/O (local_system.h detects
// the version).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hvd::runner {

// The spellings of one Open MPI major version. Empty means "this version has no such knob".
struct MpiProfile {
  int major = 4;                // 4 (Debian 12: Open MPI 4.1) or 5 (Debian 13: Open MPI 5.0)
  std::string name;             // "Open MPI 4" / "Open MPI 5", for messages
  std::string daemon;           // what mpirun starts on each remote host: orted / prted
  std::string runtime_mca;      // the option for the runtime's (ORTE/PRRTE) parameters
  std::string ssh_launcher;     // the plm component that starts daemons over ssh: rsh / ssh
  std::string ssh_agent_param;  // its agent command: plm_rsh_agent / plm_ssh_agent
  std::string oob_if_include;   // the runtime's own TCP network: oob_tcp_if_include /
                                // prte_if_include
  std::string sigkill_timeout;  // seconds between TERM and KILL of the ranks at teardown
                                // (odls_base_sigkill_timeout; PRRTE: fixed 0.5 s, no knob)
  std::vector<std::string> oversubscribe;  // more ranks than cores on a host
  std::vector<std::string> tag_output;     // [job,rank]<stream>: prefixes on the output
  std::string tag_end;                     // what ends such a prefix: ">:" / ">: "
  // Per-rank output files under DIR: `<output_dir_option> <output_dir_prefix>DIR`
  // (--output-filename DIR / --output dir=DIR).
  std::string output_dir_option;
  std::string output_dir_prefix;
  std::string shared_memory_btl;  // the shared-memory BTL: vader / sm
  // MPI parameters hvdrun sets unless the user's environment does (OMPI_MCA_<name>).
  std::vector<std::pair<std::string, std::string>> mca_defaults;
};

// The profile of Open MPI `major`: 5 and later get Open MPI 5's spellings, anything older
// Open MPI 4.1's.
const MpiProfile& open_mpi_profile(int major);

// The major version in `mpirun --version` output ("mpirun (Open MPI) 5.0.7"), or nullopt when
// the text is not Open MPI's (MPICH's Hydra, no output).
std::optional<int> parse_open_mpi_major(const std::string& version_output);

// The mpirun words for "per-rank output files under `dir`" in profile `p`.
std::vector<std::string> output_dir_words(const MpiProfile& p, const std::string& dir);

}  // namespace hvd::runner
