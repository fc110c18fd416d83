// SPDX-License-Identifier: Apache-2.0
// Runs mpirun and supervises the job: output tagging, signals, first failure, TERM/KILL.
#pragma once

#include <boost/asio/io_context.hpp>
#include <string>
#include <utility>
#include <vector>

#include "hvd/runner/control_server.h"
#include "hvd/runner/elastic.h"

namespace hvd::runner {

struct SuperviseConfig {
  std::vector<std::string> mpirun_argv;
  // NAME=VALUE pairs set in mpirun's environment only: the job's secrets, which reach the ranks
  // through `-x NAME` (LaunchSpec::secret_env), never through argv.
  std::vector<std::pair<std::string, std::string>> mpirun_env;
  int np = 0;
  double grace_s = 5;
  bool retag = true;           // rewrite [job,rank]<stdout>: to [rank]<stdout>:
  std::string tag_end = ">:";  // what ends mpirun's tag (MpiProfile::tag_end)
  bool verbose = false;
  bool elastic = false;       // a rank exiting 0 without DONE is a failure
  double step_timeout_s = 0;  // elastic: the step watchdog's timeout (elastic_watchdog.h); 0 = off
};

// Starts mpirun (own process group) and runs `io` until the job is over and every wrapper is
// gone (or the grace period after KILL ran out). On SIGINT/SIGTERM/SIGHUP or the first rank
// that ends non-zero: TERM to every wrapper and to mpirun, then KILL after the grace period.
// Returns hvdrun's exit code: the first failed rank's code, 128+signal, or mpirun's code.
// With `outcome`, also says whether rank 0 reported completion and which signal stopped hvdrun.
// Handlers it leaves queued on `io` (or in `server`) do nothing once it has returned.
int supervise(boost::asio::io_context& io, ControlServer& server, const SuperviseConfig& config,
              GenerationOutcome* outcome = nullptr);

}  // namespace hvd::runner
