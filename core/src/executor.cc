// SPDX-License-Identifier: Apache-2.0
// Output allocation for collectives whose output size negotiation decides.
#include "hvd/core/executor.h"

namespace hvd::core {

namespace {

void reset_view(TensorView* v) {
  std::vector<int64_t> shape = std::move(v->shape);
  *v = TensorView();
  shape.clear();
  v->shape = std::move(shape);
}

}  // namespace

void reset_for_reuse(TensorEntry* e) {
  Request& r = e->request;
  std::string name = std::move(r.name), group = std::move(r.group);
  std::vector<int64_t> shape = std::move(r.shape), splits = std::move(r.splits);
  r = Request();
  name.clear();
  group.clear();
  shape.clear();
  splits.clear();
  r.name = std::move(name);
  r.group = std::move(group);
  r.shape = std::move(shape);
  r.splits = std::move(splits);
  reset_view(&e->input);
  reset_view(&e->output);
  e->handle.reset();
  e->allocator = nullptr;
}

Status allocate_output(TensorEntry* e, const std::vector<int64_t>& shape) {
  const DataType t = e->request.dtype;
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(t);
  void* data = nullptr;
  if (e->allocator) {
    data = e->allocator(shape);
    if (data == nullptr && bytes > 0) {
      return invalid_argument(std::string(op_name(e->request.op)) + " '" + e->request.name +
                              "': the output allocator returned null for shape " +
                              shape_str(shape));
    }
  } else {
    if (e->pool) {
      e->handle->owned_output = e->pool->take(bytes);
    } else {
      e->handle->owned_output.reset(new uint8_t[bytes > 0 ? bytes : 1],  // uninitialised
                                    std::default_delete<uint8_t[]>());
    }
    data = e->handle->owned_output.get();
  }
  e->output = TensorView(data, t, shape, e->input.device);
  e->handle->output = e->output;
  e->handle->output_shape = shape;
  return Status::OK();
}

}  // namespace hvd::core
