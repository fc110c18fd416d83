// SPDX-License-Identifier: Apache-2.0
// [local] Mixed host and device tensors: negotiated separately, and a name submitted as a host
// tensor on some ranks and a device tensor on others fails everywhere, naming the ranks.
#include "hvd_catch.h"
#include "local_cluster.h"

using namespace hvd;
using namespace hvd::core;
using namespace hvd::test;

TEST_CASE("a tensor on cpu on one rank but cuda on others fails naming the ranks", "[local]") {
  Cluster c(3, Config{}, /*device_executor=*/true);
  c.start_all();
  Opts cuda;
  cuda.device = Device::cuda(0);
  std::vector<Tensor<float>> t(3, Tensor<float>({1.0f, 2.0f}));
  std::vector<Handle> hs;
  hs.push_back(submit(c[0], "w", t[0]));        // host
  hs.push_back(submit(c[1], "w", t[1], cuda));  // device
  hs.push_back(submit(c[2], "w", t[2], cuda));
  for (auto& h : hs) {
    Status s = await(h, "mixed device kinds");
    INFO(s.to_string());
    REQUIRE(s.code() == StatusCode::kMismatch);
    REQUIRE_THAT(s.message(),
                 hvd::test::Contains("device kind cpu on rank 0 but cuda on ranks 1-2"));
  }
  // Host and device tensors in one round go to their own executors.
  Tensor<float> h0({1.0f}), h1({2.0f}), h2({3.0f}), d0({1.0f}), d1({1.0f}), d2({1.0f});
  Tensor<float>* host[] = {&h0, &h1, &h2};
  Tensor<float>* dev[] = {&d0, &d1, &d2};
  std::vector<Handle> ok;
  for (int r = 0; r < 3; ++r) {
    ok.push_back(submit(c[r], "host", *host[r]));
    ok.push_back(submit(c[r], "dev", *dev[r], cuda));
  }
  for (auto& h : ok) await_ok(h, "host + device");
  REQUIRE(h0.out[0] == 6.0f);
  REQUIRE(d2.out[0] == 3.0f);
  for (int r = 0; r < 3; ++r) {
    for (const auto& b : c.executors[static_cast<size_t>(r)]->batches()) {
      for (const auto& n : b) REQUIRE(n != "dev");
    }
    for (const auto& b : c.device_executors[static_cast<size_t>(r)]->batches()) {
      for (const auto& n : b) REQUIRE(n != "host");
    }
  }
}
