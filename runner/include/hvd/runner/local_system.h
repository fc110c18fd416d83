// SPDX-License-Identifier: Apache-2.0
// Small queries about this machine (I/O kept out of the planning code).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hvd/runner/interfaces.h"

namespace hvd::runner {

// gethostname().
std::string local_hostname();

// IPv4 addresses of the interfaces that are up (getifaddrs), loopback included.
std::vector<Interface> local_interfaces();

// The running executable's absolute path (/proc/self/exe).
std::string self_executable();

// Resolves `program` like execvp would: a name containing '/' relative to `cwd`, otherwise
// through `path` (a PATH value). Returns the path found, or "" when not executable/not found.
std::string find_program(const std::string& program, const std::string& cwd,
                         const std::string& path);

// getcwd().
std::string current_directory();

// 32 hex digits, 128 bits from the kernel's CSPRNG (getrandom): job tokens, keys, names.
std::string random_token();

// The major version of the Open MPI behind `mpirun` (`mpirun --version`, run through the
// shell's PATH), or nullopt when it cannot be run or is not Open MPI.
std::optional<int> open_mpi_major(const std::string& mpirun);

}  // namespace hvd::runner
