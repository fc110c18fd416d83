// SPDX-License-Identifier: Apache-2.0
// Timeline events: one row per tensor with its phases, one row of negotiation rounds (the
// format is described in timeline.h; the file and its writer thread in timeline_writer.cc).
#include "hvd/core/timeline.h"

#include <algorithm>
#include <cstdio>

#include "timeline_writer.h"

namespace hvd::core {
namespace {

thread_local PhaseLog* t_active = nullptr;

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

// Microseconds of the steady clock (CLOCK_MONOTONIC: the same on every rank of one host, so
// the files of several ranks line up).
double us(Timeline::Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

double us(std::chrono::nanoseconds d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

std::string ranks_json(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

// A complete event ("X"): `args` is a JSON object body without braces (may be empty).
std::string span(const char* name, const char* cat, int pid, int tid, double ts, double dur,
                 const std::string& args) {
  char head[256];
  std::snprintf(head, sizeof head,
                "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                "\"ts\":%.3f,\"dur\":%.3f,\"args\":{",
                name, cat, pid, tid, ts, std::max(dur, 0.0));
  return head + args + "}}";
}

std::string instant(const char* name, const char* cat, int pid, int tid, double ts,
                    const std::string& args) {
  char head[256];
  std::snprintf(head, sizeof head,
                "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,"
                "\"tid\":%d,\"ts\":%.3f,\"args\":{",
                name, cat, pid, tid, ts);
  return head + args + "}}";
}

std::string metadata(const char* what, int pid, int tid, const std::string& value_json) {
  return "{\"name\":\"" + std::string(what) + "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"args\":{" + value_json + "}}";
}

}  // namespace

PhaseScope::PhaseScope(Phase phase, const char* call) : log_(t_active), phase_(phase) {
  if (!log_) return;
  if (call) log_->call = call;
  start_ = std::chrono::steady_clock::now();
}

PhaseScope::~PhaseScope() {
  if (!log_) return;
  log_->spent[static_cast<int>(phase_)] += std::chrono::steady_clock::now() - start_;
  ++log_->scopes;
}

PhaseLog* PhaseScope::set_active(PhaseLog* log) {
  PhaseLog* old = t_active;
  t_active = log;
  return old;
}

Timeline::Timeline(const std::string& path, int rank, bool mark_cycles)
    : rank_(rank), mark_cycles_(mark_cycles), writer_(std::make_unique<TimelineWriter>(path)) {
  if (!writer_->ok()) return;
  emit(metadata("process_name", rank_, 0, "\"name\":\"hvd rank " + std::to_string(rank_) + "\""));
  emit(metadata("process_sort_index", rank_, 0, "\"sort_index\":" + std::to_string(rank_)));
  emit(metadata("thread_name", rank_, 0, "\"name\":\"negotiation\""));
  emit(metadata("thread_sort_index", rank_, 0, "\"sort_index\":0"));
  tids_.emplace(std::make_pair(0, std::string()), 0);  // row 0: the global set's negotiation
}

Timeline::~Timeline() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& kv : sets_) flush_deferred(&kv.second);
  }
  if (writer_->dropped() > 0) {
    emit(metadata("hvd_dropped_events", rank_, 0,
                  "\"count\":" + std::to_string(writer_->dropped())));
  }
  writer_->close();
}

bool Timeline::ok() const { return writer_->ok(); }

void Timeline::start() { writer_->start(); }

uint64_t Timeline::dropped() const { return writer_->dropped(); }

std::string Timeline::path_for_rank(const std::string& path, int rank) {
  const std::string tag = ".rank" + std::to_string(rank);
  const std::string ext = ".json";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    return path.substr(0, path.size() - ext.size()) + tag + ext;
  }
  return path + tag;
}

void Timeline::emit(std::string line) { writer_->push(std::move(line)); }

int Timeline::tid_for(int32_t set, const std::string& name) {
  auto key = std::make_pair(set, name);
  auto it = tids_.find(key);
  if (it != tids_.end()) return it->second;
  const int tid = static_cast<int>(tids_.size());  // row 0: the global set's negotiation
  tids_.emplace(std::move(key), tid);
  // "" is the set's negotiation row.
  std::string row = name.empty() ? "negotiation" : name;
  if (set != 0) row += " [process set " + std::to_string(set) + "]";
  emit(metadata("thread_name", rank_, tid, "\"name\":\"" + json_escape(row) + "\""));
  emit(metadata("thread_sort_index", rank_, tid, "\"sort_index\":" + std::to_string(tid)));
  return tid;
}

void Timeline::record_round(int32_t set, Clock::time_point start, Clock::time_point end, bool full,
                            size_t cached, size_t responses,
                            const std::vector<StalledTensor>& late) {
  std::lock_guard<std::mutex> lk(mu_);
  SetState& st = sets_[set];
  st.last_round_end = end;
  ++st.rounds;
  for (const StalledTensor& t : late) st.late.try_emplace(t.name, t.missing);
  flush_deferred(&st);  // the tensors of the last round whose late ranks this round asked for
  std::string args =
      "\"round\":" + std::to_string(st.rounds) + ",\"full\":" + (full ? "true" : "false") +
      ",\"cached\":" + std::to_string(cached) + ",\"responses\":" + std::to_string(responses);
  if (set != 0) args += ",\"process_set\":" + std::to_string(set);
  const int tid = tid_for(set, "");
  if (mark_cycles_) emit(instant("cycle", "cycle", rank_, tid, us(start), args));
  emit(span("negotiation", "negotiation", rank_, tid, us(start), us(end - start), args));
  if (cached + responses > 0) emit(instant("round", "round", rank_, tid, us(end), args));
}

void Timeline::record_response(int32_t set, const Response& r,
                               const std::vector<TensorEntry*>& entries, const std::string& backend,
                               const PhaseLog& log, Clock::time_point start, Clock::time_point end,
                               const Status& status, bool ask_late) {
  int64_t bytes = 0;
  for (auto* e : entries) {
    if (e) bytes += static_cast<int64_t>(e->input.bytes());
  }
  const auto total = end - start;
  const auto in = std::min<std::chrono::nanoseconds>(log.spent[0], total);
  const auto out = std::min<std::chrono::nanoseconds>(log.spent[2], total - in);
  const auto coll = total - in - out;  // the call and what surrounds it (scaling, waits)
  const std::string call = log.call ? log.call : backend + " " + op_name(r.op);
  const std::string batch =
      "\"tensors\":" + std::to_string(r.names.size()) + ",\"bytes\":" + std::to_string(bytes);
  const std::string coll_args = "\"op\":\"" + std::string(op_name(r.op)) + "\",\"backend\":\"" +
                                json_escape(backend) + "\"," + batch +
                                ",\"phase_scopes\":" + std::to_string(log.scopes) +
                                (set != 0 ? ",\"process_set\":" + std::to_string(set) : "");
  const double t0 = us(start);
  std::lock_guard<std::mutex> lk(mu_);
  SetState& st = sets_[set];
  for (size_t i = 0; i < r.names.size(); ++i) {
    const std::string& name = r.names[i];
    const int tid = tid_for(set, name);
    TensorEntry* e = i < entries.size() ? entries[i] : nullptr;
    auto late = st.late.find(name);
    std::vector<std::string> rest;  // the events after the wait span, in order
    bool has_wait = false;
    Clock::time_point ready{};
    if (e && e->submitted != Clock::time_point{} && st.last_round_end != Clock::time_point{}) {
      has_wait = true;
      ready = std::max(st.last_round_end, e->submitted);
      rest.push_back(
          span("queue", "queue", rank_, tid, us(ready), us(std::max(ready, start) - ready), ""));
    }
    if (in.count() > 0) rest.push_back(span("copy_in", "copy_in", rank_, tid, t0, us(in), batch));
    rest.push_back(span(json_escape(call).c_str(), "collective", rank_, tid, t0 + us(in), us(coll),
                        coll_args));
    if (out.count() > 0) {
      rest.push_back(
          span("copy_out", "copy_out", rank_, tid, t0 + us(in) + us(coll), us(out), batch));
    }
    std::string dargs = std::string("\"ok\":") + (status.ok() ? "true" : "false");
    if (!status.ok()) dargs += ",\"error\":\"" + json_escape(status.message()) + "\"";
    rest.push_back(instant("done", "done", rank_, tid, us(end), dargs));

    Deferred d{name,
               tid,
               us(e ? e->submitted : start),
               us(ready - (e ? e->submitted : start)),
               std::move(rest),
               has_wait};
    if (late != st.late.end()) {
      emit_tensor(std::move(d), &late->second);
      st.late.erase(late);
    } else if (has_wait && ask_late && ready - e->submitted >= Controller::kLateQueryMin) {
      // Rank 0 asks the next round who was late: written with the answer (see record_round).
      st.deferred.push_back(std::move(d));
    } else {
      emit_tensor(std::move(d), nullptr);
    }
  }
}

void Timeline::emit_tensor(Deferred d, const std::vector<int>* late_ranks) {
  if (d.has_wait) {
    std::string wargs;
    if (late_ranks) wargs = "\"late_ranks\":" + ranks_json(*late_ranks);
    emit(span("wait", "wait", rank_, d.tid, d.wait_ts, d.wait_dur, wargs));
  }
  for (std::string& line : d.rest) emit(std::move(line));
}

void Timeline::flush_deferred(SetState* st) {
  for (Deferred& d : st->deferred) {
    auto late = st->late.find(d.name);
    if (late != st->late.end()) {
      emit_tensor(std::move(d), &late->second);
      st->late.erase(late);
    } else {
      emit_tensor(std::move(d), nullptr);
    }
  }
  st->deferred.clear();
}

}  // namespace hvd::core
