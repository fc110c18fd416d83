// SPDX-License-Identifier: Apache-2.0
// Chrome-trace timeline writer.
#include "hvd/core/timeline.h"

#include <string>

namespace hvd::core {
namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

}  // namespace

Timeline::Timeline(const std::string& path) : f_(std::fopen(path.c_str(), "w")) {
  if (f_) std::fputs("[\n", f_);
}

Timeline::~Timeline() {
  if (!f_) return;
  std::fputs("\n]\n", f_);
  std::fclose(f_);
}

void Timeline::record(const Response& r, int64_t bytes, Clock::time_point start,
                      Clock::time_point end, bool success) {
  if (!f_) return;
  using us = std::chrono::microseconds;
  const long long ts = std::chrono::duration_cast<us>(start - origin_).count();
  const long long dur = std::chrono::duration_cast<us>(end - start).count();
  const std::string name = r.names.empty() ? std::string(op_name(r.op)) : r.names.front();
  std::lock_guard<std::mutex> lk(mu_);
  std::fprintf(f_,
               "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,"
               "\"pid\":%d,\"tid\":0,\"args\":{\"tensors\":%zu,\"bytes\":%lld,\"ok\":%s}}",
               first_ ? "" : ",\n", json_escape(name).c_str(), op_name(r.op), ts, dur,
               static_cast<int>(r.process_set), r.names.size(), static_cast<long long>(bytes),
               success ? "true" : "false");
  first_ = false;
  std::fflush(f_);
}

}  // namespace hvd::core
