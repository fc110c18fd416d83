// SPDX-License-Identifier: Apache-2.0
// Adasum over MPI on host buffers: vector halving, distance doubling.
//
// With 2^L ranks, level k (0 <= k < L) pairs rank r with r ^ (1 << k). Both hold the same
// segment of the fused buffer (the whole buffer at level 0); the rank whose bit k is clear keeps
// the segment's first half, its partner the second, and each sends the other the half it gives
// up. On its half, each rank computes per tensor the partial a.b, |a|^2 and |b|^2, where a is the
// vector of the ranks with bit k clear and b of those with it set. The 2^(k+1) ranks sharing
// r >> (k + 1) hold the pieces of those two whole vectors between them, so one allreduce of
// 3 doubles per tensor over them (the level's sub-communicator) gives the whole dot products,
// and each rank combines its half. After the last level each rank holds 1 / 2^L of the result;
// the levels are walked back (distance halving), each rank sending its piece to the partner and
// receiving the partner's, until every rank holds the whole buffer.
//
// float16 and bfloat16 are widened to float32 first and narrowed back at the end, so a combine
// of large half values cannot overflow in between; every dot product and norm is a float64 sum.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "hvd/ops/adasum.h"
#include "hvd/ops/cpu_kernels.h"
#include "hvd/ops/mpi_util.h"

namespace hvd::ops {

namespace {

// Point-to-point messages of one Adasum, on whatever communicator it runs over.
constexpr int kTagHalve = 0x6879;
constexpr int kTagGather = 0x687a;
// Elements per MPI message at most (counts are int).
constexpr int64_t kMaxMessage = 1LL << 30;

// Per-level sub-communicators of one communicator, kept as its attribute: created by the first
// Adasum over it, freed with it.
struct LevelComms {
  std::vector<MPI_Comm> comms;  // level k: the 2^(k+1) ranks sharing rank >> (k + 1)
};

int free_level_comms(MPI_Comm /*comm*/, int /*keyval*/, void* attr, void* /*extra*/) {
  auto* levels = static_cast<LevelComms*>(attr);
  for (MPI_Comm& c : levels->comms) {
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }
  delete levels;
  return MPI_SUCCESS;
}

Status level_comms(MPI_Comm comm, int rank, int levels, const std::vector<MPI_Comm>** out) {
  static std::once_flag once;
  static int keyval = MPI_KEYVAL_INVALID;
  static int keyval_rc = MPI_SUCCESS;
  std::call_once(once, [] {
    keyval_rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_level_comms, &keyval, nullptr);
  });
  HVD_MPI_CHECK(keyval_rc);
  void* attr = nullptr;
  int found = 0;
  HVD_MPI_CHECK(MPI_Comm_get_attr(comm, keyval, &attr, &found));
  if (found) {
    *out = &static_cast<LevelComms*>(attr)->comms;
    return Status::OK();
  }
  auto made = std::make_unique<LevelComms>();
  made->comms.assign(static_cast<size_t>(levels), MPI_COMM_NULL);
  for (int k = 0; k < levels; ++k) {
    const int rc =
        MPI_Comm_split(comm, rank >> (k + 1), rank, &made->comms[static_cast<size_t>(k)]);
    if (rc != MPI_SUCCESS) {
      free_level_comms(comm, keyval, made.release(), nullptr);
      return mpi_error(rc, "MPI_Comm_split", __FILE__, __LINE__);
    }
  }
  HVD_MPI_CHECK(MPI_Comm_set_attr(comm, keyval, made.get()));
  *out = &made.release()->comms;
  return Status::OK();
}

template <typename T>
MPI_Datatype mpi_type_of();
template <>
MPI_Datatype mpi_type_of<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type_of<double>() {
  return MPI_DOUBLE;
}

// dots[0..2] += a.b, |a|^2, |b|^2 over n elements, in float64 with four partial sums each (one
// chain of dependent additions would bound the loop by the adder's latency).
template <typename T>
void accumulate_dots(const T* a, const T* b, int64_t n, double* dots) {
  double ab[4] = {0, 0, 0, 0}, aa[4] = {0, 0, 0, 0}, bb[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    for (int l = 0; l < 4; ++l) {
      const double x = a[j + l], y = b[j + l];
      ab[l] += x * y;
      aa[l] += x * x;
      bb[l] += y * y;
    }
  }
  for (; j < n; ++j) {
    const double x = a[j], y = b[j];
    ab[0] += x * y;
    aa[0] += x * x;
    bb[0] += y * y;
  }
  dots[0] += (ab[0] + ab[1]) + (ab[2] + ab[3]);
  dots[1] += (aa[0] + aa[1]) + (aa[2] + aa[3]);
  dots[2] += (bb[0] + bb[1]) + (bb[2] + bb[3]);
}

// out[j] = ca * a[j] + cb * b[j] (out may alias a or b).
template <typename T>
void combine(const T* a, const T* b, int64_t n, const AdasumCoefficients& c, T* out) {
  for (int64_t j = 0; j < n; ++j) {
    out[j] =
        static_cast<T>(c.a_coef * static_cast<double>(a[j]) + c.b_coef * static_cast<double>(b[j]));
  }
}

// Calls f(tensor, first element, count) for each tensor's part of [lo, hi) of the fused buffer.
template <typename F>
void for_each_piece(const std::vector<int64_t>& offsets, int64_t lo, int64_t hi, F&& f) {
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    const int64_t s = std::max(lo, offsets[i]), e = std::min(hi, offsets[i + 1]);
    if (s < e) f(i, s, e - s);
  }
}

// Posts the messages moving `n` elements at `p` to or from `peer`, split to fit int counts.
template <typename T>
Status post(RequestBatch* batch, bool send, T* p, int64_t n, int peer, int tag, MPI_Comm comm) {
  for (int64_t off = 0; off < n; off += kMaxMessage) {
    const int c = static_cast<int>(std::min(kMaxMessage, n - off));
    if (send) {
      HVD_MPI_CHECK(
          MPI_Isend(p + off, c, mpi_type_of<T>(), peer, tag, comm, batch->add_send(peer)));
    } else {
      HVD_MPI_CHECK(MPI_Irecv(p + off, c, mpi_type_of<T>(), peer, tag, comm, batch->add_recv()));
    }
  }
  return Status::OK();
}

int64_t messages(int64_t n) { return (n + kMaxMessage - 1) / kMaxMessage; }

template <typename T>
Status adasum_typed(T* x, const std::vector<int64_t>& counts, MPI_Comm comm, int rank, int size,
                    const std::function<Status()>& should_abort, bool* abandoned) {
  int levels = 0;
  while ((1 << levels) < size) ++levels;
  const std::vector<MPI_Comm>* comms = nullptr;
  HVD_RETURN_IF_ERROR(level_comms(comm, rank, levels, &comms));
  std::vector<int64_t> offsets(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  const int64_t total = offsets.back();
  // What the partner sends at each level (at most half of the buffer, rounded up), and the
  // per-tensor sums; both owned by shared pointers so that a given-up wait can keep them.
  auto other = std::make_shared<std::vector<T>>(static_cast<size_t>(total - total / 2));
  auto dots = std::make_shared<std::vector<double>>(3 * counts.size());
  std::vector<int64_t> seg_lo(static_cast<size_t>(levels)), seg_hi(static_cast<size_t>(levels));
  int64_t lo = 0, hi = total;
  for (int k = 0; k < levels; ++k) {
    const int partner = rank ^ (1 << k);
    const bool low = (rank & (1 << k)) == 0;
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t keep_lo = low ? lo : mid, keep_hi = low ? mid : hi;
    const int64_t give_lo = low ? mid : lo, give_hi = low ? hi : mid;
    const int64_t n = keep_hi - keep_lo;
    {
      RequestBatch batch(static_cast<size_t>(messages(n) + messages(give_hi - give_lo)),
                         &should_abort, abandoned);
      HVD_RETURN_IF_ERROR(post(&batch, false, other->data(), n, partner, kTagHalve, comm));
      HVD_RETURN_IF_ERROR(
          post(&batch, true, x + give_lo, give_hi - give_lo, partner, kTagHalve, comm));
      Status s = batch.wait();
      if (!s.ok()) {
        if (abandoned && *abandoned) keep_forever(other);
        return s;
      }
    }
    const T* mine = x + keep_lo;
    const T* theirs = other->data();
    const T* a = low ? mine : theirs;
    const T* b = low ? theirs : mine;
    std::fill(dots->begin(), dots->end(), 0.0);
    for_each_piece(offsets, keep_lo, keep_hi, [&](size_t i, int64_t s, int64_t c) {
      accumulate_dots(a + (s - keep_lo), b + (s - keep_lo), c, dots->data() + 3 * i);
    });
    MPI_Request req = MPI_REQUEST_NULL;
    HVD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, dots->data(), static_cast<int>(dots->size()),
                                 MPI_DOUBLE, MPI_SUM, (*comms)[static_cast<size_t>(k)], &req));
    HVD_RETURN_IF_ERROR(wait_request(&req, should_abort, dots));
    for_each_piece(offsets, keep_lo, keep_hi, [&](size_t i, int64_t s, int64_t c) {
      const double* d = dots->data() + 3 * i;
      combine(a + (s - keep_lo), b + (s - keep_lo), c, adasum_coefficients(d[0], d[1], d[2]),
              x + s);
    });
    seg_lo[static_cast<size_t>(k)] = lo;
    seg_hi[static_cast<size_t>(k)] = hi;
    lo = keep_lo;
    hi = keep_hi;
  }
  for (int k = levels - 1; k >= 0; --k) {
    const int partner = rank ^ (1 << k);
    const int64_t slo = seg_lo[static_cast<size_t>(k)], shi = seg_hi[static_cast<size_t>(k)];
    const int64_t mid = slo + (shi - slo) / 2;
    const bool low = (rank & (1 << k)) == 0;
    const int64_t their_lo = low ? mid : slo, their_hi = low ? shi : mid;
    RequestBatch batch(static_cast<size_t>(messages(hi - lo) + messages(their_hi - their_lo)),
                       &should_abort, abandoned);
    HVD_RETURN_IF_ERROR(
        post(&batch, false, x + their_lo, their_hi - their_lo, partner, kTagGather, comm));
    HVD_RETURN_IF_ERROR(post(&batch, true, x + lo, hi - lo, partner, kTagGather, comm));
    HVD_RETURN_IF_ERROR(batch.wait());
    lo = slo;
    hi = shi;
  }
  return Status::OK();
}

}  // namespace

AdasumCoefficients adasum_coefficients(double dot, double aa, double bb) {
  AdasumCoefficients c;
  if (aa > 0) c.a_coef = 1.0 - dot / (2.0 * aa);
  if (bb > 0) c.b_coef = 1.0 - dot / (2.0 * bb);
  return c;
}

bool adasum_dtype_supported(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

void adasum_pair(const void* a, void* b, int64_t n, DataType dtype) {
  auto pair = [n](const auto* x, auto* y) {
    double d[3] = {0, 0, 0};
    accumulate_dots(x, y, n, d);
    combine(x, y, n, adasum_coefficients(d[0], d[1], d[2]), y);
  };
  if (dtype == DataType::kFloat64) {
    pair(static_cast<const double*>(a), static_cast<double*>(b));
  } else if (dtype == DataType::kFloat32) {
    pair(static_cast<const float*>(a), static_cast<float*>(b));
  } else if (reduced_as_float(dtype)) {
    std::vector<float> fa(static_cast<size_t>(n)), fb(static_cast<size_t>(n));
    widen_to_float(a, dtype, n, 1.0, fa.data());
    widen_to_float(b, dtype, n, 1.0, fb.data());
    pair(fa.data(), fb.data());
    narrow_from_float(fb.data(), n, 1.0, dtype, b);
  }
}

Status adasum_allreduce(void* data, const std::vector<int64_t>& counts, DataType dtype,
                        MPI_Comm comm, const std::function<Status()>& should_abort,
                        bool* abandoned) {
  int size = 1, rank = 0;
  HVD_MPI_CHECK(MPI_Comm_size(comm, &size));
  HVD_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (!adasum_dtype_supported(dtype)) {
    return invalid_argument(std::string("Adasum reduces float16, bfloat16, float32 and float64 "
                                        "tensors, not ") +
                            dtype_name(dtype) + ": use op Sum or Average for this tensor");
  }
  if ((size & (size - 1)) != 0) {
    return invalid_argument("Adasum needs a power-of-two number of ranks, but this group has " +
                            std::to_string(size) +
                            ": run on 1, 2, 4, 8, ... ranks (or a process set of that size)");
  }
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) return invalid_argument("Adasum: negative element count " + std::to_string(c));
    total += c;
  }
  if (size == 1 || total == 0) return Status::OK();
  if (dtype == DataType::kFloat64) {
    return adasum_typed(static_cast<double*>(data), counts, comm, rank, size, should_abort,
                        abandoned);
  }
  if (dtype == DataType::kFloat32) {
    return adasum_typed(static_cast<float*>(data), counts, comm, rank, size, should_abort,
                        abandoned);
  }
  auto wide = std::make_shared<std::vector<float>>(static_cast<size_t>(total));
  widen_to_float(data, dtype, total, 1.0, wide->data());
  Status s = adasum_typed(wide->data(), counts, comm, rank, size, should_abort, abandoned);
  if (!s.ok()) {
    if (abandoned && *abandoned) keep_forever(wide);
    return s;
  }
  narrow_from_float(wide->data(), total, 1.0, dtype, data);
  return Status::OK();
}

}  // namespace hvd::ops
