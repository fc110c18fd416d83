// SPDX-License-Identifier: Apache-2.0
// [mpi] allgather, alltoall and reducescatter on torch::Tensor (sync, async, grouped): every
// rank computes the expected result on its own and compares, over uneven first dimensions and
// float16/bfloat16 as well as float32/int64.
#include <string>
#include <vector>

#include "hvd/torch.h"

// libtorch pulls in glog, whose CHECK macro would shadow Catch's: include Catch last.
#undef CHECK
#include "hvd_catch.h"

using hvd::test::Contains;

namespace {

const std::vector<c10::ScalarType> kDtypes = {torch::kFloat, torch::kHalf, torch::kBFloat16,
                                              torch::kLong};

std::string dt_name(c10::ScalarType dt) { return c10::toString(dt); }

/// Rank r's allgather input: r+1 rows of 3, values small integers (exact in bfloat16).
torch::Tensor gather_input(int r, c10::ScalarType dt) {
  return (torch::arange((r + 1) * 3).reshape({r + 1, 3}) + 10 * r).to(dt);
}

/// Rank `from`'s alltoall rows for rank `to`: (from+to)%3 rows of [v, -v], v = 16f + 4t + k.
int64_t a2a_rows(int from, int to) { return (from + to) % 3; }
torch::Tensor a2a_block(int from, int to, c10::ScalarType dt) {
  torch::Tensor v = torch::arange(a2a_rows(from, to)) + 16 * from + 4 * to;
  return torch::stack({v, -v}, 1).to(dt);
}

/// Rank r's reducescatter input: rows x 2 of arange + r.
torch::Tensor rs_input(int r, int64_t rows, c10::ScalarType dt) {
  return (torch::arange(rows * 2).reshape({rows, 2}) + r).to(dt);
}
/// This rank's slice of `full` by the reducescatter rule (the first R%N ranks get one more).
torch::Tensor my_slice(const torch::Tensor& full, int rank, int size) {
  const int64_t rows = full.size(0), base = rows / size, extra = rows % size;
  const int64_t start = rank * base + std::min<int64_t>(rank, extra);
  return full.narrow(0, start, base + (rank < extra ? 1 : 0));
}

bool same(const torch::Tensor& got, const torch::Tensor& want) {
  return got.scalar_type() == want.scalar_type() && got.sizes() == want.sizes() &&
         torch::equal(got.to(torch::kDouble), want.to(torch::kDouble));
}

}  // namespace

TEST_CASE("torch allgather concatenates uneven first dims in rank order", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  for (auto dt : kDtypes) {
    INFO("dtype " << dt_name(dt));
    std::vector<torch::Tensor> parts;
    for (int i = 0; i < n; ++i) parts.push_back(gather_input(i, dt));
    torch::Tensor out = hvd::allgather(gather_input(r, dt), "ag." + dt_name(dt));
    CHECK(same(out, torch::cat(parts)));
    CHECK(out.is_contiguous());
  }
}

TEST_CASE("torch allgather with an empty contribution and 3-d rows", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  auto input = [](int i) { return torch::full({i, 2, 2}, i, torch::kFloat); };  // rank 0: none
  std::vector<torch::Tensor> parts;
  for (int i = 0; i < n; ++i) parts.push_back(input(i));
  torch::Tensor out = hvd::allgather(input(r), "ag.empty");
  CHECK(same(out, torch::cat(parts)));
  CHECK(out.size(0) == n * (n - 1) / 2);
}

TEST_CASE("torch allgather_async keeps a dropped non-contiguous input alive", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  hvd::TorchHandle h;
  {
    torch::Tensor wide = torch::zeros({r + 1, 6}, torch::kDouble);
    torch::Tensor t = wide.slice(1, 0, 6, 2);  // [r+1, 3], every other column: strided
    t.copy_(gather_input(r, torch::kDouble));
    REQUIRE_FALSE(t.is_contiguous());
    h = hvd::allgather_async(t, "ag.async");
  }
  std::vector<torch::Tensor> parts;
  for (int i = 0; i < n; ++i) parts.push_back(gather_input(i, torch::kDouble));
  CHECK(same(h.wait(), torch::cat(parts)));
  CHECK(hvd::poll(h));
  // A handle dropped before completion must not break later collectives.
  (void)hvd::allgather_async(gather_input(r, torch::kFloat), "ag.dropped");
  CHECK(same(hvd::allgather(gather_input(r, torch::kFloat), "ag.after"),
             torch::cat(parts).to(torch::kFloat)));
}

TEST_CASE("torch grouped_allgather returns one output per tensor", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  std::vector<torch::Tensor> a, b;
  for (int i = 0; i < n; ++i) {
    a.push_back(gather_input(i, torch::kBFloat16));
    b.push_back(torch::full({1, 4}, 7 * i, torch::kLong));
  }
  auto outs = hvd::grouped_allgather({a[r], b[r]}, "gag");
  REQUIRE(outs.size() == 2);
  CHECK(same(outs[0], torch::cat(a)));
  CHECK(same(outs[1], torch::cat(b)));
  CHECK_THROWS_WITH(hvd::grouped_allgather({}, "gag.none"), Contains("an empty list of tensors"));
}

TEST_CASE("torch alltoall routes uneven splits and reports received splits", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  for (auto dt : kDtypes) {
    INFO("dtype " << dt_name(dt));
    std::vector<torch::Tensor> send, want;
    std::vector<int64_t> splits, want_splits;
    for (int j = 0; j < n; ++j) {
      send.push_back(a2a_block(r, j, dt));
      splits.push_back(a2a_rows(r, j));
      want.push_back(a2a_block(j, r, dt));
      want_splits.push_back(a2a_rows(j, r));
    }
    auto res = hvd::alltoall(torch::cat(send), splits, "a2a." + dt_name(dt));
    CHECK(same(res.output, torch::cat(want)));
    CHECK(res.received_splits == want_splits);
  }
}

TEST_CASE("torch alltoall_async with equal splits", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  auto row = [](int from, int to, int k) { return static_cast<double>(16 * from + 4 * to + k); };
  torch::Tensor send = torch::empty({2 * n, 3}, torch::kHalf);
  torch::Tensor want = torch::empty({2 * n, 3}, torch::kHalf);
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < 2; ++k) {
      send[2 * j + k].fill_(row(r, j, k));
      want[2 * j + k].fill_(row(j, r, k));
    }
  }
  auto h = hvd::alltoall_async(send, {}, "a2a.equal");
  CHECK(same(h.wait(), want));
  CHECK(h.received_splits() == std::vector<int64_t>(n, 2));
}

TEST_CASE("torch alltoall rejects splits that do not fit", "[mpi]") {
  const int n = hvd::size();
  CHECK_THROWS_WITH(hvd::alltoall(torch::zeros({2, 2}), std::vector<int64_t>(n + 1, 0), "a2a.bad"),
                    Contains("a2a.bad") && Contains("splits"));
}

TEST_CASE("torch reducescatter sums and averages into uneven slices", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  const int64_t rows = 2 * n + 1;
  for (auto dt : kDtypes) {
    INFO("dtype " << dt_name(dt));
    torch::Tensor sum = torch::zeros({rows, 2}, torch::kDouble);
    for (int i = 0; i < n; ++i) sum += rs_input(i, rows, torch::kDouble);
    torch::Tensor s =
        hvd::reducescatter(rs_input(r, rows, dt), "rs.sum." + dt_name(dt), hvd::ReduceOp::kSum);
    CHECK(same(s, my_slice(sum, r, n).to(dt)));
    if (dt != torch::kLong) {
      torch::Tensor a = hvd::reducescatter(rs_input(r, rows, dt), "rs.avg." + dt_name(dt));
      CHECK(same(a, my_slice(sum / n, r, n).to(dt)));
    }
  }
}

TEST_CASE("torch reducescatter with fewer rows than ranks gives empty slices", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  torch::Tensor t = torch::full({1, 3}, r + 1, torch::kFloat);
  auto h = hvd::reducescatter_async(t, "rs.few", hvd::ReduceOp::kSum);
  torch::Tensor out = h.wait();
  CHECK(out.size(0) == (r == 0 ? 1 : 0));
  CHECK(out.size(1) == 3);
  if (r == 0) CHECK(same(out, torch::full({1, 3}, n * (n + 1) / 2, torch::kFloat)));
}

TEST_CASE("torch grouped_reducescatter applies pre/postscale to every tensor", "[mpi]") {
  const int n = hvd::size(), r = hvd::rank();
  torch::Tensor a = rs_input(r, n + 1, torch::kFloat);
  torch::Tensor b = rs_input(r, 3 * n, torch::kBFloat16).reshape({3 * n, 2, 1});
  torch::Tensor sa = torch::zeros({n + 1, 2}, torch::kDouble);
  torch::Tensor sb = torch::zeros({3 * n, 2}, torch::kDouble);
  for (int i = 0; i < n; ++i) {
    sa += rs_input(i, n + 1, torch::kDouble);
    sb += rs_input(i, 3 * n, torch::kDouble);
  }
  auto outs = hvd::grouped_reducescatter({a, b}, "grs", hvd::ReduceOp::kSum, 2.0, 0.25);
  REQUIRE(outs.size() == 2);
  CHECK(same(outs[0], my_slice(sa * 0.5, r, n).to(torch::kFloat)));
  CHECK(same(outs[1], my_slice(sb * 0.5, r, n).to(torch::kBFloat16).reshape({-1, 2, 1})));
}
