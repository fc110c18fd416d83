// SPDX-License-Identifier: Apache-2.0
// hvdrun's error type for bad input and its exit codes.
#pragma once

#include <stdexcept>
#include <string>

namespace hvd::runner {

// Exit codes of hvdrun itself (a failed rank's own exit code is passed through unchanged).
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;      // bad command line, hosts or hostfile
inline constexpr int kExitPreflight = 4;  // a host failed the preflight; nothing was started
inline constexpr int kExitLaunch = 5;     // mpirun could not be started / lost without a rank code
inline constexpr int kExitStalled = 124;  // elastic: a rank stopped making progress (as timeout(1))
inline constexpr int kExitSignalBase = 128;  // Ctrl-C -> 130, SIGTERM -> 143

// Bad input from the user. what() is one line: the problem and the fix. Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace hvd::runner
