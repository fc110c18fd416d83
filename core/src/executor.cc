// SPDX-License-Identifier: Apache-2.0
// Output allocation for collectives whose output size negotiation decides.
#include "hvd/core/executor.h"

#include <exception>
#include <string>
#include <vector>

namespace hvd::core {

namespace {

void reset_view(TensorView* v) {
  v->data = nullptr;
  v->dtype = DataType::kFloat32;
  v->shape.clear();
  v->device = Device::host();
  v->stream = nullptr;
  v->ready_event = nullptr;
}

// Strings and vectors are empty when fresh: clear() keeps their capacity.
template <typename T>
void reset_keeping_capacity(T* v, const T& fresh) {
  *v = fresh;
}
void reset_keeping_capacity(std::string* v, const std::string& /*fresh*/) { v->clear(); }
template <typename T>
void reset_keeping_capacity(std::vector<T>* v, const std::vector<T>& /*fresh*/) {
  v->clear();
}

}  // namespace

// Field by field (the hot path of every submission), the request's from its one field list;
// entry_test checks that the result equals a default-constructed entry.
void reset_for_reuse(TensorEntry* e) {
  Request& r = e->request;
  static const Request kFresh;
  for_each_request_field([&](auto m, FieldRole, auto) {
    reset_keeping_capacity(&(r.*m), kFresh.*m);
    return true;
  });
  reset_view(&e->input);
  reset_view(&e->output);
  e->handle.reset();
  e->allocator = nullptr;
}

Status allocate_output(TensorEntry* e, const std::vector<int64_t>& shape) {
  const DataType t = e->request.dtype;
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(t);
  auto failure = [&](const std::string& why) {
    return about(e->request, internal_error("the output allocator failed for shape " +
                                            shape_str(shape) + ": " + why));
  };
  void* data = nullptr;
  // Allocation may throw (a framework allocator out of memory, bad_alloc): a status for this
  // tensor, never an exception through the background thread.
  try {
    if (e->allocator) {
      data = e->allocator(shape);
      if (data == nullptr && bytes > 0) {
        return about(e->request, invalid_argument("the output allocator returned null for shape " +
                                                  shape_str(shape)));
      }
    } else {
      std::shared_ptr<uint8_t>& owned = e->handle->extra().owned_output;
      if (e->pool) {
        owned = e->pool->take(bytes);
      } else {
        owned.reset(new uint8_t[bytes > 0 ? bytes : 1],  // uninitialised
                    std::default_delete<uint8_t[]>());
      }
      data = owned.get();
    }
  } catch (const std::exception& ex) {
    return failure(ex.what());
  } catch (...) {
    return failure("unknown exception");
  }
  e->output = TensorView(data, t, shape, e->input.device);
  HandleExtra& x = e->handle->extra();
  x.output = e->output;
  x.output_shape = shape;
  return Status::OK();
}

Status allocate_output_or_own(TensorEntry* e, const std::vector<int64_t>& shape, Status* failed) {
  Status s = allocate_output(e, shape);
  if (s.ok()) return s;
  if (failed->ok()) *failed = s;
  if (!e->allocator) return s;  // hvd's own memory is what failed: nothing to fall back to
  e->allocator = nullptr;       // this collective only: the slot's allocator is dropped on retire
  Status own = allocate_output(e, shape);
  return own.ok() ? own : s;
}

}  // namespace hvd::core
