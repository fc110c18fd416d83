// SPDX-License-Identifier: Apache-2.0
// hvdrun's main: the launcher, or one of its hidden helper modes (agent, rank wrapper).
#include <string>
#include <vector>

#include "hvd/runner/modes.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--agent") return hvd::runner::run_agent(args);
  if (!args.empty() && args[0] == "--rank-wrapper") return hvd::runner::run_rank_wrapper(args);
  return hvd::runner::run_launcher(args);
}
