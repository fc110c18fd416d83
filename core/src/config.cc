// SPDX-License-Identifier: Apache-2.0
// Config parsing: every HVD_* / HOROVOD_* variable is read here and nowhere else.
#include "hvd/core/config.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "hvd/core/elastic_config.h"

extern char** environ;  // NOLINT

namespace hvd::core {
namespace {

struct Var {
  const char* hvd;
  const char* horovod;  // nullptr when Horovod has no such variable
};

const Var kFusion{"HVD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"};
const Var kDirect{"HVD_FUSION_DIRECT_BYTES", nullptr};
const Var kCycle{"HVD_CYCLE_TIME", "HOROVOD_CYCLE_TIME"};
const Var kCache{"HVD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY"};
const Var kLog{"HVD_LOG_LEVEL", "HOROVOD_LOG_LEVEL"};
const Var kStall{"HVD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS"};
const Var kStallShutdown{"HVD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"};
const Var kStallDisable{"HVD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE"};
const Var kMonitor{"HVD_PEER_MONITOR", nullptr};
const Var kTimeline{"HVD_TIMELINE", "HOROVOD_TIMELINE"};
const Var kTimelineAll{"HVD_TIMELINE_ALL_RANKS", nullptr};
const Var kTimelineCycles{"HVD_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES"};
const Var kHostname{"HVD_HOSTNAME", "HOROVOD_HOSTNAME"};
const Var kHierarchical{"HVD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE"};
const Var kHugePages{"HVD_HUGE_PAGES", nullptr};
// Variables other parts of hvd read through their own layers (the launcher's test hosts, the
// soak test, elastic mode's Python layer, rank wrapper and ElasticConfig, set by hvdrun --min-np),
// and two test-only ones: the fault hook HVD_TEST_FAULT (ops/src/nccl) and the MPI test harness's
// per-case deadline.
const char* const kOtherKnown[] = {"HVD_TESTHOSTS_PREFIX",
                                   "HVD_TESTHOSTS_SUBNET",
                                   "HVD_TESTHOSTS_DIR",
                                   "HVD_TESTHOSTS_PRIVATE_TMP",
                                   "HVD_SOAK_ITERATIONS",
                                   "HVD_ELASTIC_STATE_DIR",
                                   "HVD_ELASTIC_GENERATION",
                                   "HVD_ELASTIC_COMPLETION_FILE",
                                   "HVD_ELASTIC_PROGRESS_FILE",
                                   "HVD_ELASTIC_STEP_TIMEOUT",
                                   "HVD_ELASTIC_HOSTS_FILE",
                                   "HVD_ELASTIC_KEY",
                                   "HVD_TEST_FAULT",
                                   "HVD_TEST_DEADLINE_SECONDS"};

class Reader {
 public:
  explicit Reader(const Config::Lookup& l) : lookup_(l) {}

  // The value and the variable it came from (HVD_ wins over HOROVOD_).
  std::optional<std::pair<std::string, std::string>> get(const Var& v) {
    if (auto s = lookup_(v.hvd)) return std::make_pair(*s, std::string(v.hvd));
    if (v.horovod) {
      if (auto s = lookup_(v.horovod)) return std::make_pair(*s, std::string(v.horovod));
    }
    return std::nullopt;
  }

  Status int64(const Var& v, int64_t lo, int64_t* out) {
    auto kv = get(v);
    if (!kv) return Status::OK();
    const std::string& s = kv->first;
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || x < lo) {
      return invalid_argument(kv->second + "='" + s +
                              "' is not an integer >= " + std::to_string(lo));
    }
    *out = x;
    return Status::OK();
  }

  Status real(const Var& v, double lo, double* out) {
    auto kv = get(v);
    if (!kv) return Status::OK();
    const std::string& s = kv->first;
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(x) || x < lo) {
      return invalid_argument(kv->second + "='" + s + "' is not a number >= " + std::to_string(lo));
    }
    *out = x;
    return Status::OK();
  }

  Status boolean(const Var& v, bool* out) {
    auto kv = get(v);
    if (!kv) return Status::OK();
    const std::string& s = kv->first;
    if (s == "1" || s == "true" || s == "TRUE" || s == "yes") {
      *out = true;
    } else if (s == "0" || s == "false" || s == "FALSE" || s == "no") {
      *out = false;
    } else {
      return invalid_argument(kv->second + "='" + s + "' is not a boolean (use 1 or 0)");
    }
    return Status::OK();
  }

  Status level(const Var& v, LogLevel* out) {
    auto kv = get(v);
    if (!kv) return Status::OK();
    static const char* names[] = {"trace", "debug", "info", "warning", "error", "fatal"};
    std::string s;
    for (char c : kv->first) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "warn") s = "warning";
    for (int i = 0; i < 6; ++i) {
      if (s == names[i]) {
        *out = static_cast<LogLevel>(i);
        return Status::OK();
      }
    }
    return invalid_argument(kv->second + "='" + kv->first +
                            "' is not a log level (trace, debug, info, warning, error, fatal)");
  }

 private:
  const Config::Lookup& lookup_;
};

}  // namespace

Result<Config> Config::from_env(const Lookup& lookup, const std::vector<std::string>& all_names,
                                std::vector<std::string>* unknown) {
  Config c;
  Reader r(lookup);
  HVD_RETURN_IF_ERROR(r.int64(kFusion, 0, &c.fusion_threshold));
  HVD_RETURN_IF_ERROR(r.int64(kDirect, 0, &c.fusion_direct_bytes));
  HVD_RETURN_IF_ERROR(r.real(kCycle, 0.0, &c.cycle_time_ms));
  HVD_RETURN_IF_ERROR(r.int64(kCache, 0, &c.cache_capacity));
  HVD_RETURN_IF_ERROR(r.level(kLog, &c.log_level));
  HVD_RETURN_IF_ERROR(r.real(kStall, 0.0, &c.stall_warning_s));
  HVD_RETURN_IF_ERROR(r.real(kStallShutdown, 0.0, &c.stall_shutdown_s));
  HVD_RETURN_IF_ERROR(r.boolean(kStallDisable, &c.stall_check_disable));
  HVD_RETURN_IF_ERROR(r.boolean(kMonitor, &c.peer_monitor));
  HVD_RETURN_IF_ERROR(r.boolean(kHierarchical, &c.hierarchical_allreduce));
  HVD_RETURN_IF_ERROR(r.boolean(kTimelineAll, &c.timeline_all_ranks));
  HVD_RETURN_IF_ERROR(r.boolean(kTimelineCycles, &c.timeline_mark_cycles));
  HVD_RETURN_IF_ERROR(r.boolean(kHugePages, &c.huge_pages));
  if (auto kv = r.get(kTimeline)) c.timeline = kv->first;
  if (auto kv = r.get(kHostname)) c.hostname = kv->first;
  if (c.cache_capacity > (1 << 20)) {
    return invalid_argument("HVD_CACHE_CAPACITY=" + std::to_string(c.cache_capacity) +
                            " is too large (at most 1048576)");
  }
  if (unknown) {
    std::set<std::string> known;
    for (const Var* v : {&kFusion, &kDirect, &kCycle, &kCache, &kLog, &kStall, &kStallShutdown,
                         &kStallDisable, &kMonitor, &kTimeline, &kTimelineAll, &kTimelineCycles,
                         &kHostname, &kHierarchical, &kHugePages}) {
      known.insert(v->hvd);
    }
    for (const char* n : kOtherKnown) known.insert(n);
    for (const auto& n : all_names) {
      if (n.rfind("HVD_", 0) == 0 && !known.count(n)) unknown->push_back(n);
    }
  }
  return c;
}

namespace {
std::optional<std::string> process_env(const std::string& n) {
  const char* v = std::getenv(n.c_str());  // the one getenv of hvd
  if (!v) return std::nullopt;
  return std::string(v);
}
}  // namespace

ElasticConfig ElasticConfig::from_env(const Config::Lookup& lookup) {
  ElasticConfig c;
  if (auto v = lookup("HVD_ELASTIC_STATE_DIR")) c.state_dir = *v;
  if (auto v = lookup("HVD_ELASTIC_COMPLETION_FILE")) c.completion_file = *v;
  if (auto v = lookup("HVD_ELASTIC_HOSTS_FILE")) c.hosts_file = *v;
  if (auto v = lookup("HVD_ELASTIC_PROGRESS_FILE")) c.progress_file = *v;
  if (auto v = lookup("HVD_ELASTIC_KEY")) c.key = *v;
  return c;
}

ElasticConfig ElasticConfig::from_process_env() { return from_env(process_env); }

Result<Config> Config::from_process_env(std::vector<std::string>* unknown) {
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    names.push_back(kv.substr(0, kv.find('=')));
  }
  return from_env(process_env, names, unknown);
}

std::string Config::dump() const {
  std::ostringstream o;
  o << "HVD_FUSION_THRESHOLD=" << fusion_threshold << "\n"
    << "HVD_FUSION_DIRECT_BYTES=" << fusion_direct_bytes << "\n"
    << "HVD_CYCLE_TIME=" << cycle_time_ms << "\n"
    << "HVD_CACHE_CAPACITY=" << cache_capacity << "\n"
    << "HVD_LOG_LEVEL=" << static_cast<int>(log_level) << "\n"
    << "HVD_STALL_CHECK_TIME_SECONDS=" << stall_warning_s << "\n"
    << "HVD_STALL_SHUTDOWN_TIME_SECONDS=" << stall_shutdown_s << "\n"
    << "HVD_STALL_CHECK_DISABLE=" << (stall_check_disable ? 1 : 0) << "\n"
    << "HVD_PEER_MONITOR=" << (peer_monitor ? 1 : 0) << "\n"
    << "HVD_TIMELINE=" << timeline << "\n"
    << "HVD_TIMELINE_ALL_RANKS=" << (timeline_all_ranks ? 1 : 0) << "\n"
    << "HVD_TIMELINE_MARK_CYCLES=" << (timeline_mark_cycles ? 1 : 0) << "\n"
    << "HVD_HIERARCHICAL_ALLREDUCE=" << (hierarchical_allreduce ? 1 : 0) << "\n"
    << "HVD_HUGE_PAGES=" << (huge_pages ? 1 : 0) << "\n";
  return o.str();
}

}  // namespace hvd::core
