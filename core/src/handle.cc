// SPDX-License-Identifier: Apache-2.0
// Handle completion and waiting.
#include "hvd/core/handle.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "hvd/core/function_ref.h"

namespace hvd {
namespace core {
namespace {

std::atomic<int> g_waiting{0};

// Recycled handle-state blocks: a burst of collectives allocates and frees them in bursts
// larger than malloc's per-thread cache, which then costs several hundred instructions each.
struct BlockPool {
  std::mutex mu;
  std::vector<void*> free;
  size_t block = 0;
};

BlockPool& block_pool() {
  static BlockPool* p = new BlockPool();  // never destroyed: handles may outlive statics
  return *p;
}

constexpr size_t kMaxPooled = 1 << 14;

// Each thread first keeps up to kLocalBlocks of its own (no lock: a submitting thread allocates
// and frees one block per collective); beyond that, and on other threads, the shared pool.
// The blocks live in a trivially destructible thread_local, so that a thread reaches them with
// one TLS lookup (a thread_local with a destructor is reached through a wrapper call per use);
// LocalFlush, registered on the thread's first use, hands them back to the shared pool when
// the thread exits.
constexpr size_t kLocalBlocks = 256;
struct LocalBlocks {
  int state = 0;  // 0: not used yet on this thread, 1: in use, 2: the thread is exiting
  size_t block = 0;
  size_t count = 0;
  void* free[kLocalBlocks] = {};  // constant-initialized: no TLS init guard
};
thread_local LocalBlocks t_local;
// The address of this thread's blocks: one TLS lookup per call (each use of t_local in a
// function would otherwise pay its own __tls_get_addr call in a shared library).
__attribute__((noinline)) LocalBlocks* local_blocks() { return &t_local; }
struct LocalFlush {
  ~LocalFlush();
};
thread_local LocalFlush t_flush;

LocalFlush::~LocalFlush() {
  LocalBlocks& l = t_local;
  l.state = 2;
  BlockPool& p = block_pool();
  std::lock_guard<std::mutex> lk(p.mu);
  for (size_t i = 0; i < l.count; ++i) {
    if (p.block == l.block && p.free.size() < kMaxPooled) {
      p.free.push_back(l.free[i]);
    } else {
      ::operator delete(l.free[i]);
    }
  }
  l.count = 0;
}

template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  explicit PoolAllocator(const PoolAllocator<U>& /*other*/) {}
  T* allocate(size_t n) {
    LocalBlocks& l = *local_blocks();
    if (n == 1 && l.state == 1 && l.block == sizeof(T) && l.count > 0) {
      return static_cast<T*>(l.free[--l.count]);
    }
    if (n == 1) {
      BlockPool& p = block_pool();
      std::lock_guard<std::mutex> lk(p.mu);
      if (p.block == sizeof(T) && !p.free.empty()) {
        void* b = p.free.back();
        p.free.pop_back();
        return static_cast<T*>(b);
      }
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* ptr, size_t n) {
    LocalBlocks& l = *local_blocks();
    if (n == 1 && l.state == 0) {
      (void)&t_flush;  // first use on this thread: registers the flush at thread exit
      l.block = sizeof(T);
      l.state = 1;
    }
    if (n == 1 && l.state == 1 && l.block == sizeof(T) && l.count < kLocalBlocks) {
      l.free[l.count++] = ptr;
      return;
    }
    if (n == 1) {
      BlockPool& p = block_pool();
      std::lock_guard<std::mutex> lk(p.mu);
      if (p.block == 0) p.block = sizeof(T);
      if (p.block == sizeof(T) && p.free.size() < kMaxPooled) {
        p.free.push_back(ptr);
        return;
      }
    }
    ::operator delete(ptr);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>& /*other*/) const {
    return true;
  }
  template <typename U>
  bool operator!=(const PoolAllocator<U>& /*other*/) const {
    return false;
  }
};

// Calls `done` until it says yes: yielding for 50 us (device work often finishes that fast),
// then sleeping with backoff from 5 to 500 us.
void poll_with_backoff(FunctionRef<bool()> done) {
  if (done()) return;  // the common case (host work, or device work already finished): no clock
  const auto start = std::chrono::steady_clock::now();
  auto sleep = std::chrono::microseconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(50)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(500));
  }
}

}  // namespace

std::shared_ptr<HandleState> new_handle_state() {
  return std::allocate_shared<HandleState>(PoolAllocator<HandleState>());
}

int waiting_users() { return g_waiting.load(std::memory_order_relaxed); }

void WaitGroup::enter() {
  waiting_.fetch_add(1, std::memory_order_relaxed);
  std::shared_lock<std::shared_mutex> gate(gate_);
  if (!closed_ && on_wait_) on_wait_();
}

void WaitGroup::close() {
  std::unique_lock<std::shared_mutex> gate(gate_);
  closed_ = true;
}

bool Completion::poll(Status* s) {
  if (has_failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lk(mu_);
    *s = failed_;
    return true;
  }
  return query(s);
}

void Completion::fail(const Status& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (has_failed_.load(std::memory_order_relaxed)) return;
  failed_ = why;
  has_failed_.store(true, std::memory_order_release);
}

Status Completion::wait() {
  Status s;
  poll_with_backoff([&] { return poll(&s); });
  return s;
}

bool Completion::let_go() {
  if (let_go_.load(std::memory_order_acquire)) return true;
  if (!work_stopped()) return false;
  let_go_.store(true, std::memory_order_release);
  return true;
}

void HandleState::hold_device(std::shared_ptr<Completion> work) {
  std::lock_guard<std::mutex> lk(mu);
  extra().held.push_back(std::move(work));
}

bool HandleState::released() {
  if (in_use.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto* held = extra_ ? &extra_->held : nullptr;
    while (held && !held->empty()) {
      if (!held->back()->let_go()) return false;
      held->pop_back();
    }
  }
  // The parts were set before the handle was shared (join_handles); in_use was clear.
  if (!extra_) return true;
  for (const auto& w : extra_->parts) {
    auto p = w.lock();  // gone: the runtime dropped it, so it let go
    if (p && !p->released()) return false;
  }
  return true;
}

void HandleState::complete_after(const Status& s, const std::shared_ptr<Completion>& pending) {
  std::function<void(const Status&)> cb;
  if (!settle(s, pending, &cb)) return;
  wake(cb);
}

bool HandleState::settle(const Status& s, const std::shared_ptr<Completion>& pending,
                         std::function<void(const Status&)>* cb) {
  // The common case: OK, nothing left on a device, no watcher: `status` (OK since
  // construction) and `device` stay as they are, so only the state changes. A watcher counts
  // itself before it checks kDone, so that it either made this fail or sees kDone.
  if (s.ok() && !pending && complete_quietly()) return true;
  std::lock_guard<std::mutex> lk(mu);
  // Under mu, kClaimed is seen only together with kDone (both are set under mu here, or at
  // once above): claimed = completed before.
  const uint32_t before = state.fetch_or(kClaimed, std::memory_order_relaxed);
  if (before & kClaimed) return false;
  if (pending) {
    extra().device.push_back(pending);
    device_done.store(false, std::memory_order_relaxed);
  }
  status = s;
  *cb = std::move(callback_);
  // Watchers count themselves under mu: one that is not counted now sees kDone and never
  // sleeps.
  notify_ = before >= kWatcher;
  state.fetch_or(kDone, std::memory_order_release);
  return true;
}

void HandleState::wake(const std::function<void(const Status&)>& cb) {
  if (notify_) cv.notify_all();
  if (cb) cb(status);  // written before done was set; never changes after
}

bool HandleState::device_settled() {
  if (device_done.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lk(mu);
  HandleExtra& x = extra();  // device_done is clear: the device work is there
  while (!x.device.empty()) {
    Status st;
    if (!x.device.back()->poll(&st)) return false;
    if (!st.ok() && x.device_status.ok()) x.device_status = st;
    x.device.pop_back();
  }
  device_done.store(true, std::memory_order_release);
  return true;
}

void HandleState::clear_rest() {
  status = Status();
  callback_ = nullptr;  // handed out at completion already
  extra_.reset();
}

void HandleState::complete(const Status& s) { complete_after(s, nullptr); }

void HandleState::then(std::function<void(const Status&)> cb) {
  std::unique_lock<std::mutex> lk(mu);
  // A callback is a watcher for good (completion must take mu to hand it out).
  const uint32_t before = state.fetch_add(kWatcher, std::memory_order_acquire);
  if (!(before & kDone)) {
    if (!callback_) {
      callback_ = std::move(cb);
    } else {  // a second callback runs after the first (a handle in two join_handles())
      callback_ = [first = std::move(callback_), next = std::move(cb)](const Status& s) {
        first(s);
        next(s);
      };
    }
    return;
  }
  state.fetch_sub(kWatcher, std::memory_order_relaxed);
  lk.unlock();
  cb(status);  // written before done was set; never changes after
}

}  // namespace core

bool Handle::poll() const {
  if (!s_) throw Error(precondition("poll() on an empty hvd::Handle"));
  return s_->done() && s_->device_settled();
}

Status Handle::wait_status() const {
  if (!s_) return precondition("wait() on an empty hvd::Handle");
  return settled();
}

void Handle::wait_slow() const {
  if (!s_) throw Error(precondition("wait() on an empty hvd::Handle"));
  const Status& s = settled();  // the handle's own: no copy when it is OK
  if (!s.ok()) throw Error(s);
}

const Status& Handle::settled() const {
  // The common case: done, no device work left (device_done) to look at.
  if (s_->done() && s_->device_done.load(std::memory_order_acquire)) return s_->final_status();
  if (!s_->done()) {
    core::WaitGroup* group = s_->waiters.get();
    // A joined handle: its parts' runtimes learn of the wait through the parts.
    if (!group && s_->extra_if()) wait_parts();
    core::g_waiting.fetch_add(1, std::memory_order_relaxed);
    if (group) group->enter();
    {
      std::unique_lock<std::mutex> lk(s_->mu);
      s_->state.fetch_add(core::HandleState::kWatcher, std::memory_order_relaxed);
      s_->cv.wait(lk, [&] { return s_->done(); });
      s_->state.fetch_sub(core::HandleState::kWatcher, std::memory_order_relaxed);
    }
    if (group) group->leave();
    core::g_waiting.fetch_sub(1, std::memory_order_relaxed);
  }
  // Device work launched by the background thread: look at it ourselves rather than making
  // that thread wait for the device.
  core::poll_with_backoff([this] { return s_->device_settled(); });
  // Written before done / device_done were set (release), read after (acquire).
  return s_->final_status();
}

void Handle::wait_parts() const {
  // The parts were set before the handle was shared (join_handles), and never change.
  for (const auto& w : s_->extra_if()->parts) {
    if (auto p = w.lock()) (void)Handle(std::move(p)).wait_status();
  }
}

const TensorView& Handle::output() const {
  if (!s_) throw Error(precondition("output() on an empty hvd::Handle"));
  static const TensorView kNone;
  const core::HandleExtra* x = s_->extra_if();
  return x ? x->output : kNone;
}

const std::vector<int64_t>& Handle::received_splits() const {
  if (!s_) throw Error(precondition("received_splits() on an empty hvd::Handle"));
  static const std::vector<int64_t> kNone;
  const core::HandleExtra* x = s_->extra_if();
  return x ? x->received_splits : kNone;
}

bool Handle::released() const {
  if (!s_) throw Error(precondition("released() on an empty hvd::Handle"));
  return s_->released();
}

}  // namespace hvd

namespace hvd::core {

namespace {

struct Kept {
  std::mutex mu;
  std::vector<std::pair<Handle, std::shared_ptr<void>>> items;  // mu
  std::atomic<size_t> count{0};                                 // items.size(), read without mu
};

Kept& kept() {
  static auto* k = new Kept();  // never destroyed: what it keeps may outlive statics
  return *k;
}

// Moves the released items of `k` to `out` (k.mu held): freed by the caller after unlocking.
void take_released(Kept& k, std::vector<std::shared_ptr<void>>* out) {
  size_t left = 0;
  for (size_t i = 0; i < k.items.size(); ++i) {
    if (k.items[i].first.released()) {
      out->push_back(std::move(k.items[i].second));
    } else {
      if (left != i) k.items[left] = std::move(k.items[i]);
      ++left;
    }
  }
  k.items.resize(left);
  k.count.store(left, std::memory_order_relaxed);
}

}  // namespace

void keep_until_released(const Handle& h, std::shared_ptr<void> owner) {
  Kept& k = kept();
  const bool now = !h.valid() || h.released();
  // The common case (nothing parked, the collective let go): no lock; `owner` goes on return.
  if (now && k.count.load(std::memory_order_relaxed) == 0) return;
  std::vector<std::shared_ptr<void>> drop;  // released after the lock (destructors may call us)
  std::lock_guard<std::mutex> lk(k.mu);
  take_released(k, &drop);
  if (!owner || now) return;
  k.items.emplace_back(h, std::move(owner));
  k.count.store(k.items.size(), std::memory_order_relaxed);
}

size_t kept_until_released() {
  std::vector<std::shared_ptr<void>> drop;
  Kept& k = kept();
  std::lock_guard<std::mutex> lk(k.mu);
  take_released(k, &drop);
  return k.items.size();
}

Handle join_handles(const std::vector<Handle>& parts) {
  auto all = new_handle_state();
  auto& joined = all->extra().parts;
  joined.reserve(parts.size());
  for (const Handle& h : parts) {
    if (h.state()) h.state()->pinned.store(true, std::memory_order_relaxed);  // weak refs
    joined.push_back(h.shared_state());
  }
  if (parts.empty()) {
    all->complete(Status::OK());
    return Handle(all);
  }
  struct Join {
    std::mutex mu;
    size_t left;
    Status first_error;
    std::vector<std::shared_ptr<Completion>> device;
  };
  auto join = std::make_shared<Join>();
  join->left = parts.size();
  for (const Handle& h : parts) {
    HandleState* hs = h.state();
    // Runs once `hs` is done: its device work (set before done) moves to the joined handle.
    auto cb = [join, all, hs](const Status& st) {
      std::vector<std::shared_ptr<Completion>> device;
      {
        std::lock_guard<std::mutex> lk(hs->mu);
        if (const core::HandleExtra* x = hs->extra_if()) device = x->device;
      }
      std::lock_guard<std::mutex> lk(join->mu);
      if (!st.ok() && join->first_error.ok()) join->first_error = st;
      join->device.insert(join->device.end(), device.begin(), device.end());
      if (--join->left > 0) return;
      {
        std::lock_guard<std::mutex> l(all->mu);
        auto& work = all->extra().device;
        work = std::move(join->device);
        all->device_done.store(work.empty(), std::memory_order_relaxed);
      }
      all->complete(join->first_error);
    };
    hs->then(cb);
  }
  return Handle(all);
}

}  // namespace hvd::core
