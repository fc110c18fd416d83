// SPDX-License-Identifier: Apache-2.0
// Elastic mode's driver (private to the launcher): generations of mpirun on the hosts alive
// now, the host source polled while a generation runs, failed hosts blacklisted.
#pragma once

#include <boost/asio/io_context.hpp>
#include <string>
#include <vector>

#include "hvd/runner/cli.h"
#include "hvd/runner/control_server.h"
#include "hvd/runner/hosts.h"
#include "hvd/runner/mpi_profile.h"

namespace hvd::runner {

// What the launcher knows before the first generation.
struct ElasticJob {
  Options options;  // elastic_state_dir: the base chosen (choose_state_base), never empty
  // The host source when there is no --host-discovery-script: -H/--hostfile, the Slurm
  // allocation or this machine.
  std::vector<HostSlots> static_hosts;
  int max_np = 0;  // 0 = every slot
  bool in_slurm_allocation = false;
  std::string own_hostname;
  std::string self;  // hvdrun's path
  std::string cwd;
  std::string path;
  std::string token;
  std::string state_base_why;  // why options.elastic_state_dir is the base (for --verbose)
  std::vector<std::string> environ_entries;
  MpiProfile mpi;  // this machine's mpirun, detected once for every generation
};

// Runs generations until one succeeds (every rank exited 0, rank 0 completed) or the job gives
// up (--reset-limit, --elastic-timeout, a signal). Returns hvdrun's exit code.
int run_elastic_job(boost::asio::io_context& io, ControlServer& server, const ElasticJob& job);

}  // namespace hvd::runner
