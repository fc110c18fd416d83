// SPDX-License-Identifier: Apache-2.0
// allgather, alltoall and reducescatter on torch::Tensor: outputs are torch tensors allocated
// through the core's Allocator seam once negotiation has decided their shape.
#include "hvd/optim/sized_collectives.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "hvd/core/status.h"
#include "hvd/optim/tensor_adapter.h"
#include "torch_handle_state.h"
#include "torch_refusal.h"

namespace hvd::optim {

namespace {

using StatePtr = std::shared_ptr<detail::TorchHandleState>;

/// Contiguous view of `t` (a staging copy when needed), kept alive by the handle state.
TensorView stage_input(detail::TorchHandleState& st, const torch::Tensor& t,
                       const std::string& what) {
  torch::Tensor c = as_contiguous(t, what);
  st.keep.push_back(c);
  return to_view(c, what);
}

/// Allocates output slot `slot` of `st` as a torch tensor of the negotiated shape with `like`'s
/// dtype and device. Runs on the background thread before the handle completes; the captured
/// state keeps the slot alive even when the caller dropped the handle.
Allocator torch_allocator(const StatePtr& st, size_t slot, const torch::Tensor& like) {
  st->outputs.resize(std::max(st->outputs.size(), slot + 1));
  const torch::TensorOptions opts = like.options().memory_format(c10::MemoryFormat::Contiguous);
  return [st, slot, opts](const std::vector<int64_t>& shape) -> void* {
    torch::Tensor out = torch::empty(shape, opts);
    st->outputs[slot] = out;
    return out.data_ptr();
  };
}

void take_handles(detail::TorchHandleState& st, std::vector<Handle> hs) {
  st.handle = hs.front();
  st.more.assign(hs.begin() + 1, hs.end());
}

/// The inputs of a grouped `op` ("allgather", "reducescatter"), staged, and each member's
/// output allocator appended to `allocators`; a wrong member is refused on every rank.
std::vector<TensorView> stage_group(const StatePtr& st, const std::vector<torch::Tensor>& tensors,
                                    const char* op, const std::string& name,
                                    const ProcessSet& process_set,
                                    std::vector<Allocator>* allocators) {
  const std::string grouped = std::string("grouped_") + op;
  return detail::refusing(op, name, static_cast<int>(tensors.size()), process_set, [&] {
    std::vector<TensorView> vs;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::string what = detail::call_label(grouped, name) + " tensor " + std::to_string(i);
      vs.push_back(stage_input(*st, tensors[i], what));
      allocators->push_back(torch_allocator(st, i, tensors[i]));
    }
    return vs;
  });
}

}  // namespace

TorchHandle allgather_async(const torch::Tensor& tensor, const std::string& name,
                            const ProcessSet& process_set) {
  auto st = std::make_shared<detail::TorchHandleState>();
  TensorView in = detail::refusing("allgather", name, 0, process_set, [&] {
    return stage_input(*st, tensor, detail::call_label("allgather", name));
  });
  st->handle = hvd::allgather_async(in, name, process_set, torch_allocator(st, 0, tensor));
  return TorchHandle(st);
}

torch::Tensor allgather(const torch::Tensor& tensor, const std::string& name,
                        const ProcessSet& process_set) {
  return allgather_async(tensor, name, process_set).wait();
}

TorchHandle grouped_allgather_async(const std::vector<torch::Tensor>& tensors,
                                    const std::string& name, const ProcessSet& process_set) {
  auto st = std::make_shared<detail::TorchHandleState>();
  std::vector<Allocator> allocators;
  std::vector<TensorView> views =
      stage_group(st, tensors, "allgather", name, process_set, &allocators);
  take_handles(*st, hvd::grouped_allgather_async(views, name, process_set, allocators));
  return TorchHandle(st);
}

std::vector<torch::Tensor> grouped_allgather(const std::vector<torch::Tensor>& tensors,
                                             const std::string& name,
                                             const ProcessSet& process_set) {
  return grouped_allgather_async(tensors, name, process_set).wait_all();
}

TorchHandle alltoall_async(const torch::Tensor& tensor, const std::vector<int64_t>& splits,
                           const std::string& name, const ProcessSet& process_set) {
  auto st = std::make_shared<detail::TorchHandleState>();
  TensorView in = detail::refusing("alltoall", name, 0, process_set, [&] {
    return stage_input(*st, tensor, detail::call_label("alltoall", name));
  });
  st->handle = hvd::alltoall_async(in, splits, name, process_set, torch_allocator(st, 0, tensor));
  return TorchHandle(st);
}

AlltoallResult alltoall(const torch::Tensor& tensor, const std::vector<int64_t>& splits,
                        const std::string& name, const ProcessSet& process_set) {
  TorchHandle h = alltoall_async(tensor, splits, name, process_set);
  AlltoallResult r;
  r.output = h.wait();
  r.received_splits = h.received_splits();
  return r;
}

TorchHandle reducescatter_async(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                                double prescale_factor, double postscale_factor,
                                const ProcessSet& process_set) {
  auto st = std::make_shared<detail::TorchHandleState>();
  TensorView in = detail::refusing("reducescatter", name, 0, process_set, [&] {
    return stage_input(*st, tensor, detail::call_label("reducescatter", name));
  });
  st->handle = hvd::reducescatter_async(in, name, op, prescale_factor, postscale_factor,
                                        process_set, torch_allocator(st, 0, tensor));
  return TorchHandle(st);
}

torch::Tensor reducescatter(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                            double prescale_factor, double postscale_factor,
                            const ProcessSet& process_set) {
  return reducescatter_async(tensor, name, op, prescale_factor, postscale_factor, process_set)
      .wait();
}

TorchHandle grouped_reducescatter_async(const std::vector<torch::Tensor>& tensors,
                                        const std::string& name, ReduceOp op,
                                        double prescale_factor, double postscale_factor,
                                        const ProcessSet& process_set) {
  auto st = std::make_shared<detail::TorchHandleState>();
  std::vector<Allocator> allocators;
  std::vector<TensorView> views =
      stage_group(st, tensors, "reducescatter", name, process_set, &allocators);
  take_handles(*st, hvd::grouped_reducescatter_async(views, name, op, prescale_factor,
                                                     postscale_factor, process_set, allocators));
  return TorchHandle(st);
}

std::vector<torch::Tensor> grouped_reducescatter(const std::vector<torch::Tensor>& tensors,
                                                 const std::string& name, ReduceOp op,
                                                 double prescale_factor, double postscale_factor,
                                                 const ProcessSet& process_set) {
  return grouped_reducescatter_async(tensors, name, op, prescale_factor, postscale_factor,
                                     process_set)
      .wait_all();
}

}  // namespace hvd::optim
