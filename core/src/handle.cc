// SPDX-License-Identifier: Apache-2.0
// Handle completion and waiting.
#include "hvd/core/handle.h"

namespace hvd {
namespace core {

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
  std::unique_lock<std::mutex> lk(s_->mu);
  s_->cv.wait(lk, [&] { return s_->done.load(); });
  return s_->status;
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
