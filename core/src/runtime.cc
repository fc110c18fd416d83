// SPDX-License-Identifier: Apache-2.0
// The background loop: wait for work, negotiate a round, fuse, execute, complete handles.
#include "hvd/core/runtime.h"

#include <chrono>

#include "hvd/core/fusion.h"
#include "hvd/core/logging.h"
#include "hvd/core/validation.h"

namespace hvd::core {

Runtime::Runtime(Config config, RuntimeParts parts)
    : config_(std::move(config)),
      parts_(std::move(parts)),
      controller_(parts_.transport.get(), config_.cache_capacity),
      rank_(parts_.transport->rank()),
      size_(parts_.transport->size()) {}

Runtime::~Runtime() { shutdown(); }

void Runtime::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable() || stopped_) return;
  loop_exited_ = false;
  thread_ = std::thread([this] { loop(); });
}

std::string Runtime::key(int32_t ps, const std::string& name) const {
  return std::to_string(ps) + "/" + name;
}

Handle Runtime::enqueue(TensorEntry entry) {
  if (!entry.handle) entry.handle = std::make_shared<HandleState>();
  Handle h(entry.handle);
  const Request& r = entry.request;
  const std::string who = std::string(op_name(r.op)) + " '" + r.name + "'";
  Status bad = validate_local(r, size_);
  if (bad.ok() && entry.input.device.kind == DeviceKind::kCuda && !parts_.device_executor) {
    bad = invalid_argument(who + ": tensor is on " + entry.input.device.str() + " but " +
                           parts_.no_device_reason);
  }
  if (!bad.ok()) {
    entry.handle->complete(bad);
    return h;
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (stopped_) {
    entry.handle->complete(Status(stop_status_.code(), who + ": " + stop_status_.message()));
    return h;
  }
  if (shutdown_requested_) {
    entry.handle->complete(aborted(who + ": submitted while hvd is shutting down"));
    return h;
  }
  std::string k = key(r.process_set, r.name);
  if (table_.count(k)) {
    entry.handle->complete(invalid_argument(
        who + ": a collective named '" + r.name + "' is already in flight on rank " +
        std::to_string(rank_) + "; names must be unique among pending operations (wait for the "
        "first one or pick another name)"));
    return h;
  }
  table_.emplace(k, std::move(entry));
  queue_.push_back(k);
  cv_.notify_one();
  return h;
}

bool Runtime::wait_for_work(std::vector<Request>* fresh, bool* want_shutdown) {
  std::unique_lock<std::mutex> lk(mu_);
  if (stopped_) return false;
  bool was_idle = queue_.empty() && !controller_.has_pending() && !shutdown_requested_;
  cv_.wait(lk, [&] {
    return stopped_ || !queue_.empty() || shutdown_requested_ || controller_.has_pending();
  });
  if (stopped_) return false;
  if (was_idle && config_.cycle_time_ms > 0 && !shutdown_requested_) {
    // Batch what the user submits shortly after the first tensor of a burst.
    cv_.wait_for(lk, std::chrono::duration<double, std::milli>(config_.cycle_time_ms),
                 [&] { return stopped_ || shutdown_requested_; });
  }
  for (const auto& k : queue_) {
    auto it = table_.find(k);
    if (it != table_.end()) fresh->push_back(it->second.request);
  }
  queue_.clear();
  *want_shutdown = shutdown_requested_;
  return true;
}

bool Runtime::run_once() {
  std::vector<Request> fresh;
  bool want_shutdown = false;
  if (!wait_for_work(&fresh, &want_shutdown)) return false;
  for (const auto& r : fresh) controller_.submit(r);

  RoundResult round;
  Status s = controller_.run_round(want_shutdown, &round);
  ++stats_.rounds;
  if (!s.ok()) {
    HVD_LOG(Error) << "negotiation failed: " << s.message();
    abort(s);
    return false;
  }
  if (round.full_round) ++stats_.full_rounds;
  stats_.responses += round.responses.size();

  FusionOptions fo{config_.fusion_threshold, config_.fusion_direct_bytes};
  for (const Response& r : plan_fusion(round.responses, fo)) {
    ++stats_.fused_batches;
    execute(r);
  }
  check_stalls();

  if (round.shutdown) {
    std::vector<int> who(round.shutdown_ranks.begin(), round.shutdown_ranks.end());
    Status st = aborted("hvd was shut down (shutdown() called on " +
                        std::string(who.size() == 1 ? "rank " : "ranks ") + rank_ranges(who) +
                        ") before this collective could run on every rank");
    std::lock_guard<std::mutex> lk(mu_);
    stopped_ = true;
    stop_status_ = st;
    for (auto& kv : table_) {
      kv.second.handle->complete(Status(st.code(), std::string(op_name(kv.second.request.op)) +
                                                       " '" + kv.second.request.name +
                                                       "': " + st.message()));
    }
    table_.clear();
    return false;
  }
  return true;
}

void Runtime::check_stalls() {
  if (rank_ != 0 || config_.stall_warning_s <= 0) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_stall_check_ < std::chrono::duration<double>(config_.stall_warning_s)) return;
  last_stall_check_ = now;
  auto stalled = controller_.stalled(config_.stall_warning_s);
  for (const auto& [name, missing] : stalled) {
    HVD_LOG(Warning) << "'" << name << "' has been waiting " << config_.stall_warning_s
                     << "+ s for " << (missing.size() == 1 ? "rank " : "ranks ")
                     << rank_ranges(missing)
                     << " to submit it (a rank may be stuck, or not calling this collective)";
  }
}

void Runtime::execute(const Response& r) {
  std::vector<TensorEntry*> entries;
  std::vector<std::string> keys;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& n : r.names) {
      std::string k = key(r.process_set, n);
      auto it = table_.find(k);
      if (it != table_.end()) {
        entries.push_back(&it->second);
        keys.push_back(k);
      }
    }
  }
  Status s;
  if (r.is_error()) {
    s = mismatch(r.error);
  } else if (entries.size() != r.names.size()) {
    s = internal_error(std::string(op_name(r.op)) + " '" + r.names.front() +
                       "': negotiated but missing from this rank's tensor table");
  } else if (r.op == OpType::kBarrier) {
    s = Status::OK();  // negotiation itself synchronised every rank
  } else {
    Executor* ex = r.device.kind == DeviceKind::kHost ? parts_.host_executor.get()
                                                      : parts_.device_executor.get();
    s = ex ? ex->execute(r, entries)
           : invalid_argument(std::string(op_name(r.op)) + " '" + r.names.front() + "': " +
                              parts_.no_device_reason);
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i]->handle->complete(s);
    table_.erase(keys[i]);
  }
}

void Runtime::abort(const Status& s) {
  std::lock_guard<std::mutex> lk(mu_);
  if (stopped_) return;
  stopped_ = true;
  stop_status_ = s;
  for (auto& kv : table_) {
    const Request& r = kv.second.request;
    kv.second.handle->complete(
        Status(s.code(), std::string(op_name(r.op)) + " '" + r.name + "': " + s.message()));
  }
  cv_.notify_all();
  exit_cv_.notify_all();  // a shutdown() waiting for the loop stops waiting for good
}

Status Runtime::stopped_status() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stop_status_;
}

bool Runtime::stopped() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stopped_;
}

void Runtime::loop() {
  while (run_once()) {
  }
  std::lock_guard<std::mutex> lk(mu_);
  loop_exited_ = true;
  exit_cv_.notify_all();
}

void Runtime::shutdown() {
  std::unique_lock<std::mutex> lk(mu_);
  shutdown_requested_ = true;
  cv_.notify_all();
  if (!thread_.joinable()) {
    lk.unlock();
    while (run_once()) {
    }
    return;
  }
  // After an abort the thread may be stuck inside a transport call that will never return;
  // give it a moment, then leave it behind rather than hang the caller.
  exit_cv_.wait(lk, [&] { return loop_exited_ || stopped_; });
  bool exited = exit_cv_.wait_for(lk, std::chrono::seconds(10), [&] { return loop_exited_; });
  lk.unlock();
  if (exited) {
    thread_.join();
  } else {
    HVD_LOG(Warning) << "background thread did not stop after: " << stop_status_.message();
    thread_.detach();
  }
}

}  // namespace hvd::core
