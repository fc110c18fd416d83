// SPDX-License-Identifier: Apache-2.0
// The -x list every rank gets: defaults, tuning flags, interface selection, user entries.
#include "hvd/runner/env_forward.h"

#include <cstdio>
#include <map>

#include "hvd/runner/errors.h"

namespace hvd::runner {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Shortest decimal for a number (no trailing zeros).
std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

void put(std::vector<EnvVar>& list, EnvVar v) {
  for (auto& e : list) {
    if (e.name == v.name) {
      e = std::move(v);
      return;
    }
  }
  list.push_back(std::move(v));
}

}  // namespace

bool is_default_forwarded(const std::string& name) {
  return name == "PATH" || name == "LD_LIBRARY_PATH" || name == "PYTHONPATH" ||
         name == "CUDA_VISIBLE_DEVICES" || starts_with(name, "HVD_") ||
         starts_with(name, "HOROVOD_") || starts_with(name, "NCCL_");
}

std::vector<EnvVar> forwarded_env(const Options& opts,
                                  const std::vector<std::string>& environ_entries,
                                  const std::vector<std::string>& nccl_ifnames) {
  std::map<std::string, std::string> here;
  std::vector<EnvVar> out;
  for (const auto& entry : environ_entries) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string name = entry.substr(0, eq);
    here[name] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : here) {
    if (is_default_forwarded(name)) put(out, {name, std::nullopt});
  }
  if (!opts.timeline.empty()) put(out, {"HVD_TIMELINE", opts.timeline});
  if (opts.timeline_mark_cycles) put(out, {"HVD_TIMELINE_MARK_CYCLES", std::string("1")});
  if (opts.fusion_threshold_mb) {
    double bytes = *opts.fusion_threshold_mb * 1024.0 * 1024.0;
    put(out, {"HVD_FUSION_THRESHOLD", number(static_cast<double>(static_cast<long long>(bytes)))});
  }
  if (opts.cycle_time_ms) put(out, {"HVD_CYCLE_TIME", number(*opts.cycle_time_ms)});
  if (opts.cache_capacity) put(out, {"HVD_CACHE_CAPACITY", std::to_string(*opts.cache_capacity)});
  if (!opts.log_level.empty()) put(out, {"HVD_LOG_LEVEL", opts.log_level});
  if (!nccl_ifnames.empty() && here.count("NCCL_SOCKET_IFNAME") == 0) {
    std::string joined;
    for (const auto& n : nccl_ifnames) joined += (joined.empty() ? "" : ",") + n;
    put(out, {"NCCL_SOCKET_IFNAME", joined});
  }
  for (const auto& x : opts.env) {
    size_t eq = x.find('=');
    if (eq == std::string::npos) {
      if (here.count(x) == 0) {
        throw UsageError("-x " + x + ": " + x + " is not set here; set it first or write -x " + x +
                         "=value");
      }
      put(out, {x, std::nullopt});
    } else {
      put(out, {x.substr(0, eq), x.substr(eq + 1)});
    }
  }
  return out;
}

}  // namespace hvd::runner
