// SPDX-License-Identifier: Apache-2.0
// torch::Tensor <-> TensorView adapters and the collectives on torch tensors.
#include "hvd/optim/collectives.h"

#include <utility>

#include "hvd/core/status.h"
#include "hvd/hvd.h"
#include "hvd/optim/tensor_adapter.h"
#include "torch_handle_state.h"
#include "torch_refusal.h"

namespace hvd::optim {

namespace {

std::string describe(const torch::Tensor& t) {
  std::string s = c10::toString(t.scalar_type());
  s += shape_str(t.sizes().vec());
  return s;
}

/// Staging for one tensor: the view the collective uses, plus bookkeeping in `st`.
TensorView stage(detail::TorchHandleState& st, const torch::Tensor& t, bool in_place,
                 const std::string& what) {
  torch::Tensor c = as_contiguous(t, what);
  st.keep.push_back(c);
  if (in_place) {
    if (!c.is_same(t)) st.copy_back.emplace_back(t, c);
    st.outputs.push_back(t);
  }
  return to_view(c, what);
}

TorchHandle allreduce_impl(const torch::Tensor& t, const std::string& name, ReduceOp op, double pre,
                           double post, const ProcessSet& ps, bool in_place) {
  auto st = std::make_shared<detail::TorchHandleState>();
  const std::string what = detail::call_label("allreduce", name);
  auto [in, out] = detail::refusing("allreduce", name, 0, ps, [&] {
    TensorView in = stage(*st, t, in_place, what);
    if (in_place) return std::make_pair(in, TensorView());
    torch::Tensor o =
        torch::empty(t.sizes(), t.options().memory_format(c10::MemoryFormat::Contiguous));
    st->outputs.push_back(o);
    return std::make_pair(in, to_view(o, what));
  });
  st->handle = in_place ? hvd::allreduce_async(in, name, op, pre, post, ps)
                        : hvd::allreduce_async(in, out, name, op, pre, post, ps);
  return TorchHandle(st);
}

TorchHandle grouped_impl(const std::vector<torch::Tensor>& ts, const std::string& name, ReduceOp op,
                         double pre, double post, const ProcessSet& ps, bool in_place) {
  auto st = std::make_shared<detail::TorchHandleState>();
  std::vector<TensorView> views =
      detail::refusing("allreduce", name, static_cast<int>(ts.size()), ps, [&] {
        std::vector<TensorView> vs;
        vs.reserve(ts.size());
        for (size_t i = 0; i < ts.size(); ++i) {
          const std::string what =
              detail::call_label("grouped_allreduce", name) + " tensor " + std::to_string(i);
          if (in_place) {
            vs.push_back(stage(*st, ts[i], true, what));
          } else {
            torch::Tensor out = as_contiguous(ts[i], what).clone();
            st->outputs.push_back(out);
            vs.push_back(to_view(out, what));
          }
        }
        return vs;
      });
  st->handle = hvd::grouped_allreduce_async(views, name, op, pre, post, ps);
  return TorchHandle(st);
}

TorchHandle broadcast_impl(const torch::Tensor& t, int root, const std::string& name,
                           const ProcessSet& ps, bool in_place) {
  auto st = std::make_shared<detail::TorchHandleState>();
  const std::string what = detail::call_label("broadcast", name);
  TensorView view = detail::refusing("broadcast", name, 0, ps, [&] {
    if (in_place) return stage(*st, t, true, what);
    torch::Tensor out = as_contiguous(t, what).clone();
    st->outputs.push_back(out);
    return to_view(out, what);
  });
  st->handle = hvd::broadcast_async(view, root, name, ps);
  return TorchHandle(st);
}

}  // namespace

DataType to_hvd_dtype(c10::ScalarType t, const std::string& what) {
  switch (t) {
    case c10::kByte:
      return DataType::kUInt8;
    case c10::kChar:
      return DataType::kInt8;
    case c10::kShort:
      return DataType::kInt16;
    case c10::kInt:
      return DataType::kInt32;
    case c10::kLong:
      return DataType::kInt64;
    case c10::kHalf:
      return DataType::kFloat16;
    case c10::kBFloat16:
      return DataType::kBFloat16;
    case c10::kFloat:
      return DataType::kFloat32;
    case c10::kDouble:
      return DataType::kFloat64;
    case c10::kBool:
      return DataType::kBool;
    default:
      throw Error(invalid_argument(what + ": torch dtype " + c10::toString(t) +
                                   " is not supported by hvd (use uint8, int8, int16, int32, "
                                   "int64, float16, bfloat16, float32, float64 or bool)"));
  }
}

c10::ScalarType to_torch_dtype(DataType t) {
  switch (t) {
    case DataType::kUInt8:
      return c10::kByte;
    case DataType::kInt8:
      return c10::kChar;
    case DataType::kInt16:
      return c10::kShort;
    case DataType::kInt32:
      return c10::kInt;
    case DataType::kInt64:
      return c10::kLong;
    case DataType::kFloat16:
      return c10::kHalf;
    case DataType::kBFloat16:
      return c10::kBFloat16;
    case DataType::kFloat32:
      return c10::kFloat;
    case DataType::kFloat64:
      return c10::kDouble;
    case DataType::kBool:
      return c10::kBool;
  }
  throw Error(invalid_argument("unknown hvd dtype " + std::to_string(static_cast<int>(t))));
}

Device to_hvd_device(const c10::Device& d, const std::string& what) {
  if (d.is_cpu()) return Device::host();
  if (d.is_cuda()) return Device::cuda(d.has_index() ? d.index() : 0);
  throw Error(invalid_argument(what + ": device " + d.str() +
                               " is not supported by hvd (use cpu or cuda tensors)"));
}

torch::Tensor as_contiguous(const torch::Tensor& t, const std::string& what) {
  if (!t.defined()) throw Error(invalid_argument(what + ": the tensor is undefined"));
  if (t.layout() != c10::kStrided) {
    throw Error(invalid_argument(what + ": sparse or non-strided tensors are not supported; "
                                        "convert with .to_dense() first"));
  }
  return t.is_contiguous() ? t : t.contiguous();
}

TensorView to_view(const torch::Tensor& t, const std::string& what) {
  if (!t.defined()) throw Error(invalid_argument(what + ": the tensor is undefined"));
  if (t.layout() != c10::kStrided || !t.is_contiguous()) {
    throw Error(invalid_argument(what + ": " + describe(t) +
                                 " is not a dense contiguous tensor; call .contiguous() first"));
  }
  return TensorView(t.data_ptr(), to_hvd_dtype(t.scalar_type(), what), t.sizes().vec(),
                    to_hvd_device(t.device(), what));
}

bool TorchHandle::poll() const {
  if (!s_ || !s_->handle.poll()) return false;
  for (const Handle& h : s_->more) {
    if (!h.poll()) return false;
  }
  return true;
}

const Handle& TorchHandle::handle() const {
  if (!s_) throw Error(precondition("TorchHandle::handle() on an empty handle"));
  return s_->handle;
}

std::vector<torch::Tensor> TorchHandle::wait_all() const {
  if (!s_) throw Error(precondition("TorchHandle::wait() on an empty handle"));
  s_->handle.wait();
  for (const Handle& h : s_->more) h.wait();
  std::call_once(s_->finished, [this] {
    torch::NoGradGuard no_grad;
    for (auto& [dst, src] : s_->copy_back) dst.copy_(src);
    s_->copy_back.clear();
    s_->keep.clear();
  });
  return s_->outputs;
}

std::vector<int64_t> TorchHandle::received_splits() const {
  wait_all();
  return s_->handle.received_splits();
}

torch::Tensor TorchHandle::wait() const {
  auto outs = wait_all();
  return outs.empty() ? torch::Tensor() : outs.front();
}

TorchHandle allreduce_async(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                            double prescale_factor, double postscale_factor,
                            const ProcessSet& process_set) {
  return allreduce_impl(tensor, name, op, prescale_factor, postscale_factor, process_set, false);
}
TorchHandle allreduce_async_(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                             double prescale_factor, double postscale_factor,
                             const ProcessSet& process_set) {
  return allreduce_impl(tensor, name, op, prescale_factor, postscale_factor, process_set, true);
}
torch::Tensor allreduce(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                        double prescale_factor, double postscale_factor,
                        const ProcessSet& process_set) {
  return allreduce_async(tensor, name, op, prescale_factor, postscale_factor, process_set).wait();
}
void allreduce_(const torch::Tensor& tensor, const std::string& name, ReduceOp op,
                double prescale_factor, double postscale_factor, const ProcessSet& process_set) {
  allreduce_async_(tensor, name, op, prescale_factor, postscale_factor, process_set).wait();
}

TorchHandle grouped_allreduce_async(const std::vector<torch::Tensor>& tensors,
                                    const std::string& name, ReduceOp op, double prescale_factor,
                                    double postscale_factor, const ProcessSet& process_set) {
  return grouped_impl(tensors, name, op, prescale_factor, postscale_factor, process_set, false);
}
TorchHandle grouped_allreduce_async_(const std::vector<torch::Tensor>& tensors,
                                     const std::string& name, ReduceOp op, double prescale_factor,
                                     double postscale_factor, const ProcessSet& process_set) {
  return grouped_impl(tensors, name, op, prescale_factor, postscale_factor, process_set, true);
}
std::vector<torch::Tensor> grouped_allreduce(const std::vector<torch::Tensor>& tensors,
                                             const std::string& name, ReduceOp op,
                                             double prescale_factor, double postscale_factor,
                                             const ProcessSet& process_set) {
  return grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor, process_set)
      .wait_all();
}
void grouped_allreduce_(const std::vector<torch::Tensor>& tensors, const std::string& name,
                        ReduceOp op, double prescale_factor, double postscale_factor,
                        const ProcessSet& process_set) {
  grouped_allreduce_async_(tensors, name, op, prescale_factor, postscale_factor, process_set)
      .wait_all();
}

TorchHandle broadcast_async(const torch::Tensor& tensor, int root_rank, const std::string& name,
                            const ProcessSet& process_set) {
  return broadcast_impl(tensor, root_rank, name, process_set, false);
}
TorchHandle broadcast_async_(const torch::Tensor& tensor, int root_rank, const std::string& name,
                             const ProcessSet& process_set) {
  return broadcast_impl(tensor, root_rank, name, process_set, true);
}
torch::Tensor broadcast(const torch::Tensor& tensor, int root_rank, const std::string& name,
                        const ProcessSet& process_set) {
  return broadcast_async(tensor, root_rank, name, process_set).wait();
}
void broadcast_(const torch::Tensor& tensor, int root_rank, const std::string& name,
                const ProcessSet& process_set) {
  broadcast_async_(tensor, root_rank, name, process_set).wait();
}

bool poll(const TorchHandle& handle) { return handle.poll(); }
torch::Tensor synchronize(const TorchHandle& handle) { return handle.wait(); }

}  // namespace hvd::optim
