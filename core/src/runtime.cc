// SPDX-License-Identifier: Apache-2.0
// The runtime: the tensor table, enqueue, the background loop's waits, abort and shutdown
// (rounds and their execution: runtime_round.cc).
#include "hvd/core/runtime.h"

#include <algorithm>
#include <chrono>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "finished.h"
#include "guarded.h"
#include "hvd/core/fusion.h"
#include "hvd/core/logging.h"
#include "hvd/core/validation.h"

namespace hvd::core {

using detail::Finished;
using detail::guarded;

Runtime::Runtime(Config config, RuntimeParts parts)
    : config_(std::move(config)),
      parts_(std::move(parts)),
      controller_(parts_.transport.get(), config_.cache_capacity, parts_.clock),
      rank_(parts_.transport->rank()),
      size_(parts_.transport->size()),
      timeline_slot_(std::make_shared<TimelineSlot>()),
      stall_(config_) {
  // Runs on a user thread that starts waiting on one of this runtime's handles.
  waiters_ = std::make_shared<WaitGroup>([this] {
    std::lock_guard<std::mutex> l(mu_);
    if (settling_) cv_.notify_one();
  });
  controller_.set_stall_threshold(stall_.threshold_s());
  timeline_slot_->writes = writes_timeline();
  if (!config_.timeline.empty()) {
    Status s = start_timeline(config_.timeline, config_.timeline_mark_cycles);
    if (!s.ok()) {
      HVD_LOG(Warning) << s.message();
    }
  }
}

Status Runtime::start_timeline(const std::string& path, bool mark_cycles) {
  timeline_slot_->armed.store(true, std::memory_order_relaxed);
  if (!writes_timeline()) return Status::OK();
  const std::string file = config_.timeline_all_ranks ? Timeline::path_for_rank(path, rank_) : path;
  auto t = std::make_shared<Timeline>(file, rank_, mark_cycles || config_.timeline_mark_cycles);
  if (!t->ok()) return invalid_argument("cannot write the timeline to '" + file + "'");
  t->start();
  std::lock_guard<std::mutex> lk(timeline_slot_->mu);
  timeline_slot_->timeline = std::move(t);  // a previous one closes once the last user ends
  return Status::OK();
}

void Runtime::stop_timeline() {
  timeline_slot_->armed.store(false, std::memory_order_relaxed);
  if (!writes_timeline()) return;
  std::shared_ptr<Timeline> old;
  {
    std::lock_guard<std::mutex> lk(timeline_slot_->mu);
    old = std::move(timeline_slot_->timeline);
  }
}

std::shared_ptr<Timeline> Runtime::active_timeline() const {
  if (!timeline_slot_->writes) return nullptr;  // elsewhere there is never one: no lock
  std::lock_guard<std::mutex> lk(timeline_slot_->mu);
  return timeline_slot_->timeline;
}

void Runtime::share_timeline(const Runtime& global, std::vector<int32_t> global_ranks) {
  timeline_slot_ = global.timeline_slot_;
  global_ranks_ = std::move(global_ranks);
}

Runtime::~Runtime() {
  shutdown();
  waiters_->close();  // handles outliving this runtime no longer call into it
}

void Runtime::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable() || stopped_) return;
  loop_exited_ = false;
  // The thread shares ownership while it runs (null when no shared_ptr owns this runtime:
  // shutdown() then waits for the thread however long it takes). Dropping the last reference
  // at the end of the thread destroys the runtime there; shutdown() detaches in that case.
  std::shared_ptr<Runtime> self = weak_from_this().lock();
  thread_ = std::thread([this, self]() mutable {
    loop();
    self.reset();
  });
}

Handle Runtime::enqueue(TensorEntry entry) {
  const Request& r = entry.request;
  if (r.process_set != parts_.process_set) {
    auto child = process_set(r.process_set);
    if (!child.ok()) {
      return refuse(
          [&entry](TensorEntry* e) {
            *e = std::move(entry);
            return false;
          },
          child.status());
    }
    return child.value()->enqueue(std::move(entry));
  }
  const std::string name = r.name;
  return enqueue_with(name, [&entry](TensorEntry* e) { fill_slot(e, std::move(entry)); });
}

void Runtime::fill_slot(TensorEntry* slot, TensorEntry&& entry) {
  const int64_t hint = slot->cache_hint;
  std::shared_ptr<void> event = std::move(slot->submit_event);
  const int event_device = slot->submit_event_device;
  *slot = std::move(entry);
  slot->cache_hint = hint;
  slot->submit_event = std::move(event);
  slot->submit_event_device = event_device;
}

Handle Runtime::refuse(FunctionRef<bool(TensorEntry*)> fill, const Status& why) {
  TensorEntry e;
  (void)fill(&e);
  if (!e.handle) e.handle = new_handle_state();
  e.handle->refused.store(true, std::memory_order_relaxed);
  e.handle->complete(about(e.request, why));
  return Handle(e.handle);
}

Handle Runtime::enqueue_with(const std::string& name, FunctionRef<void(TensorEntry*)> fill) {
  return enqueue_slot(
      name,
      [&fill](TensorEntry* e) {
        fill(e);
        return false;
      },
      true);
}

Handle Runtime::enqueue_refill(const std::string& name, FunctionRef<bool(TensorEntry*)> refill) {
  return enqueue_slot(name, refill, false);
}

Handle Runtime::enqueue_slot(const std::string& name, FunctionRef<bool(TensorEntry*)> fill,
                             bool reset) {
  std::unique_lock<std::mutex> lk(mu_);
  if (stopped_) {
    Status st = stop_status_;
    lk.unlock();
    return refuse(fill, st);
  }
  if (removals_ > 0) {  // before shutdown_requested_: a removed set stops as it is removed
    lk.unlock();
    return refuse(fill, aborted("process set " + std::to_string(parts_.process_set) +
                                " is being removed (remove_process_set(" +
                                std::to_string(parts_.process_set) +
                                ") was called on this rank before this collective)"));
  }
  if (shutdown_requested_) {
    lk.unlock();
    return refuse(fill, aborted("submitted while hvd is shutting down"));
  }
  // A runtime serves one process set: the name is the key. The slot of a finished collective
  // stays, so the next one with its name reuses its memory (and its negotiation hint).
  Slot* found = find_slot(name);
  if (found && found->active) {
    const bool refused_here = !found->request.refused.empty();
    lk.unlock();
    const std::string who = "a collective named '" + name + "' ";
    const std::string rank = "rank " + std::to_string(rank_);
    return refuse(
        fill, invalid_argument(refused_here
                                   ? who + "was refused on " + rank +
                                         " and is still being negotiated, so that the other ranks' "
                                         "calls of it fail too; pick another name or call it again "
                                         "after theirs"
                                   : who + "is already in flight on " + rank +
                                         "; names must be unique among pending operations (wait "
                                         "for the first one or pick another name)"));
  }
  if (!found) {
    // Idle slots go only once they are at least as many as the active ones (and kMaxTable):
    // a sweep then visits at most twice the slots it frees, O(1) per insertion however many
    // names are in flight. (Sweeping whenever the table held kMaxTable names made every new
    // name scan the table once more than kMaxTable were in flight.)
    const size_t idle = table_.size() - active_;
    if (idle >= std::max(kMaxTable, active_)) drop_idle_slots();
    auto it = table_.try_emplace(name).first;
    found = &it->second;
    found->key = &it->first;
  }
  note_order(found);
  Slot& slot = *found;
  if (reset) {
    reset_for_reuse(&slot);
  } else {  // what retire() left: the rest is the refill's
    slot.handle.reset();
    slot.allocator = nullptr;
  }
  slot.request_unchanged = fill(&slot);
  // Only a timeline reads it (its waits, late ranks): one clock read less per collective.
  const bool stamp = timeline_slot_->armed.load(std::memory_order_relaxed) ||
                     ages_flagged_.load(std::memory_order_relaxed);
  slot.submitted =
      stamp ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (!slot.handle) slot.handle = take_handle_state(&slot);
  // Not shared yet (a recycled state of this slot has it already).
  if (slot.handle->waiters != waiters_) slot.handle->waiters = waiters_;
  Handle h(slot.handle);
  Request& r = slot.request;
  Status bad;
  bool negotiate_refusal = size_ > 1;  // the other ranks' calls fail with it (see Request)
  if (slot.request_unchanged && slot.accepted) {
    // The very request accepted below last time (the refill compared every field): valid.
  } else if (r.name != name || r.process_set != parts_.process_set) {
    bad = internal_error("submitted to the wrong table (name '" + name + "', process set " +
                         std::to_string(parts_.process_set) + ")");
    negotiate_refusal = false;
  } else if (!r.refused.empty()) {
    bad = invalid_argument(r.refused);  // refused by the caller (the API or a binding)
  } else {
    bad = global_root_to_set_rank(&r);
    if (bad.ok()) bad = validate_local(r, size_);
  }
  slot.accepted = bad.ok();
  if (bad.ok() && slot.input.device.kind == DeviceKind::kCuda) {
    if (!parts_.device_executor) {
      bad = invalid_argument(describe(r.op, r.name) + ": tensor is on " + slot.input.device.str() +
                             " but " + parts_.no_device_reason);
    } else {
      // On this thread: the producer's stream as of now.
      bad = parts_.device_executor->prepare_input(&slot);
    }
  }
  if (!bad.ok() && !negotiate_refusal) {  // the slot stays idle
    std::shared_ptr<HandleState> hs = std::move(slot.handle);
    slot.allocator = nullptr;
    lk.unlock();
    hs->refused.store(true, std::memory_order_relaxed);
    hs->complete(bad);
    return h;
  }
  std::shared_ptr<HandleState> refused_handle;
  if (!bad.ok()) {
    // The caller's handle fails now; the request still goes to negotiation, carrying the
    // reason, under a handle of its own, so that every rank's call of this name fails with it
    // once all have submitted (nothing runs: the response is an error).
    refused_handle = std::move(slot.handle);
    slot.handle = new_handle_state();
    slot.request_unchanged = false;
    r.refused = bad.message();
    // Nothing else of it is compared; what made it invalid (an enum out of range) must not
    // make the request list unreadable on the wire.
    r.reduce_op = ReduceOp::kSum;
    r.dtype = DataType::kUInt8;
    slot.input = TensorView{};
    slot.output = TensorView{};
    slot.allocator = nullptr;
  }
  if (!slot.allocator && !slot.pool) slot.pool = pool_;
  slot.handle->in_use.store(true, std::memory_order_relaxed);  // published by mu_
  slot.active = true;
  ++active_;
  queue_.push_back(&slot);  // slots do not move; only the user side erases idle ones
  // Only an idle or backing-off loop needs waking; a busy one looks anyway.
  // Once: the rest of a burst submitted before the loop took mu_ again finds it woken.
  if ((sleeping_ || pausing_) && !woken_) {
    woken_ = true;
    cv_.notify_one();
  }
  if (refused_handle) {
    lk.unlock();
    refused_handle->refused.store(true, std::memory_order_relaxed);
    refused_handle->complete(bad);
  }
  return h;
}

void Runtime::post_notice(const std::string& text) {
  if (size_ < 2) return;  // nobody waits for this rank
  std::lock_guard<std::mutex> lk(mu_);
  if (stopped_) return;
  notices_.push_back(text);
  queued_at_notice_ = queue_.size();
  if ((sleeping_ || pausing_) && !woken_) {
    woken_ = true;
    cv_.notify_one();
  }
}

void Runtime::notice_refusal(int32_t set, const std::string& what) {
  const std::string text = Controller::notice_text(rank_, what);
  if (set == parts_.process_set) {
    post_notice(text);
    return;
  }
  if (parts_.process_set != 0) return;  // only the global runtime knows the other sets
  std::vector<std::shared_ptr<Runtime>> to;
  bool unknown = false;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    auto c = children_.find(set);
    if (c != children_.end()) {
      to.push_back(c->second);
    } else if (!set_ranks_.count(set)) {
      unknown = true;
      for (auto& kv : children_) to.push_back(kv.second);
    }
  }
  if (unknown) post_notice(text);
  for (auto& r : to) r->post_notice(text);
}

Status Runtime::global_root_to_set_rank(Request* r) const {
  // A broadcast's root is a global rank (as in Horovod and torch.distributed); the set's
  // negotiation and executors use the rank within the set.
  if (r->op != OpType::kBroadcast || global_ranks_.empty()) return Status::OK();
  auto it = std::find(global_ranks_.begin(), global_ranks_.end(), r->root);
  if (it == global_ranks_.end()) {
    return invalid_argument(
        describe(r->op, r->name) + ": root rank " + std::to_string(r->root) +
        " is not a member of process set " + std::to_string(parts_.process_set) +
        " (global ranks " +
        rank_ranges(std::vector<int>(global_ranks_.begin(), global_ranks_.end())) +
        "); root_rank is a global rank");
  }
  r->root = static_cast<int32_t>(it - global_ranks_.begin());
  return Status::OK();
}

void Runtime::retire(TensorEntry* e) {
  auto* slot = static_cast<Slot*>(e);
  if (!slot->active) return;
  slot->active = false;
  --active_;
  if (slot->handle) {
    slot->handle->in_use.store(false, std::memory_order_release);
    // Kept for recycling, unless it could keep user memory alive (an output, device work).
    if (!slot->handle->extra_if()) {
      if (slot->spare[0]) slot->spare[1].swap(slot->spare[0]);  // the older one goes below
      slot->spare[0].swap(slot->handle);
    }
  }
  // Drop what could keep user memory alive (the handle's output, an allocator's captures);
  // the rest is overwritten by the next collective of this name.
  if (slot->handle) slot->handle.reset();
  if (slot->allocator) slot->allocator = nullptr;
}

std::shared_ptr<HandleState> Runtime::take_handle_state(Slot* slot) {
  // The older first: the caller may still hold the newer one (see Slot::spare).
  for (int i = 1; i >= 0; --i) {
    auto& spare = slot->spare[i];
    if (spare.use_count() == 1 && HandleState::recycle(spare)) return std::move(spare);
  }
  return new_handle_state();
}

Runtime::Slot* Runtime::find_slot_slow(const std::string& name) {
  if (!order_.empty() && same_text(*order_.front()->key, name)) {  // the sequence starts again
    order_pos_ = 0;
    order_followed_ = true;
    return order_.front();
  }
  stats_.slot_lookups.fetch_add(1, std::memory_order_relaxed);
  auto it = table_.find(name);
  return it == table_.end() ? nullptr : &it->second;
}

void Runtime::note_new_order(Slot* slot) {
  if (slot->order_index < order_.size() && order_[slot->order_index] == slot) {
    order_pos_ = slot->order_index + 1;  // a known place: the sequence restarted or skipped
    order_followed_ = true;
    if (burst_complete() && settling_) cv_.notify_one();
    return;
  }
  if (order_followed_ && settling_) cv_.notify_one();  // no longer the last step's burst
  order_followed_ = false;
  order_.resize(order_pos_);  // another order from here on: learn it
  if (order_.size() < kMaxTable) {
    slot->order_index = order_.size();
    order_.push_back(slot);
  }
  order_pos_ = order_.size();
}

void Runtime::drop_idle_slots() {
  order_.clear();  // it points at slots, some of which go now
  order_pos_ = 0;
  stats_.slot_sweep_visits += table_.size();
  for (auto it = table_.begin(); it != table_.end();) {
    it = it->second.active ? std::next(it) : table_.erase(it);
  }
}

bool Runtime::wait_for_work(std::vector<TensorEntry*>* fresh, bool* want_shutdown) {
  std::unique_lock<std::mutex> lk(mu_);
  if (stopped_) return false;
  const bool was_idle =
      queue_.empty() && notices_.empty() && !controller_.has_pending() && !shutdown_requested_;
  if (was_idle) {
    // Nothing to negotiate: block (no polling) until a user thread submits, or until the
    // stall heartbeat: then take part in one (empty) round, so that ranks which did submit
    // are not blocked in a round forever and rank 0 learns about and reports the stall.
    sleeping_ = true;
    woken_ = false;
    auto woken = [&] {
      return stopped_ || !queue_.empty() || !notices_.empty() || shutdown_requested_;
    };
    const auto heartbeat = idle_heartbeat();
    if (heartbeat.count() > 0) {
      cv_.wait_for(lk, heartbeat, woken);
    } else {
      cv_.wait(lk, woken);
    }
    sleeping_ = false;
  }
  if (stopped_) return false;
  if (!was_idle && queue_.empty() && !shutdown_requested_ && fruitless_rounds_ > 0) {
    // Every rank has work but the last rounds matched nothing (ranks submitted different
    // names). All ranks saw the same empty rounds, so all back off alike instead of spinning;
    // new local work ends the pause at once.
    auto pause = kSettleStep * (1 << std::min(fruitless_rounds_, 5));
    pausing_ = true;  // enqueue() wakes a pausing loop as it wakes a sleeping one
    woken_ = false;
    cv_.wait_for(lk, pause, [&] {
      return stopped_ || !queue_.empty() || !notices_.empty() || shutdown_requested_;
    });
    pausing_ = false;
  }
  if (was_idle && !shutdown_requested_ && !queue_.empty()) {  // empty: a heartbeat round
    if (config_.cycle_time_ms > 0) {
      cv_.wait_for(lk, std::chrono::duration<double, std::milli>(config_.cycle_time_ms),
                   [&] { return stopped_ || shutdown_requested_; });
    } else {
      // A burst (a backward pass, a loop of async calls) arrives tensor by tensor: let it
      // settle so one round carries it, but never wait more than kSettleCap, and stop as soon
      // as a user thread waits for a result or the burst is the last step's again and its
      // last name came (burst_complete()). While it follows the last step, the loop sleeps
      // until one of those (no wake-up every kSettleStep: on a shared core those take the
      // submitting thread's time); otherwise it goes once a kSettleStep brought nothing new.
      const auto cap = std::chrono::steady_clock::now() + kSettleCap;
      size_t seen = queue_.size();
      settling_ = true;
      auto done = [&] {
        return stopped_ || shutdown_requested_ || waiters_->waiting() > 0 || burst_complete();
      };
      while (!done() && std::chrono::steady_clock::now() < cap) {
        if (order_followed_) {
          cv_.wait_until(lk, cap, [&] { return done() || !order_followed_; });
          seen = queue_.size();
          continue;
        }
        cv_.wait_for(lk, kSettleStep, done);
        if (queue_.size() == seen) break;
        seen = queue_.size();
      }
      settling_ = false;
    }
  }
  size_t later_from = queue_.size();
  if (!notices_.empty()) {
    // Calls submitted after the refusal go in the next round, so rank 0 sees them arrive after
    // the notice: one that then runs on every rank tells it exactly that this rank went on in
    // step with the others (a same-round call could have been submitted before the refusal,
    // and a notice left over failed a later call this rank was merely late for).
    later_from = std::min(queued_at_notice_, queue_.size());
    for (std::string& text : notices_) controller_.notice(std::move(text));
    notices_.clear();
  }
  fresh->swap(queue_);  // queue_ takes the (cleared) vector of the last round
  if (later_from < fresh->size()) {
    queue_.assign(fresh->begin() + static_cast<std::ptrdiff_t>(later_from), fresh->end());
    fresh->resize(later_from);
  }
  *want_shutdown = shutdown_requested_;
  return true;
}

void Runtime::abort(const Status& s) {
  std::vector<std::shared_ptr<Runtime>> children;
  {
    std::lock_guard<std::mutex> lk(sets_mu_);
    for (auto& kv : children_) children.push_back(kv.second);
  }
  for (auto& c : children) c->abort(s);
  Finished finished;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_) return;
    stopped_ = true;
    stop_status_ = s;
    // Device work already handed out may never finish now: its handles report the abort.
    for (auto& w : outstanding_) {
      if (auto c = w.lock()) c->fail(s);
    }
    outstanding_.clear();
    for (auto& kv : table_) {
      if (kv.second.active) finished.add(kv.second.handle, about(kv.second.request, s));
    }
    cv_.notify_all();
    exit_cv_.notify_all();  // a shutdown() waiting for the loop stops waiting for good
  }
  finished.complete();  // after releasing mu_: callbacks may submit
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
#ifdef __linux__
  // This thread's short sleeps (settling a burst, polling a collective a peer has not joined
  // yet) must end on time: the default 50 us timer slack would add more than they last.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  // The exception barrier: run_once() turns what throws inside a round into this rank's
  // failure, reported to every rank by the next round. Should something still escape (a
  // bug), it is reported the same way; a second escape before that stops this rank alone.
  for (int escaped = 0;;) {
    bool more = false;
    Status s = guarded("the background thread", [&] { more = run_once(); });
    if (s.ok()) {
      escaped = 0;
    } else if (++escaped == 1) {
      HVD_LOG(Error) << s.message();
      controller_.fail(s);
      more = true;
    } else {
      abort(s);
      more = false;
    }
    if (!more) break;
  }
  std::lock_guard<std::mutex> lk(mu_);
  release_leftovers();
  loop_exited_ = true;
  exit_cv_.notify_all();
}

void Runtime::release_leftovers() {
  // The loop has ended: no executor runs the entries an abort failed but left in the table.
  for (auto& kv : table_) retire(&kv.second);
}

void Runtime::shutdown() {
  // Every process set starts its own negotiated shutdown now, concurrently with this set's:
  // none waits for another, and once this set agreed (every rank called shutdown()), every
  // rank has asked every set to stop, so the wait for them can be bounded.
  for (auto& c : set_runtimes(false)) c->request_stop();
  shutdown_own();
  stop_children(set_runtimes(true));
}

void Runtime::shutdown_own() {
  std::unique_lock<std::mutex> lk(mu_);
  shutdown_requested_ = true;
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id()) {
    // The background thread dropped the last reference after its loop ended (see start()).
    thread_.detach();
    return;
  }
  if (!thread_.joinable()) {
    lk.unlock();
    while (run_once()) {
    }
    lk.lock();
    release_leftovers();
    return;
  }
  // After an abort the thread may be stuck inside a transport call that will never return;
  // give it a moment, then leave it behind rather than hang the caller: it holds its own
  // reference to this runtime, so nothing it touches is freed under it.
  exit_cv_.wait(lk, [&] { return loop_exited_ || stopped_; });
  // A dead peer never answers: a thread stuck in a blocking data collective with it will not
  // return, and waiting the whole grace only delayed the caller (10 s in a third of the
  // shutdowns after a peer died); threads in abortable waits leave within milliseconds.
  const auto grace = stop_status_.code() == StatusCode::kPeerFailure
                         ? std::min(parts_.shutdown_grace, std::chrono::milliseconds(50))
                         : parts_.shutdown_grace;
  bool exited = exit_cv_.wait_for(lk, grace, [&] { return loop_exited_; });
  const std::string why = stop_status_.message();
  lk.unlock();
  if (!exited && !weak_from_this().expired()) {
    HVD_LOG(Warning) << "background thread did not stop after: " << why
                     << "; left running until its call returns";
    thread_.detach();
    return;
  }
  if (!exited) {
    HVD_LOG(Warning) << "background thread did not stop after: " << why
                     << "; waiting for it (this runtime is not owned by a shared_ptr)";
  }
  thread_.join();
}

}  // namespace hvd::core
