// SPDX-License-Identifier: Apache-2.0
// Calls before init() and after shutdown() fail clearly; shutdown() then init() works again.
#include <cstdio>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {
int failures = 0;

void expect_throw(const char* what, const std::string& needle, void (*fn)()) {
  try {
    fn();
    std::printf("FAIL: %s did not throw\n", what);
    ++failures;
  } catch (const hvd::Error& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      std::printf("FAIL: %s threw '%s', expected it to mention '%s'\n", what, e.what(),
                  needle.c_str());
      ++failures;
    }
  }
}

float data[4] = {1, 2, 3, 4};
hvd::TensorView view() { return hvd::TensorView(data, hvd::DataType::kFloat32, {4}); }
}  // namespace

int main() {
  if (hvd::is_initialized()) ++failures;
  expect_throw("rank() before init", "before hvd::init()", [] { (void)hvd::rank(); });
  expect_throw("allreduce before init", "hvd::allreduce_async() called before hvd::init()",
               [] { hvd::allreduce(view(), "x"); });
  for (int round = 0; round < 2; ++round) {  // shutdown() followed by init() works
    hvd::init();
    hvd::init();  // no-op
    if (!hvd::is_initialized()) ++failures;
    int n = hvd::size();
    float v[4] = {1, 2, 3, 4};
    hvd::allreduce(hvd::TensorView(v, hvd::DataType::kFloat32, {4}), "round", hvd::ReduceOp::kSum);
    for (int i = 0; i < 4; ++i) {
      if (v[i] != static_cast<float>((i + 1) * n)) {
        std::printf("FAIL: round %d element %d = %g\n", round, i, v[i]);
        ++failures;
      }
    }
    hvd::shutdown();
    hvd::shutdown();  // idempotent
    expect_throw("allreduce after shutdown", "after hvd::shutdown()",
                 [] { hvd::allreduce(view(), "y"); });
    expect_throw("barrier after shutdown", "after hvd::shutdown()", [] { hvd::barrier(); });
  }
  std::printf("lifecycle test %s (%d problems)\n", failures == 0 ? "OK" : "FAILED", failures);
  return failures == 0 ? 0 : 1;
}
