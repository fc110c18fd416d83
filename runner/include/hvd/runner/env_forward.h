// SPDX-License-Identifier: Apache-2.0
// Which environment variables every rank gets (-x): pure, no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hvd/runner/cli.h"

namespace hvd::runner {

// One `-x` entry: forward NAME as set here (no value) or set NAME=value on every rank.
struct EnvVar {
  std::string name;
  std::optional<std::string> value;
  bool operator==(const EnvVar& o) const { return name == o.name && value == o.value; }
};

// True for variables always forwarded: PATH, LD_LIBRARY_PATH, PYTHONPATH, CUDA_VISIBLE_DEVICES
// and every HVD_*, HOROVOD_*, NCCL_* variable.
bool is_default_forwarded(const std::string& name);

// The -x list: defaults present in `environ_entries` ("NAME=value" strings), the tuning flags
// (--timeline-filename -> HVD_TIMELINE, --fusion-threshold-mb -> HVD_FUSION_THRESHOLD in bytes,
// --cycle-time-ms -> HVD_CYCLE_TIME, --cache-capacity -> HVD_CACHE_CAPACITY, --log-level ->
// HVD_LOG_LEVEL), NCCL_SOCKET_IFNAME from `nccl_ifnames` (unless set by the user), then the
// user's -x entries. Later entries replace earlier ones of the same name; order is stable.
// Throws UsageError for a malformed -x or `-x NAME` of a variable not set here.
std::vector<EnvVar> forwarded_env(const Options& opts,
                                  const std::vector<std::string>& environ_entries,
                                  const std::vector<std::string>& nccl_ifnames);

}  // namespace hvd::runner
