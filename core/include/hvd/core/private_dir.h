// SPDX-License-Identifier: Apache-2.0
// Private directories on shared hosts (DESIGN.md section 9): a directory that holds a job's
// state is trusted only when it is a real directory (not a symbolic link), owned by this
// process's effective user and not open to anyone else (mode 0700). Header-only: hvdrun's rank
// wrapper (runner/, which links no hvd library) and the elastic snapshot store use the same check.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace hvd::core {

/// "" when `path` is a private directory of the effective user (lstat: a directory, not a link,
/// owner = geteuid(), permission bits exactly 0700); otherwise one sentence that names the path
/// and says what is wrong (what a user who planted it would have changed).
inline std::string private_directory_problem(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return "'" + path + "' cannot be examined: " + std::strerror(errno);
  }
  if (S_ISLNK(st.st_mode)) return "'" + path + "' is a symbolic link, not a directory";
  if (!S_ISDIR(st.st_mode)) return "'" + path + "' is not a directory";
  if (st.st_uid != ::geteuid()) {
    return "'" + path + "' belongs to uid " + std::to_string(st.st_uid) +
           ", not to this job's uid " + std::to_string(::geteuid());
  }
  const unsigned mode = st.st_mode & 07777;
  if (mode != 0700) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", mode);
    return "'" + path + "' has mode " + text + ", not 0700";
  }
  return "";
}

/// Creates `path` with mode 0700 unless it exists (another rank of the host may have created it
/// first), then checks it as private_directory_problem does: "" when it is the job's own.
/// The parent must exist; nothing else is created.
inline std::string make_private_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return "cannot create '" + path + "': " + std::strerror(errno);
  }
  return private_directory_problem(path);
}

/// open(2) of a file inside a private directory: never follows a symbolic link in the last
/// component (O_NOFOLLOW) and never leaks into a child (O_CLOEXEC). Returns the descriptor or -1
/// with errno set (ELOOP for a planted link).
inline int open_private_file(const std::string& path, int flags, mode_t mode = 0600) {
  return ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
}

}  // namespace hvd::core
