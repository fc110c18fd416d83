// SPDX-License-Identifier: Apache-2.0
// The report `hvdrun --agent` prints on a remote host, and its parser: pure, no I/O.
#pragma once

#include <string>
#include <vector>

#include "hvd/runner/interfaces.h"
#include "hvd/runner/mpi_profile.h"

namespace hvd::runner {

// What the agent found on its host. Lines look like `HVDAGENT <key> <fields...>` so that
// anything else a login shell prints is ignored.
struct AgentReport {
  std::string hostname;
  std::vector<Interface> interfaces;
  std::vector<std::string> reached;    // master addresses connected back to
  std::vector<std::string> unreached;  // "addr: reason"
  bool program_found = false;
  std::string program;  // as checked (resolved path or the name)
  bool mpirun_found = false;
  bool orted_found = false;  // Open MPI 4's daemon
  bool prted_found = false;  // Open MPI 5's daemon
  bool complete = false;     // the final `done` line was seen
  // Elastic mode (`--state-base DIR` given): whether DIR can hold the job's state directory
  // (state_base_problem: "" = yes) and its free bytes (-1 = unknown).
  bool state_base_checked = false;
  std::string state_base_problem;
  long long state_base_free = -1;
};

// Serializes a report (what the agent prints).
std::string format_agent_report(const AgentReport& report);

// Parses agent output; unknown lines are skipped.
AgentReport parse_agent_report(const std::string& output);

// What is wrong with the Open MPI that `report` found on `host` for a job whose mpirun is `mpi`
// (mpirun or mpi's daemon missing, or only another major version's daemon there), with the
// fix; "" when nothing is.
std::string open_mpi_problem(const AgentReport& report, const MpiProfile& mpi,
                             const std::string& host);

}  // namespace hvd::runner
