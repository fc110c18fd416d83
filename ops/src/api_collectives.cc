// SPDX-License-Identifier: Apache-2.0
// The free-function API for collectives whose output size negotiation decides (allgather,
// alltoall, reducescatter, grouped forms) and for join.
#include "api_internal.h"
#include "hvd/core/validation.h"

namespace hvd {

using core::OpType;
using detail::auto_name;
using detail::make_request;
using detail::set_runtime;
using detail::submit;

namespace {

core::TensorEntry sized_entry(const core::Runtime& rt, OpType op, const TensorView& t,
                              const std::string& name, const Allocator& allocator) {
  core::TensorEntry e;
  e.request = make_request(op, name, t, rt);
  e.input = t;
  e.output = TensorView(nullptr, t.dtype, {0}, t.device);  // allocated at execution
  e.allocator = allocator;
  return e;
}

core::TensorEntry reducescatter_entry(const core::Runtime& rt, const TensorView& t,
                                      const std::string& name, ReduceOp op, double pre, double post,
                                      const Allocator& allocator) {
  core::TensorEntry e = sized_entry(rt, OpType::kReducescatter, t, name, allocator);
  e.request.reduce_op = op;
  e.request.prescale = pre;
  e.request.postscale = post;
  return e;
}

/// A grouped call's allocators: none, or one per tensor.
Status allocator_count(const std::vector<Allocator>& allocators, size_t n, const char* fn,
                       const std::string& group) {
  if (allocators.empty() || allocators.size() == n) return Status::OK();
  return invalid_argument(std::string(fn) + " '" + group +
                          "': " + std::to_string(allocators.size()) + " allocators for " +
                          std::to_string(n) + " tensors (give none or one per tensor)");
}

/// allocators[i], or none (also when their count is wrong: the group is refused then).
Allocator allocator_at(const std::vector<Allocator>& allocators, size_t n, size_t i) {
  return allocators.size() == n ? allocators[i] : nullptr;
}

}  // namespace

Handle allgather_async(const TensorView& tensor, const std::string& name, const ProcessSet& ps,
                       const Allocator& allocator) {
  auto rt = set_runtime("allgather_async", name, ps);
  return submit(*rt, sized_entry(*rt, OpType::kAllgather, tensor,
                                 auto_name(OpType::kAllgather, name, ps.id()), allocator));
}

std::vector<Handle> grouped_allgather_async(const std::vector<TensorView>& tensors,
                                            const std::string& name, const ProcessSet& ps,
                                            const std::vector<Allocator>& allocators) {
  if (tensors.empty()) detail::refuse_call("allgather", name, 1, "an empty list of tensors", ps);
  auto rt = set_runtime("grouped_allgather_async", name, ps);
  const std::string group = detail::group_name(OpType::kAllgather, name, ps.id());
  // A wrong allocator count refuses every member: negotiated, so no rank waits for this one.
  const Status bad = allocator_count(allocators, tensors.size(), "grouped_allgather_async", group);
  core::Runtime& r = *rt;
  return detail::submit_group(
      r, tensors.size(), group, [&](size_t i, const std::string& member, core::TensorEntry* e) {
        core::Runtime::fill_slot(e, sized_entry(r, OpType::kAllgather, tensors[i], member,
                                                allocator_at(allocators, tensors.size(), i)));
        detail::refuse_if_bad(e, bad);
      });
}

Handle alltoall_async(const TensorView& tensor, const std::vector<int64_t>& splits,
                      const std::string& name, const ProcessSet& ps, const Allocator& allocator) {
  auto rt = set_runtime("alltoall_async", name, ps);
  core::TensorEntry e = sized_entry(*rt, OpType::kAlltoall, tensor,
                                    auto_name(OpType::kAlltoall, name, ps.id()), allocator);
  e.request.splits = splits;
  return submit(*rt, std::move(e));
}

Handle reducescatter_async(const TensorView& tensor, const std::string& name, ReduceOp op,
                           double prescale_factor, double postscale_factor, const ProcessSet& ps,
                           const Allocator& allocator) {
  auto rt = set_runtime("reducescatter_async", name, ps);
  return submit(
      *rt, reducescatter_entry(*rt, tensor, auto_name(OpType::kReducescatter, name, ps.id()), op,
                               prescale_factor, postscale_factor, allocator));
}

std::vector<Handle> grouped_reducescatter_async(const std::vector<TensorView>& tensors,
                                                const std::string& name, ReduceOp op,
                                                double prescale_factor, double postscale_factor,
                                                const ProcessSet& ps,
                                                const std::vector<Allocator>& allocators) {
  if (tensors.empty())
    detail::refuse_call("reducescatter", name, 1, "an empty list of tensors", ps);
  auto rt = set_runtime("grouped_reducescatter_async", name, ps);
  const std::string group = detail::group_name(OpType::kReducescatter, name, ps.id());
  // refused as above
  const Status bad =
      allocator_count(allocators, tensors.size(), "grouped_reducescatter_async", group);
  core::Runtime& r = *rt;
  return detail::submit_group(
      r, tensors.size(), group, [&](size_t i, const std::string& member, core::TensorEntry* e) {
        core::Runtime::fill_slot(
            e, reducescatter_entry(r, tensors[i], member, op, prescale_factor, postscale_factor,
                                   allocator_at(allocators, tensors.size(), i)));
        detail::refuse_if_bad(e, bad);
      });
}

Handle allgather(const TensorView& tensor, const std::string& name, const ProcessSet& ps) {
  Handle h = allgather_async(tensor, name, ps);
  h.wait();
  return h;
}

Handle alltoall(const TensorView& tensor, const std::vector<int64_t>& splits,
                const std::string& name, const ProcessSet& ps) {
  Handle h = alltoall_async(tensor, splits, name, ps);
  h.wait();
  return h;
}

Handle reducescatter(const TensorView& tensor, const std::string& name, ReduceOp op,
                     double prescale_factor, double postscale_factor, const ProcessSet& ps) {
  Handle h = reducescatter_async(tensor, name, op, prescale_factor, postscale_factor, ps);
  h.wait();
  return h;
}

int join(const ProcessSet& ps) {
  auto rt = set_runtime("join", "", ps);
  core::TensorEntry e;
  TensorView none(nullptr, DataType::kUInt8, {0});
  // One join at a time per set, so a fixed name is unique and the same on every rank.
  e.request = make_request(OpType::kJoin, core::internal_name("join"), none, *rt);
  e.input = e.output = none;
  Handle h = submit(*rt, std::move(e));
  h.wait();
  const int last = static_cast<int>(h.state()->result);
  detail::align_auto_names(*rt);
  return last;
}

}  // namespace hvd
