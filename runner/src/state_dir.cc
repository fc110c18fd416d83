// SPDX-License-Identifier: Apache-2.0
// The elastic job's state base and directory name (state_dir.h).
#include "hvd/runner/state_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "hvd/core/disk_space.h"
#include "hvd/runner/errors.h"
#include "hvd/runner/local_system.h"

namespace hvd::runner {

std::string state_base_problem(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return "'" + dir + "' cannot be used: " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory";
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return "'" + dir + "' belongs to uid " + std::to_string(st.st_uid) +
           ", who could replace the job's directory in it";
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return "'" + dir + "' (mode " + mode +
           ") lets other users write to it but is not sticky, so they could rename or replace "
           "the job's directory in it";
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return "'" + dir + "' is not writable by this user (" + std::strerror(errno) + ")";
  }
  return "";
}

std::string size_text(uint64_t bytes) { return core::size_text(bytes); }

StateBase pick_state_base(const std::string& memory_problem, std::optional<uint64_t> memory_free) {
  const std::string rule = "/dev/shm is the default when it has at least " +
                           size_text(kMemoryStateBaseMinFree) + " free";
  if (!memory_problem.empty()) {
    return {kDiskStateBase, std::string("local disk, since ") + memory_problem + " (" + rule + ")"};
  }
  if (!memory_free) {
    return {kDiskStateBase,
            "local disk, since the free space of /dev/shm is unknown (" + rule + ")"};
  }
  if (*memory_free < kMemoryStateBaseMinFree) {
    return {kDiskStateBase, "local disk, since /dev/shm has only " + size_text(*memory_free) +
                                " free (" + rule +
                                "; a container's default /dev/shm is 64 MiB; choose a base with "
                                "--elastic-state-dir)"};
  }
  return {kMemoryStateBase, "host memory, " + size_text(*memory_free) + " free (" + rule + ")"};
}

StateBase choose_state_base(const std::string& requested) {
  if (!requested.empty()) {
    const std::string problem = state_base_problem(requested);
    if (!problem.empty()) {
      throw UsageError("--elastic-state-dir: " + problem +
                       "; give an existing directory only you can write to, or a sticky one "
                       "such as /dev/shm or /var/tmp");
    }
    return {requested, "--elastic-state-dir"};
  }
  const std::string problem = state_base_problem(kMemoryStateBase);
  return pick_state_base(problem, problem.empty() ? free_bytes(kMemoryStateBase) : std::nullopt);
}

std::optional<uint64_t> free_bytes(const std::string& dir) { return core::free_bytes(dir); }

std::string new_state_dir_name(const std::string& base) {
  return base + "/hvd-elastic-" + random_token();
}

std::string new_elastic_key() { return random_token() + random_token(); }

std::string low_space_warning(const std::string& where, const std::string& dir, uint64_t free,
                              uint64_t last_commit) {
  if (free >= last_commit) return "";
  return "hvdrun: elastic: " + where + ": " + dir + " has " + size_text(free) +
         " free, the last commit took " + size_text(last_commit) +
         "; the next commit there will fail (free space, or give hvdrun --elastic-state-dir a "
         "larger file system)";
}

std::string remote_base_warning(const std::string& host, const std::string& base, long long free) {
  if (base != kMemoryStateBase || free < 0) return "";
  if (static_cast<uint64_t>(free) >= kMemoryStateBaseMinFree) return "";
  return "hvdrun: elastic: host " + host + ": " + base + " has only " +
         size_text(static_cast<uint64_t>(free)) + " free (this machine's has at least " +
         size_text(kMemoryStateBaseMinFree) +
         ", so it is the job's state base); a commit larger than that fails there: give "
         "hvdrun --elastic-state-dir /var/tmp (or another directory on every host)";
}

}  // namespace hvd::runner
