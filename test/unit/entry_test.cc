// SPDX-License-Identifier: Apache-2.0
// reset_for_reuse: a recycled table entry is reset to defaults but keeps its capacity.
#include "hvd/core/executor.h"
#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::core;

TEST_CASE("reset_for_reuse resets every field and keeps capacity and the cache hint", "[unit]") {
  TensorEntry e;
  e.request.name = "a.rather.long.tensor.name.beyond.small.string.size";
  e.request.shape = {4, 5, 6};
  e.request.group = "group.with.a.long.name.beyond.small.string";
  e.request.splits = {1, 2};
  e.request.op = OpType::kBroadcast;
  e.request.root = 3;
  e.request.prescale = 2.0;
  e.request.reduce_op = ReduceOp::kMax;
  float x[120];
  e.input = TensorView(x, DataType::kFloat64, {4, 5, 6});
  e.input.device = Device::cuda(1);
  e.input.stream = &x[1];
  e.input.ready_event = &x[2];
  e.output = e.input;
  e.handle = new_handle_state();
  e.allocator = [](const std::vector<int64_t>&) -> void* { return nullptr; };
  e.cache_hint = 7;
  const size_t name_cap = e.request.name.capacity();
  const size_t shape_cap = e.request.shape.capacity();
  const size_t view_cap = e.input.shape.capacity();

  reset_for_reuse(&e);
  const Request fresh;
  CHECK(e.request.same_params(fresh));
  CHECK(e.request.rank == fresh.rank);
  CHECK(e.request.name.empty());
  CHECK(e.request.shape.empty());
  CHECK(e.request.group.empty());
  CHECK(e.request.splits.empty());
  CHECK(e.input.data == nullptr);
  CHECK(e.input.shape.empty());
  for (const TensorView* v : {&e.input, &e.output}) {
    const TensorView fresh_view;
    CHECK(v->data == fresh_view.data);
    CHECK(v->dtype == fresh_view.dtype);
    CHECK(v->device == fresh_view.device);
    CHECK(v->stream == fresh_view.stream);
    CHECK(v->ready_event == fresh_view.ready_event);
    CHECK(v->shape.empty());
  }
  CHECK(e.handle == nullptr);
  CHECK(!e.allocator);
  CHECK(e.cache_hint == 7);
  CHECK(e.request.name.capacity() == name_cap);
  CHECK(e.request.shape.capacity() == shape_cap);
  CHECK(e.input.shape.capacity() == view_cap);
}
