// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the free-function API's source files (not installed).
#pragma once

#include <mpi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hvd/core/runtime.h"
#include "hvd/hvd.h"

namespace hvd::detail {

/// The global runtime; throws naming `fn` before init() / after shutdown(). Safe to call
/// while another thread runs shutdown(): the reference keeps the runtime alive, which then
/// refuses new work with a failed handle.
std::shared_ptr<core::Runtime> runtime(const char* fn);
/// The runtime of `ps` on this rank; throws naming the op and tensor when `name` lies in hvd's
/// own name space (core::check_user_name), the set does not exist or this rank is not a member.
class RuntimeRef;
inline RuntimeRef set_runtime(const char* fn, const std::string& name, const ProcessSet& ps);
/// set_runtime() beyond its inline common case (the global set, the runtime published).
RuntimeRef set_runtime_slow(const char* fn, const std::string& name, const ProcessSet& ps);

/// The global runtime as counted calls hold it (RuntimeRef::counted): `live` is its address
/// while it is published. A call counts itself in `calls`, then reads `live`; shutdown clears
/// `live`, then waits for `calls` to drain before it lets the runtime go (both sequentially
/// consistent: one of them sees the other). Constant-initialized: usable before any static
/// constructor ran.
struct CountedRuntime {
  std::atomic<core::Runtime*> live{nullptr};
  std::atomic<int64_t> calls{0};
};
extern CountedRuntime g_counted;
/// Ends a call counted by a RuntimeRef of the global runtime.
inline void end_counted_call() { g_counted.calls.fetch_sub(1, std::memory_order_release); }

/// A runtime held for one API call. The global runtime is held by counting the calls in flight
/// (shutdown() waits for them before it lets the runtime go): no reference count touched per
/// call. A process set's runtime is held by a shared reference.
class RuntimeRef {
 public:
  static RuntimeRef counted(core::Runtime* rt) {
    RuntimeRef r;
    r.rt_ = rt;
    r.counted_ = true;
    return r;
  }
  explicit RuntimeRef(std::shared_ptr<core::Runtime> shared)
      : shared_(std::move(shared)), rt_(shared_.get()) {}
  RuntimeRef(RuntimeRef&& o) noexcept
      : shared_(std::move(o.shared_)), rt_(o.rt_), counted_(o.counted_) {
    o.counted_ = false;
  }
  RuntimeRef(const RuntimeRef&) = delete;
  RuntimeRef& operator=(const RuntimeRef&) = delete;
  RuntimeRef& operator=(RuntimeRef&&) = delete;
  ~RuntimeRef() {
    if (counted_) end_counted_call();
  }
  core::Runtime& operator*() const { return *rt_; }
  core::Runtime* operator->() const { return rt_; }

 private:
  RuntimeRef() = default;
  std::shared_ptr<core::Runtime> shared_;
  core::Runtime* rt_ = nullptr;
  bool counted_ = false;
};
inline RuntimeRef set_runtime(const char* fn, const std::string& name, const ProcessSet& ps) {
  // The common case, inline: the global set (id 0), a user's name, the runtime published.
  if (ps.id() == 0 && (name.empty() || name[0] != core::kReservedNamePrefix)) {
    g_counted.calls.fetch_add(1, std::memory_order_seq_cst);
    if (core::Runtime* live = g_counted.live.load(std::memory_order_seq_cst)) {
      return RuntimeRef::counted(live);
    }
    end_counted_call();
  }
  return set_runtime_slow(fn, name, ps);
}

/// `name`, or the next deterministic automatic name for (process set, op): "@<op>.noname.<n>".
std::string auto_name(core::OpType op, const std::string& name, int32_t process_set);
/// After join(): every rank of `rt`'s set adopts the highest automatic-name count of each op
/// (one internal allreduce), since a joined rank made none of the unnamed calls the others
/// made meanwhile and its names would otherwise no longer pair with theirs.
void align_auto_names(core::Runtime& rt);
/// The group key of a grouped op: `name`, or an automatic "@group.<op>.noname.<n>". Members
/// are named core::member_name(key, i).
std::string group_name(core::OpType op, const std::string& name, int32_t process_set);
/// A view that describes memory: data, or no elements (check_view() says what is wrong).
inline bool view_ok(const TensorView& t) { return t.data != nullptr || t.numel() <= 0; }
Status check_view(const core::Request& r, const TensorView& t, const char* role);
Status check_view(core::OpType op, const std::string& name, const TensorView& t, const char* role);
/// Sets the fields every request has (op, name, dtype, shape, device, rank, process set).
void fill_request(core::Request* r, core::OpType op, const std::string& name, const TensorView& t,
                  const core::Runtime& rt);
core::Request make_request(core::OpType op, const std::string& name, const TensorView& t,
                           const core::Runtime& rt);
/// Validates locally (throwing hvd::Error for local mistakes) and enqueues.
Handle submit(core::Runtime& rt, core::TensorEntry e);
/// Throws when `h` (refused by the runtime) failed for a local mistake.
void throw_refusal(const Handle& h);
/// Throws hvd::Error when the runtime refused `h` at once for a local mistake (bad argument,
/// precondition); returns it otherwise.
inline Handle throw_if_refused(Handle h) {
  if (h.state() && h.state()->refused.load(std::memory_order_relaxed)) throw_refusal(h);
  return h;
}
/// Marks `e` refused with `s`'s message when `s` is an error (the first reason is kept).
void refuse_if_bad(core::TensorEntry* e, const Status& s);
/// Fills member `i` of a group, named `member`, in its table slot (under the runtime's lock:
/// copies only; see Runtime::enqueue_with).
using MemberFill = std::function<void(size_t i, const std::string& member, core::TensorEntry* e)>;
/// Enqueues the `n` members of `group` (named core::member_name(group, i)), each filled in
/// place by `fill`, marked as one group and its input checked. Every member goes to the
/// runtime, also after one is refused (bad input on this rank): the refusal is negotiated and
/// fails the group on every rank instead of leaving the other ranks' members waiting. Then
/// the first refusal is thrown. One handle each.
std::vector<Handle> submit_group(core::Runtime& rt, size_t n, const std::string& group,
                                 const MemberFill& fill);
/// The one builder of an allreduce's table entry (request and views).
void fill_allreduce(core::TensorEntry* e, const core::Runtime& rt, const TensorView& in,
                    const TensorView& out, const std::string& name, ReduceOp op, double pre,
                    double post);
/// fill_allreduce() for an entry as the last collective of its name left it
/// (Runtime::enqueue_refill): rewrites only the buffers when the request would be the same
/// (returns true), else resets and fills it (returns false).
bool refill_allreduce(core::TensorEntry* e, const core::Runtime& rt, const TensorView& in,
                      const TensorView& out, const std::string& name, ReduceOp op, double pre,
                      double post);
core::TensorEntry allreduce_entry(const core::Runtime& rt, const TensorView& in,
                                  const TensorView& out, const std::string& name, ReduceOp op,
                                  double pre, double post);
/// The ProcessSetFactory of the MPI backend: splits `parent`, hvd's job communicator
/// (collective over all its ranks, on the global background thread), into a negotiation and a
/// data communicator for `ranks` (ranks of `parent`; this process is `rank` there).
/// `local_rank`: this process's rank on its node (its default GPU); `cfg`: the global runtime's.
Status make_process_set_parts(MPI_Comm parent, int rank, int local_rank, bool threads_multiple,
                              const std::function<Status()>& should_abort, const core::Config& cfg,
                              int32_t id, const std::vector<int32_t>& ranks,
                              core::RuntimeParts* out);

}  // namespace hvd::detail
