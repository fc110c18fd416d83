// SPDX-License-Identifier: Apache-2.0
// Serializing and parsing the agent's report (HVDAGENT lines).
#include "hvd/runner/agent_report.h"

#include <sstream>

namespace hvd::runner {

std::string format_agent_report(const AgentReport& r) {
  std::ostringstream out;
  out << "HVDAGENT hostname " << r.hostname << "\n";
  for (const auto& i : r.interfaces) {
    out << "HVDAGENT iface " << i.name << " " << i.address << "/" << i.prefix_len << "\n";
  }
  for (const auto& a : r.reached) out << "HVDAGENT reach " << a << " ok\n";
  for (const auto& a : r.unreached) out << "HVDAGENT reach " << a << "\n";
  out << "HVDAGENT program " << (r.program_found ? "ok " : "missing ") << r.program << "\n";
  out << "HVDAGENT mpirun " << (r.mpirun_found ? "ok" : "missing") << "\n";
  out << "HVDAGENT orted " << (r.orted_found ? "ok" : "missing") << "\n";
  out << "HVDAGENT prted " << (r.prted_found ? "ok" : "missing") << "\n";
  if (r.state_base_checked) {
    out << "HVDAGENT statebase " << r.state_base_free << " "
        << (r.state_base_problem.empty() ? "ok" : r.state_base_problem) << "\n";
  }
  out << "HVDAGENT done\n";
  return out.str();
}

AgentReport parse_agent_report(const std::string& output) {
  AgentReport r;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("HVDAGENT ", 0) != 0) continue;
    std::istringstream words(line.substr(9));
    std::string key;
    words >> key;
    std::string rest;
    std::getline(words >> std::ws, rest);
    if (key == "hostname") {
      r.hostname = rest;
    } else if (key == "iface") {
      std::istringstream f(rest);
      std::string name, cidr;
      f >> name >> cidr;
      size_t slash = cidr.find('/');
      if (name.empty() || slash == std::string::npos) continue;
      try {
        r.interfaces.push_back({name, cidr.substr(0, slash), std::stoi(cidr.substr(slash + 1))});
      } catch (...) {
      }
    } else if (key == "reach") {
      if (rest.size() > 3 && rest.compare(rest.size() - 3, 3, " ok") == 0) {
        r.reached.push_back(rest.substr(0, rest.size() - 3));
      } else {
        r.unreached.push_back(rest);
      }
    } else if (key == "program") {
      r.program_found = rest.rfind("ok ", 0) == 0;
      size_t sp = rest.find(' ');
      r.program = sp == std::string::npos ? "" : rest.substr(sp + 1);
    } else if (key == "mpirun") {
      r.mpirun_found = rest == "ok";
    } else if (key == "orted") {
      r.orted_found = rest == "ok";
    } else if (key == "prted") {
      r.prted_found = rest == "ok";
    } else if (key == "statebase") {
      std::istringstream f(rest);
      r.state_base_checked = static_cast<bool>(f >> r.state_base_free);
      std::getline(f >> std::ws, r.state_base_problem);
      if (r.state_base_problem == "ok") r.state_base_problem.clear();
    } else if (key == "done") {
      r.complete = true;
    }
  }
  return r;
}

std::string open_mpi_problem(const AgentReport& r, const MpiProfile& mpi, const std::string& host) {
  const MpiProfile& other = open_mpi_profile(mpi.major >= 5 ? 4 : 5);
  const bool has_daemon = mpi.daemon == "prted" ? r.prted_found : r.orted_found;
  const bool has_other = other.daemon == "prted" ? r.prted_found : r.orted_found;
  if (r.mpirun_found && has_daemon) return "";
  if (!has_daemon && has_other) {
    return host + " has " + other.name + " (" + other.daemon + ") but this machine's mpirun is " +
           mpi.name + " (its daemon " + mpi.daemon +
           " is not in the PATH of a non-interactive ssh login there); install the same Open MPI "
           "major version on every host";
  }
  return std::string(!has_daemon ? mpi.daemon : "mpirun") + " (" + mpi.name +
         ") not found in the PATH of a non-interactive ssh login on " + host +
         "; install Open MPI there, or set PATH where non-interactive shells read it";
}

}  // namespace hvd::runner
