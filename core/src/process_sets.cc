// SPDX-License-Identifier: Apache-2.0
// Process sets: child runtimes of the global runtime, added and removed by global collectives.
#include <algorithm>
#include <future>

#include "hvd/core/logging.h"
#include "hvd/core/runtime.h"
#include "hvd/core/validation.h"

namespace hvd::core {
namespace {

std::string set_str(const std::vector<int32_t>& ranks) {
  return rank_ranges(std::vector<int>(ranks.begin(), ranks.end()));
}

}  // namespace

TensorEntry Runtime::set_op_entry(OpType op, const char* prefix) {
  TensorEntry e;
  e.request.op = op;
  e.request.name = internal_name(prefix + std::to_string(set_ops_.fetch_add(1)));
  e.request.dtype = DataType::kUInt8;
  e.request.shape = {0};
  e.request.rank = rank_;
  e.request.process_set = parts_.process_set;
  e.input = e.output = TensorView(nullptr, DataType::kUInt8, {0});
  return e;
}

Handle Runtime::add_process_set(const std::vector<int32_t>& ranks, const std::string& refused) {
  TensorEntry e = set_op_entry(OpType::kAddProcessSet, "process_set.add.");
  e.request.splits.assign(ranks.begin(), ranks.end());
  if (!refused.empty()) {
    const std::vector<int64_t> list(ranks.begin(), ranks.end());
    e.request.refused = "add_process_set(" + shape_str(list) + "): " + refused;
  }
  if (parts_.process_set != 0) {
    auto h = new_handle_state();
    h->complete(precondition("add_process_set: call it on the global process set"));
    return Handle(h);
  }
  return enqueue(std::move(e));
}

Handle Runtime::remove_process_set(int32_t id) {
  TensorEntry e = set_op_entry(OpType::kRemoveProcessSet, "process_set.remove.");
  e.request.root = id;
  auto fail = [](const Status& s) {
    auto h = new_handle_state();
    h->complete(s);
    return Handle(h);
  };
  const std::string who = "remove_process_set(" + std::to_string(id) + ")";
  if (parts_.process_set != 0) return fail(precondition(who + ": call it on the global set"));
  if (id == 0) return fail(invalid_argument(who + ": the global process set cannot be removed"));
  std::shared_ptr<Runtime> child;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    if (!set_ranks_.count(id)) {
      return fail(invalid_argument(who + ": there is no process set " + std::to_string(id) +
                                   " (never added, or removed already)"));
    }
    auto it = children_.find(id);
    if (it != children_.end()) child = it->second;
  }
  // Closed from here on (when idle), so that work queued after this call cannot be caught by
  // the set's shutdown; reopened if the removal fails (reopen_after_failed_removal).
  const bool busy = child && !child->close_for_removal();
  e.request.splits = {busy ? 1 : 0};
  return enqueue(std::move(e));
}

bool Runtime::close_for_removal() {
  std::lock_guard<std::mutex> lk(mu_);
  if (active_ > 0) return false;
  ++removals_;
  return true;
}

void Runtime::reopen_after_failed_removal(const Request& removal) {
  if (removal.splits.empty() || removal.splits[0] != 0) return;  // busy here: never closed
  const int32_t id = removal.root;
  std::shared_ptr<Runtime> child;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    auto it = children_.find(id);
    if (it != children_.end()) child = it->second;
  }
  if (!child) return;
  std::lock_guard<std::mutex> lk(child->mu_);
  if (child->removals_ > 0) --child->removals_;
}

Result<std::shared_ptr<Runtime>> Runtime::process_set(int32_t id) {
  if (id == parts_.process_set) {
    std::shared_ptr<Runtime> self = weak_from_this().lock();
    // Not owned by a shared_ptr (a test's stepped runtime): a non-owning pointer.
    return self ? self : std::shared_ptr<Runtime>(std::shared_ptr<Runtime>(), this);
  }
  if (parts_.process_set != 0) {
    return invalid_argument("process set " + std::to_string(id) +
                            " is not reachable from process set " +
                            std::to_string(parts_.process_set));
  }
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto r = set_ranks_.find(id);
  if (r == set_ranks_.end()) {
    return invalid_argument("there is no process set " + std::to_string(id) +
                            " (never added, or removed already)");
  }
  auto c = children_.find(id);
  if (c == children_.end()) {
    return invalid_argument("rank " + std::to_string(rank_) + " is not a member of process set " +
                            std::to_string(id) + " (ranks " + set_str(r->second) + ")");
  }
  return c->second;
}

size_t Runtime::in_flight() const {
  std::lock_guard<std::mutex> lk(mu_);
  return active_;
}

std::vector<int32_t> Runtime::process_set_ranks(int32_t id) const {
  if (id == 0) {
    std::vector<int32_t> all(static_cast<size_t>(size_));
    for (int i = 0; i < size_; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }
  std::lock_guard<std::mutex> lk(sets_mu_);
  auto it = set_ranks_.find(id);
  return it == set_ranks_.end() ? std::vector<int32_t>{} : it->second;
}

std::vector<int32_t> Runtime::process_set_ids() const {
  std::vector<int32_t> ids = {0};
  std::lock_guard<std::mutex> lk(sets_mu_);
  for (const auto& kv : set_ranks_) ids.push_back(kv.first);
  return ids;
}

Status Runtime::execute_process_set_op(const Response& r, TensorEntry* e) {
  if (r.op == OpType::kAddProcessSet) {
    std::vector<int32_t> ranks(r.rank_rows.begin(), r.rank_rows.end());
    const int32_t id = next_set_id_++;
    const std::string who = "add_process_set(" + shape_str(r.rank_rows) + ")";
    if (!parts_.make_process_set) {
      return invalid_argument(who + ": this runtime cannot create process sets");
    }
    RuntimeParts p;
    p.process_set = id;
    Status s = parts_.make_process_set(id, ranks, &p);
    if (!s.ok()) return Status(s.code(), who + ": " + s.message());
    p.process_set = id;
    std::shared_ptr<Runtime> child;
    if (p.transport) {
      child = std::make_shared<Runtime>(config_, std::move(p));
      child->share_timeline(*this, ranks);
      child->start();
    }
    {
      std::lock_guard<std::mutex> lk(sets_mu_);
      set_ranks_[id] = ranks;
      if (child) children_[id] = child;
    }
    e->handle->result = id;
    HVD_LOG(Debug) << "process set " << id << " added: ranks " << set_str(ranks);
    return Status::OK();
  }
  // Remove: the set's members stop its runtime together (a negotiated shutdown of the set).
  const int32_t id = r.root;
  std::shared_ptr<Runtime> child;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    auto it = children_.find(id);
    if (it != children_.end()) {
      child = it->second;
      children_.erase(it);
    }
    set_ranks_.erase(id);
  }
  if (child) {
    // The set's members stop its runtime together (a negotiated shutdown of the set), each on
    // the set's own thread: the global set's thread never waits for it (a set stuck in a call
    // that never returns would stop every set). shutdown() waits for it, bounded.
    child->request_stop();
    std::lock_guard<std::mutex> lk(sets_mu_);
    stopping_.erase(std::remove_if(stopping_.begin(), stopping_.end(),
                                   [](const std::weak_ptr<Runtime>& w) { return w.expired(); }),
                    stopping_.end());
    stopping_.push_back(child);
  }
  e->handle->result = id;
  return Status::OK();
}

bool Runtime::stop_within(std::chrono::milliseconds limit, const Status& late) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!thread_.joinable()) {
    lk.unlock();
    shutdown();  // not started: runs its own rounds on this thread (tests)
    return true;
  }
  shutdown_requested_ = true;
  cv_.notify_all();
  const bool exited = exit_cv_.wait_for(lk, limit, [&] { return loop_exited_; });
  lk.unlock();
  if (!exited) abort(late);  // fails what is left; the thread owns this runtime while it runs
  lk.lock();
  if (loop_exited_) {
    lk.unlock();
    thread_.join();
  } else {
    thread_.detach();  // leaves once its call returns (see start())
  }
  return exited;
}

void Runtime::request_stop() {
  std::lock_guard<std::mutex> lk(mu_);
  shutdown_requested_ = true;
  cv_.notify_all();
}

std::vector<std::shared_ptr<Runtime>> Runtime::set_runtimes(bool take) {
  std::vector<std::shared_ptr<Runtime>> sets;
  std::lock_guard<std::mutex> lk(sets_mu_);
  for (auto& kv : children_) sets.push_back(kv.second);  // ascending ids
  for (auto& w : stopping_) {
    if (auto c = w.lock()) sets.push_back(std::move(c));
  }
  if (take) {
    children_.clear();
    set_ranks_.clear();
    stopping_.clear();
  }
  return sets;
}

void Runtime::stop_children(const std::vector<std::shared_ptr<Runtime>>& sets) {
  const auto grace = parts_.shutdown_grace;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (const auto& c : sets) {
    // Rounded up: a truncated remainder ended the wait up to 1 ms before the grace.
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const std::string id = std::to_string(c->process_set_id());
    const bool stopped = c->stop_within(
        std::max(left, std::chrono::milliseconds(0)),
        aborted("process set " + id + " did not stop within " + std::to_string(grace.count()) +
                " ms of shutdown() (a collective or round of it is stuck); its work is "
                "failed and its thread left to end on its own"));
    if (!stopped) {
      HVD_LOG(Warning) << "process set " << id << " did not stop within " << grace.count()
                       << " ms of shutdown(); its remaining work was failed";
    }
  }
}

}  // namespace hvd::core
