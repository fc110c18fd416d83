// SPDX-License-Identifier: Apache-2.0
// [unit] FunctionRef: calls the callable it refers to, with its captures, and passes arguments
// and results through.
#include "hvd/core/function_ref.h"

#include <string>

#include "hvd_catch.h"

namespace hvd::core {
namespace {

int apply(FunctionRef<int(int, const std::string&)> f) { return f(2, "abc"); }

}  // namespace

TEST_CASE("FunctionRef calls the lambda it refers to, captures included", "[unit]") {
  int base = 40;
  std::string seen;
  CHECK(apply([&](int x, const std::string& s) {
          seen = s;
          return base + x;
        }) == 42);
  CHECK(seen == "abc");
  base = 1;  // by reference: the lambda sees the change
  CHECK(apply([&](int x, const std::string& s) { return base + x + static_cast<int>(s.size()); }) ==
        6);
}

TEST_CASE("FunctionRef refers to a named callable without copying it", "[unit]") {
  struct Counter {
    int calls = 0;
    void operator()(int n) { calls += n; }
  } counter;
  FunctionRef<void(int)> f = counter;
  f(2);
  f(3);
  CHECK(counter.calls == 5);  // the object itself was called, not a copy
}

}  // namespace hvd::core
