// SPDX-License-Identifier: Apache-2.0
// NCCL executor planning (pure, every build): fusion layout, copy grid, scaling, and the pack /
// exchange / unpack layouts of allgather, alltoall and reducescatter replayed on host memory for
// 1-4 ranks (the [gpu] tier runs only np = 1, so this is where multi-rank layouts are checked).
#include <cstring>
#include <random>

#include "hvd/ops/nccl/plan.h"
#include "hvd_catch.h"

using namespace hvd;
using namespace hvd::ops::nccl;

namespace {

// What the batched copy kernel does with descriptors (copy_body_test checks the kernel's body
// against the same rule): count elements of esize bytes, zeros when src is null.
void run_copies(const std::vector<CopyDesc>& ds, size_t esize) {
  for (const CopyDesc& d : ds) {
    const size_t b = static_cast<size_t>(d.count) * esize;
    if (b == 0) continue;
    if (d.src) {
      std::memmove(d.dst, d.src, b);
    } else {
      std::memset(d.dst, 0, b);
    }
  }
}

// A value that says where an element came from.
int32_t tag(size_t tensor, size_t rank, int64_t elem) {
  return static_cast<int32_t>(1000000 * (tensor + 1) + 10000 * rank + elem);
}

}  // namespace

TEST_CASE("nccl plan: fused layout aligns every tensor to 16 bytes and pads for the node",
          "[unit]") {
  const std::vector<int64_t> numels = {1, 0, 7, 16, 33, 5};
  for (size_t esize : {1, 2, 4, 8}) {
    for (int64_t multiple : {1, 2, 3, 8}) {
      const FusedLayout l = fused_layout(numels, esize, multiple);
      REQUIRE(l.offset.size() == numels.size());
      int64_t end = 0;
      for (size_t i = 0; i < numels.size(); ++i) {
        REQUIRE(l.offset[i] * static_cast<int64_t>(esize) % 16 == 0);
        REQUIRE(l.offset[i] >= end);  // no overlap, in order
        end = l.offset[i] + numels[i];
      }
      REQUIRE(l.total >= end);
      REQUIRE(l.total * static_cast<int64_t>(esize) % 16 == 0);
      REQUIRE(l.padded % multiple == 0);
      REQUIRE(l.padded >= l.total);
      REQUIRE(l.padded < l.total + multiple);
    }
  }
  REQUIRE(fused_layout({}, 4).total == 0);
  REQUIRE(fused_layout({3, 4}, 4).offset == std::vector<int64_t>{0, 4});
}

TEST_CASE("nccl plan: scaling divides integer averages exactly", "[unit]") {
  Scale s = make_scale(DataType::kInt32, 0.25);
  REQUIRE(s.divisor == 4);
  REQUIRE(s.factor == 1.0);
  REQUIRE_FALSE(s.identity());
  REQUIRE(make_scale(DataType::kInt64, 1.0 / 3).divisor == 3);
  s = make_scale(DataType::kInt8, 0.4);  // 1/0.4 is not an integer: multiply and truncate
  REQUIRE(s.divisor == 1);
  REQUIRE(s.factor == 0.4);
  s = make_scale(DataType::kFloat32, 0.25);  // floating types always multiply
  REQUIRE(s.divisor == 1);
  REQUIRE(s.factor == 0.25);
  REQUIRE(make_scale(DataType::kFloat16, 1.0).identity());
  REQUIRE(make_scale(DataType::kInt32, 1.0).identity());
  REQUIRE(make_scale(DataType::kInt32, 2.0).factor == 2.0);
}

TEST_CASE("nccl plan: the copy grid stays within CUDA's limits and covers the largest piece",
          "[unit]") {
  for (int pieces : {1, 3, 1024, 65535, 70000}) {
    for (int64_t count :
         {int64_t{1}, int64_t{255}, int64_t{4096}, int64_t{1} << 20, int64_t{1} << 28}) {
      for (size_t esize : {1, 2, 4, 8}) {
        for (bool pure : {true, false}) {
          const CopyGrid g = copy_grid(pieces, count, esize, pure);
          INFO(pieces << " pieces of " << count << " x " << esize << (pure ? " copy" : " scaled"));
          REQUIRE(g.y == static_cast<unsigned>(std::min(pieces, 65535)));
          REQUIRE(g.x >= 1);
          REQUIRE(static_cast<int64_t>(g.x) * g.y <= std::max<int64_t>(65536, g.y));
          const int64_t per_thread = pure ? 16 : static_cast<int64_t>(esize);
          const int64_t covered = static_cast<int64_t>(g.x) * kCopyThreads * per_thread;
          // Either one pass covers the piece or the grid is at its cap (threads then stride).
          const unsigned cap = std::max(1u, 65536u / g.y);
          REQUIRE((covered >= count * static_cast<int64_t>(esize) || g.x == cap));
        }
      }
    }
  }
  REQUIRE(copy_grid(0, 10, 4, true).x == 1);
  REQUIRE(copy_grid(4, 0, 4, true).y == 1);
}

TEST_CASE("nccl plan: allgather pack, gather and unpack give every rank the concatenation",
          "[unit]") {
  std::mt19937 rng(7);
  for (int n = 1; n <= 4; ++n) {
    for (size_t k = 1; k <= 3; ++k) {
      for (int trial = 0; trial < 5; ++trial) {
        const size_t N = static_cast<size_t>(n);
        std::vector<int64_t> numels(k), rows(k * N);
        for (auto& x : numels) x = 1 + static_cast<int64_t>(rng() % 4);
        for (auto& x : rows) x = static_cast<int64_t>(rng() % 4);  // zeros included
        if (trial == 0) std::fill(rows.begin(), rows.end(), 2);    // equal counts
        INFO("n=" << n << " k=" << k << " trial " << trial);
        // inputs[j][i]: rank j's tensor i.
        std::vector<std::vector<std::vector<int32_t>>> inputs(N,
                                                              std::vector<std::vector<int32_t>>(k));
        for (size_t j = 0; j < N; ++j) {
          for (size_t i = 0; i < k; ++i) {
            inputs[j][i].resize(static_cast<size_t>(rows[i * N + j] * numels[i]));
            for (size_t e = 0; e < inputs[j][i].size(); ++e)
              inputs[j][i][e] = tag(i, j, static_cast<int64_t>(e));
          }
        }
        // Every rank's send buffer (what it hands ncclAllGather / ncclSend).
        std::vector<AllgatherPlan> plans;
        std::vector<std::vector<uint8_t>> send(N);
        std::vector<const void*> send_ptr(N);
        for (size_t j = 0; j < N; ++j) {
          auto p = plan_allgather(rows, numels, n, static_cast<int>(j), 4);
          REQUIRE(p.ok());
          plans.push_back(p.value());
          std::vector<const void*> src(k);
          for (size_t i = 0; i < k; ++i) src[i] = inputs[j][i].data();
          if (plans[j].packed()) {
            send[j].resize(plans[j].count[j] + 16);
            run_copies(plans[j].pack(src, send[j].data()), 4);
            send_ptr[j] = send[j].data();
          } else {
            send_ptr[j] = src[0];
          }
        }
        for (size_t me = 0; me < N; ++me) {
          const AllgatherPlan& p = plans[me];
          REQUIRE(p.equal ==
                  (trial == 0 || std::all_of(p.count.begin(), p.count.end(),
                                             [&](size_t c) { return c == p.count[0]; })));
          std::vector<uint8_t> recv(p.total + 16, 0xee);
          for (size_t j = 0; j < N; ++j) {
            REQUIRE(p.count[j] == plans[j].count[j]);  // ranks agree on what each sends
            if (p.count[j]) std::memcpy(recv.data() + p.displ[j], send_ptr[j], p.count[j]);
          }
          std::vector<std::vector<int32_t>> out(k);
          std::vector<void*> dst(k);
          for (size_t i = 0; i < k; ++i) {
            out[i].assign(p.out_bytes[i] / 4, -1);
            dst[i] = out[i].data();
          }
          if (p.packed()) {
            run_copies(p.unpack(recv.data(), dst), 4);
          } else if (p.total > 0) {
            std::memcpy(dst[0], recv.data(), p.total);
          }
          for (size_t i = 0; i < k; ++i) {
            std::vector<int32_t> want;
            int64_t want_rows = 0;
            for (size_t j = 0; j < N; ++j) {
              want.insert(want.end(), inputs[j][i].begin(), inputs[j][i].end());
              want_rows += rows[i * N + j];
            }
            REQUIRE(p.out_rows[i] == want_rows);
            REQUIRE(out[i] == want);
          }
        }
      }
    }
  }
}

TEST_CASE("nccl plan: allgather unpack skips failed outputs; malformed responses fail", "[unit]") {
  auto p = plan_allgather({1, 2, 3, 1}, {2, 1}, 2, 0, 4);
  REQUIRE(p.ok());
  int32_t recv[64] = {};
  int32_t out0[16];
  for (const CopyDesc& d : p.value().unpack(recv, {out0, nullptr})) REQUIRE(d.dst != nullptr);
  REQUIRE(p.value().unpack(recv, {out0, nullptr}).size() == 2);  // tensor 0 from both ranks
  REQUIRE_FALSE(plan_allgather({1, 2, 3}, {2, 1}, 2, 0, 4).ok());
  REQUIRE_FALSE(plan_allgather({1, 2}, {2}, 2, 2, 4).ok());
}

TEST_CASE("nccl plan: alltoall offsets deliver each rank's rows to their destination", "[unit]") {
  std::mt19937 rng(11);
  for (int n = 1; n <= 4; ++n) {
    const size_t N = static_cast<size_t>(n);
    for (int trial = 0; trial < 5; ++trial) {
      const int64_t row = 1 + static_cast<int64_t>(rng() % 3);
      std::vector<int64_t> rr(N * N);  // rr[j * n + m]: rows j sends to m
      for (auto& x : rr) x = static_cast<int64_t>(rng() % 3);
      std::vector<std::vector<int32_t>> in(N);
      for (size_t j = 0; j < N; ++j) {
        int64_t total = 0;
        for (size_t m = 0; m < N; ++m) total += rr[j * N + m];
        in[j].resize(static_cast<size_t>(total * row));
        for (size_t e = 0; e < in[j].size(); ++e) in[j][e] = tag(0, j, static_cast<int64_t>(e));
      }
      std::vector<AlltoallPlan> plans;
      for (size_t j = 0; j < N; ++j) {
        auto p = plan_alltoall(rr, row, n, static_cast<int>(j), 4);
        REQUIRE(p.ok());
        plans.push_back(p.value());
      }
      for (size_t me = 0; me < N; ++me) {
        const AlltoallPlan& p = plans[me];
        std::vector<int32_t> out(static_cast<size_t>(p.recv_rows * row), -1);
        std::vector<int32_t> want;
        for (size_t j = 0; j < N; ++j) {
          // Rank j's send to me pairs with my receive from j.
          REQUIRE(plans[j].send_bytes[me] == p.recv_bytes[j]);
          if (p.recv_bytes[j]) {
            std::memcpy(reinterpret_cast<uint8_t*>(out.data()) + p.recv_off[j],
                        reinterpret_cast<const uint8_t*>(in[j].data()) + plans[j].send_off[me],
                        p.recv_bytes[j]);
          }
          REQUIRE(p.received[j] == rr[j * N + me]);
          // What rank j sends to me: its rows after those for ranks 0..me-1.
          int64_t first = 0;
          for (size_t m = 0; m < me; ++m) first += rr[j * N + m];
          want.insert(want.end(), in[j].begin() + first * row,
                      in[j].begin() + (first + rr[j * N + me]) * row);
        }
        REQUIRE(out == want);
      }
    }
  }
  REQUIRE_FALSE(plan_alltoall({1, 2, 3}, 1, 2, 0, 4).ok());
}

TEST_CASE("nccl plan: reducescatter slots give each rank the sum of its rows", "[unit]") {
  for (int n = 1; n <= 4; ++n) {
    const size_t N = static_cast<size_t>(n);
    for (int64_t rows : {0, 1, 2, 3, 5, 8, 11}) {
      for (int64_t row : {1, 3}) {
        INFO("n=" << n << " rows=" << rows << " row=" << row);
        const int64_t total = rows * row;
        std::vector<std::vector<int32_t>> in(N);
        for (size_t j = 0; j < N; ++j) {
          in[j].resize(static_cast<size_t>(total));
          for (int64_t e = 0; e < total; ++e) in[j][static_cast<size_t>(e)] = tag(0, j, e);
        }
        // Every rank packs into its buffer of n slots; the reduce-scatter sums slot m over ranks.
        std::vector<ReducescatterPlan> plans;
        std::vector<std::vector<int32_t>> bufs(N);
        for (size_t j = 0; j < N; ++j) {
          plans.push_back(plan_reducescatter(rows, row, n, static_cast<int>(j)));
          REQUIRE(plans[j].block == plans[0].block);
          bufs[j].assign(static_cast<size_t>(plans[j].block * n) + 4, 77);
          // Rank 0 plays a failed input: it contributes zeros.
          run_copies(plans[j].pack(j == 0 && n > 1 ? nullptr : in[j].data(), bufs[j].data(), 4), 4);
        }
        int64_t covered = 0;
        for (size_t me = 0; me < N; ++me) {
          const ReducescatterPlan& p = plans[me];
          const int64_t start = covered;
          covered += p.mine;
          std::vector<int32_t> got(static_cast<size_t>(p.mine));
          for (int64_t e = 0; e < p.mine; ++e) {
            int32_t s = 0;
            for (size_t j = 0; j < N; ++j) s += bufs[j][static_cast<size_t>(p.block) * me + e];
            got[static_cast<size_t>(e)] = s;
          }
          std::vector<int32_t> want(static_cast<size_t>(p.mine), 0);
          for (int64_t e = 0; e < p.mine; ++e) {
            for (size_t j = (n > 1 ? 1 : 0); j < N; ++j)
              want[static_cast<size_t>(e)] += in[j][static_cast<size_t>(start + e)];
          }
          REQUIRE(got == want);
          REQUIRE(p.mine == p.my_rows * row);
          REQUIRE(p.mine <= p.block);
        }
        REQUIRE(covered == total);  // the slices tile the tensor
      }
    }
  }
}

TEST_CASE("nccl plan: a fused allreduce copies in, reduces and copies out every tensor", "[unit]") {
  const std::vector<int64_t> numels = {3, 0, 17, 1, 64};
  for (int n : {1, 2, 4}) {
    const FusedLayout l = fused_layout(numels, 4, 2);
    std::vector<int32_t> sum(static_cast<size_t>(l.padded), 0);
    for (int j = 0; j < n; ++j) {
      std::vector<int32_t> buf(static_cast<size_t>(l.padded), 0);
      std::vector<std::vector<int32_t>> in(numels.size());
      std::vector<CopyDesc> cin;
      for (size_t i = 0; i < numels.size(); ++i) {
        in[i].resize(static_cast<size_t>(numels[i]));
        for (int64_t e = 0; e < numels[i]; ++e)
          in[i][static_cast<size_t>(e)] = tag(i, static_cast<size_t>(j), e);
        cin.push_back({in[i].data(), buf.data() + l.offset[i], numels[i]});
      }
      run_copies(cin, 4);
      for (size_t e = 0; e < sum.size(); ++e) sum[e] += buf[e];
    }
    for (size_t i = 0; i < numels.size(); ++i) {
      std::vector<int32_t> out(static_cast<size_t>(numels[i]), -1);
      run_copies({{sum.data() + l.offset[i], out.data(), numels[i]}}, 4);
      for (int64_t e = 0; e < numels[i]; ++e) {
        int32_t want = 0;
        for (int j = 0; j < n; ++j) want += tag(i, static_cast<size_t>(j), e);
        REQUIRE(out[static_cast<size_t>(e)] == want);
      }
    }
  }
}
