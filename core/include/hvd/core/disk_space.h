// SPDX-License-Identifier: Apache-2.0
// Sizes and free space in messages about a job's files (elastic state): header-only, shared by
// hvdrun (runner/, which links no hvd library) and the snapshot store.
#pragma once

#include <sys/statvfs.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace hvd::core {

/// Bytes an unprivileged user may still write on the file system holding `dir` (statvfs:
/// f_bavail * f_frsize); nullopt when it cannot be examined.
inline std::optional<uint64_t> free_bytes(const std::string& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return std::nullopt;
  return static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
}

/// "112 bytes", "8.0 KiB", "64.0 MiB", "24.0 GiB" (binary units, one decimal above bytes).
inline std::string size_text(uint64_t bytes) {
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof kUnits / sizeof kUnits[0]) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return text;
}

}  // namespace hvd::core
