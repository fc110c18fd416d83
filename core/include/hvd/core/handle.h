// SPDX-License-Identifier: Apache-2.0
// Handles: the user's side of an asynchronous collective.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "hvd/core/status.h"
#include "hvd/core/types.h"

namespace hvd {
namespace core {

/// Device work an executor launched that finishes after the collective was handed to the
/// device (a GPU collective on its stream). Handles hold it and query it themselves
/// (Handle::poll, Handle::wait), so the background thread never waits for the device.
class Completion {
 public:
  virtual ~Completion() = default;
  /// Never blocks: false while the work runs; true once it finished, with its status in *s.
  /// After fail(), true with that status.
  bool poll(Status* s);
  /// From now on poll() reports `why` (an abort: the work may never finish).
  void fail(const Status& why);
  /// Blocks until poll() reports (yielding for 50 us, then sleeping 5-500 us between polls)
  /// and returns its status.
  Status wait();
  /// Never blocks: true once the work itself stopped touching the collective's buffers,
  /// whatever fail() said (after an abort, poll() reports at once while the device may still
  /// write; this does not). Stays true once it was.
  bool let_go();

 protected:
  /// The executor's check: never blocks; true once finished, with its status in *s.
  virtual bool query(Status* s) = 0;
  /// The executor's check for let_go(): never blocks. Default: query() says finished.
  virtual bool work_stopped() {
    Status ignored;
    return query(&ignored);
  }

 private:
  std::mutex mu_;  // a leaf: taken under Runtime::mu_ (abort) and HandleState::mu
  Status failed_;
  std::atomic<bool> has_failed_{false};
  std::atomic<bool> let_go_{false};
};

struct HandleState;

/// The user threads waiting on the handles of one runtime: the runtime owns one, and each
/// handle state it hands out points at it (HandleState::waiters), so that a thread waiting on
/// one runtime's handle changes nothing for another runtime (process set), and a wait takes
/// no lock but this group's gate (shared).
class WaitGroup {
 public:
  /// `on_wait` runs on a user thread each time it starts waiting on an unfinished handle of
  /// this group (it must not block), until close(). Lock contract: the gate is held (shared)
  /// around it, so `on_wait` may take locks that are not held around close() (the runtime's
  /// takes Runtime::mu_); threads starting to wait at once run it at once.
  explicit WaitGroup(std::function<void()> on_wait) : on_wait_(std::move(on_wait)) {}
  /// User threads inside Handle::wait() on an unfinished handle of this group right now.
  int waiting() const { return waiting_.load(std::memory_order_relaxed); }
  /// on_wait never runs again; returns once no call of it runs.
  void close();
  /// Handle::wait(): counts the calling thread in (and runs on_wait), then out.
  void enter();
  void leave() { waiting_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  std::atomic<int> waiting_{0};
  std::shared_mutex gate_;
  bool closed_ = false;  // gate_ (exclusive to write)
  std::function<void()> on_wait_;
};

/// Whether this is a ThreadSanitizer build: TSan does not model std::atomic_thread_fence, so
/// HandleState::recycle() orders itself there by an operation it does model.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

/// What few collectives use (device work, outputs sized by negotiation, joined parts): kept
/// apart (HandleState::extra()), so that the state every collective writes and reads is three
/// cache lines instead of seven.
struct HandleExtra {
  /// Device work still running after the collective was launched: added before complete(),
  /// each removed (under mu) once it finished. Its first error goes to `device_status`, written
  /// before `device_done` is set (`status` never changes once done).
  std::vector<std::shared_ptr<Completion>> device;
  Status device_status;
  /// Outputs whose size negotiation decides (allgather, alltoall): shape and the buffer hvd
  /// allocated when the caller gave no allocator.
  std::vector<int64_t> output_shape;
  /// Not zero-filled (the collective writes it all); may come from the runtime's OutputPool,
  /// to which it returns when the last copy of the handle is gone.
  std::shared_ptr<uint8_t> owned_output;
  TensorView output;
  std::vector<int64_t> received_splits;  ///< alltoall
  /// join_handles(): the parts (released() asks them).
  std::vector<std::weak_ptr<HandleState>> parts;
  /// Device work the executor left running on the buffers (guarded by mu; hold_device()).
  std::vector<std::shared_ptr<Completion>> held;
};

/// Shared between the user (waiting) and the background thread (completing).
struct HandleState {
  /// Guards the fields below that are not atomic; may be held while taking Completion::mu_
  /// (device_settled), never while a callback runs (docs/internals.md, "The lock contract").
  std::mutex mu;
  /// kDone: completed (`status` and the device work are written before, read after: acquire).
  /// kClaimed: a completion is under way (set with or before kDone). Above them (kWatcher
  /// each, changed under mu), the threads blocked on `cv` and the callbacks set with then():
  /// while there are none, an OK completion sets kDone | kClaimed without taking mu.
  std::atomic<uint32_t> state{0};
  static constexpr uint32_t kDone = 1, kClaimed = 2, kWatcher = 4;
  bool done() const { return (state.load(std::memory_order_acquire) & kDone) != 0; }
  /// Set (before completion) when the runtime refused the submission itself: nothing was
  /// queued. A collective that failed later, however quickly, is not "refused".
  std::atomic<bool> refused{false};
  /// Set by the runtime while its executors may read or write this collective's buffers (the
  /// caller's input and output): from the queueing to the moment the executor returned (see
  /// released()). Never set on a refused submission.
  std::atomic<bool> in_use{false};
  std::atomic<bool> device_done{true};  ///< see HandleExtra::device
  Status status;
  /// join: the last rank to join; add_process_set: the new set's id.
  int64_t result = -1;
  /// Who waits on this handle (the runtime that runs it; null for a handle no runtime runs,
  /// such as join_handles()'s, whose waiters count on each part's). Set before it is shared,
  /// kept across recycling (a state is recycled for the same runtime).
  std::shared_ptr<WaitGroup> waiters;

 private:
  bool notify_ = false;  // settle() found a watcher (mu); read by wake() on the same thread
  void clear_rest();     // recycle(): an error status, a callback, the extra part
  std::function<void(const Status&)> callback_;  // guarded by mu; see then()
  std::unique_ptr<HandleExtra> extra_;

 public:
  std::condition_variable cv;

  /// The rarely used part, created on first use: by the thread that made the handle before
  /// sharing it (join_handles), else by the runtime while `in_use` or under mu before
  /// completion; read by others after completion (or once `in_use` is clear).
  HandleExtra& extra() {
    if (!extra_) extra_ = std::make_unique<HandleExtra>();
    return *extra_;
  }
  /// Null while nothing used it.
  const HandleExtra* extra_if() const { return extra_.get(); }
  /// Device work the executor left running on this collective's buffers; the runtime adds it
  /// (before clearing `in_use`) and released() drops each once it let go (Completion::let_go).
  void hold_device(std::shared_ptr<Completion> work);
  /// Never blocks: true once nothing of hvd reads or writes this collective's buffers any
  /// more (the executor returned, device work it launched stopped). Completion normally comes
  /// after it; an abort (a peer died) completes handles at once, while an executor may still
  /// be inside a call writing into the output, and then this turns true only when that call
  /// returns: never, if the call waits on the dead peer forever. Whoever frees the buffers
  /// must wait for it (or keep them: see keep_until_released()).
  bool released();

  /// Set by join_handles() on its parts (it keeps weak references to them): never recycled.
  std::atomic<bool> pinned{false};
  /// Makes a completed state that nothing else refers to (`owner`'s use count is 1: no Handle,
  /// no runtime reference) as good as new, for the next collective of its name (a runtime's
  /// table slot keeps its last ones: see Runtime::Slot::spare). False, untouched, when it
  /// cannot be: still shared, not completed, or pinned.
  static bool recycle(const std::shared_ptr<HandleState>& owner) {
    HandleState* h = owner.get();
    if (!h || owner.use_count() != 1) return false;
    after_last_users(owner);
    if (!(h->state.load(std::memory_order_relaxed) & kDone) ||
        h->pinned.load(std::memory_order_relaxed)) {
      return false;
    }
    h->state.store(0, std::memory_order_relaxed);
    h->refused.store(false, std::memory_order_relaxed);
    h->in_use.store(false, std::memory_order_relaxed);
    h->device_done.store(true, std::memory_order_relaxed);
    h->result = -1;
    h->notify_ = false;
    if (!h->status.ok() || h->callback_ || h->extra_) h->clear_rest();
    return true;
  }

  /// Orders what follows after every access of the threads whose references to `owner` are
  /// gone: each dropped its own with an acq_rel decrement, and use_count() is a relaxed read.
  /// A fence, or, under ThreadSanitizer (which ignores fences), an acquire on the count itself:
  /// a copy and its drop, read-modify-writes that continue the release sequence of every
  /// earlier drop (nobody else holds `owner` to race with them).
  static void after_last_users(const std::shared_ptr<HandleState>& owner) {
    if constexpr (kThreadSanitizer) {
      std::shared_ptr<HandleState> probe(owner);
      probe.reset();  // the copy's increment and this decrement are the acquire
    } else {
      std::atomic_thread_fence(std::memory_order_acquire);
    }
  }

  /// complete(OK) in its common case, without the lock: true when nobody waits, no callback
  /// is set and it was not complete: it is now (done). False: nothing changed.
  bool complete_quietly() {
    uint32_t idle = 0;
    return state.compare_exchange_strong(idle, kDone | kClaimed, std::memory_order_release,
                                         std::memory_order_relaxed);
  }

  /// Completes once; later calls are ignored. Runs the callback (then()) on this thread.
  /// Lock contract: the runtime calls it (and complete_after) only after releasing its own
  /// lock, so a callback may submit collectives (it must not wait for one: it runs on the
  /// background thread that would run it).
  void complete(const Status& s);
  /// Runs `cb` with `status` once complete() ran: at once on this thread when it already did,
  /// else on the completing thread (see complete()). Callbacks set before completion run in
  /// the order they were set (a handle may be part of several join_handles()).
  void then(std::function<void(const Status&)> cb);
  /// Completes once the device work also finishes: `pending` is added to it first (null: none).
  void complete_after(const Status& s, const std::shared_ptr<Completion>& pending);
  /// complete_after() in two steps, for completing a batch: settle() sets the result (false:
  /// completed before, nothing done) and hands out the callback, wake() wakes the waiters and
  /// runs it. Settling a whole batch before waking any handle lets a thread that waits for the
  /// handles in turn sleep once, not once per handle while the batch is being completed.
  bool settle(const Status& s, const std::shared_ptr<Completion>& pending,
              std::function<void(const Status&)>* cb);
  void wake(const std::function<void(const Status&)>& cb);
  /// True once the device work (if any) finished. Never blocks.
  bool device_settled();
  /// The final status: `status`, else the device work's (call once done and device_settled()).
  const Status& final_status() const {
    return status.ok() && extra_ ? extra_->device_status : status;
  }
  /// Never blocks: true once it completed successfully, device work included (Handle::wait's
  /// common case, inline).
  bool succeeded() const {
    return done() && device_done.load(std::memory_order_acquire) && final_status().ok();
  }
};

/// A new handle state; its memory is recycled (cheaper than malloc for bursts of thousands).
std::shared_ptr<HandleState> new_handle_state();

/// User threads inside Handle::wait() on an unfinished handle of any runtime right now. While
/// one waits, the MPI transport polls a late peer instead of sleeping: the waiting thread
/// leaves its core to it. (A runtime's burst settling asks its own WaitGroup.)
int waiting_users();

}  // namespace core

/// An asynchronous collective in flight. Copyable; all copies see the same completion.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<core::HandleState> s) : s_(std::move(s)) {}
  bool valid() const { return s_ != nullptr; }
  /// True once the collective finished (successfully or not). Never blocks.
  bool poll() const;
  /// Blocks until finished and returns the status (does not throw).
  Status wait_status() const;
  /// Blocks until finished; throws hvd::Error if it failed.
  void wait() const {
    if (s_ && s_->succeeded()) return;  // the common case, without a call
    wait_slow();
  }
  /// Output of a collective whose size negotiation decided (allgather, alltoall).
  const TensorView& output() const;
  const std::vector<int64_t>& received_splits() const;
  /// Never blocks: true once hvd no longer reads or writes the collective's buffers. Completion
  /// (poll(), wait()) normally implies it, except after an abort (a peer died, a fatal
  /// transport error): the handle then fails at once, while the background thread may still
  /// be inside the collective, writing into the output, and perhaps never returns. A caller
  /// that owns the buffers must not free or reuse them before this is true; passing them to
  /// core::keep_until_released() does that for it.
  bool released() const;
  core::HandleState* state() const { return s_.get(); }
  const std::shared_ptr<core::HandleState>& shared_state() const { return s_; }

 private:
  const Status& settled() const;  // waits (s_ set); the final status, in the state
  void wait_slow() const;
  void wait_parts() const;  // a joined handle: waits on each part first
  std::shared_ptr<core::HandleState> s_;
};

namespace core {
/// One handle for many: finishes when all of `parts` have (device work included), with the
/// first error among them.
Handle join_handles(const std::vector<Handle>& parts);
/// Keeps `owner` (what owns the buffers of `h`'s collective) alive until h.released(): dropped
/// here at once when it already is, else parked in a process-wide list, swept by later calls.
/// After an abort whose executor never returns (stuck on a dead peer) it is never dropped: a
/// leak, in a job that is already dead, instead of memory written after it was freed.
void keep_until_released(const Handle& h, std::shared_ptr<void> owner);
/// Owners keep_until_released() still holds (it sweeps the released ones first).
size_t kept_until_released();
}  // namespace core

}  // namespace hvd
