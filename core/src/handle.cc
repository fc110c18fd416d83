// SPDX-License-Identifier: Apache-2.0
// Handle completion and waiting.
#include "hvd/core/handle.h"

#include <map>
#include <memory>
#include <vector>

namespace hvd {
namespace core {
namespace {

std::atomic<int> g_waiting{0};

struct Listeners {
  std::mutex mu;
  std::map<uint64_t, std::function<void()>> fns;
  uint64_t next = 1;
};

Listeners& listeners() {
  static Listeners* l = new Listeners();  // never destroyed: runtimes may outlive statics
  return *l;
}

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

template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  explicit PoolAllocator(const PoolAllocator<U>& /*other*/) {}
  T* allocate(size_t n) {
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

}  // namespace

std::shared_ptr<HandleState> new_handle_state() {
  return std::allocate_shared<HandleState>(PoolAllocator<HandleState>());
}

int waiting_users() { return g_waiting.load(std::memory_order_relaxed); }

uint64_t add_wait_listener(std::function<void()> f) {
  Listeners& l = listeners();
  std::lock_guard<std::mutex> lk(l.mu);
  l.fns.emplace(l.next, std::move(f));
  return l.next++;
}

void remove_wait_listener(uint64_t id) {
  Listeners& l = listeners();
  std::lock_guard<std::mutex> lk(l.mu);
  l.fns.erase(id);
}

void HandleState::complete(Status s) {
  std::function<void(const Status&)> cb;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (done.load()) return;
    status = std::move(s);
    done.store(true, std::memory_order_release);
    cb = std::move(callback);
  }
  cv.notify_all();
  if (cb) cb(status);
}

}  // namespace core

bool Handle::poll() const {
  if (!s_) throw Error(precondition("poll() on an empty hvd::Handle"));
  return s_->done.load(std::memory_order_acquire);
}

Status Handle::wait_status() const {
  if (!s_) return precondition("wait() on an empty hvd::Handle");
  if (!s_->done.load(std::memory_order_acquire)) {
    core::g_waiting.fetch_add(1, std::memory_order_relaxed);
    {
      core::Listeners& l = core::listeners();
      std::lock_guard<std::mutex> lk(l.mu);
      for (auto& kv : l.fns) kv.second();
    }
    {
      std::unique_lock<std::mutex> lk(s_->mu);
      s_->cv.wait(lk, [&] { return s_->done.load(); });
    }
    core::g_waiting.fetch_sub(1, std::memory_order_relaxed);
  }
  return s_->status;  // written before done was set (release), read after (acquire)
}

void Handle::wait() const { throw_if_error(wait_status()); }

const TensorView& Handle::output() const {
  if (!s_) throw Error(precondition("output() on an empty hvd::Handle"));
  return s_->output;
}

const std::vector<int64_t>& Handle::received_splits() const {
  if (!s_) throw Error(precondition("received_splits() on an empty hvd::Handle"));
  return s_->received_splits;
}

}  // namespace hvd
