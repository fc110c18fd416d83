# SPDX-License-Identifier: Apache-2.0
"""[python] op=hvd.Adasum against a NumPy reference of the recursive rule written here.

Adasum of two vectors is (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b (a zero vector has the
coefficient 1), applied over 2^k ranks pairwise: neighbours (0+1, 2+3, ...), then pairs of pairs.
Every rank builds every rank's input from a seed and computes the reference in long double; the
largest difference from it is printed per case (run pytest with -s to see it).
"""
import numpy as np
import pytest
import torch

import hvd.numpy as hvd
import hvd.torch as hvd_torch

R, N = hvd.rank(), hvd.size()
TOL = {"float64": 1e-12, "float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}
NUMPY_FLOATS = [np.float64, np.float32, np.float16]


def pair_rule(a, b):
    ab, aa, bb = np.dot(a, b), np.dot(a, a), np.dot(b, b)
    ca = 1 if aa == 0 else 1 - ab / (2 * aa)
    cb = 1 if bb == 0 else 1 - ab / (2 * bb)
    return ca * a + cb * b


def reference(vectors):
    """The recursive rule over len(vectors) (a power of two) ranks, in long double."""
    vs = [np.asarray(v, dtype=np.longdouble) for v in vectors]
    while len(vs) > 1:
        vs = [pair_rule(vs[i], vs[i + 1]) for i in range(0, len(vs), 2)]
    return vs[0]


def random_input(rank, n, seed, dtype):
    """Rank `rank`'s input of `n` elements, rounded to `dtype` (a numpy dtype or "bfloat16")."""
    x = np.random.default_rng([seed, rank]).standard_normal(n)
    if dtype == "bfloat16":
        return torch.from_numpy(x).to(torch.bfloat16).double().numpy()
    return x.astype(dtype).astype(np.float64)


def difference(got, want):
    """The largest |got - want| / max(1, |want|)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.size == 0:
        return 0.0
    assert np.all(np.isfinite(got)), got
    return float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))


def report(label, worst):
    print(f"[adasum np {N}] {label}: largest difference from the reference {worst:.3g}")


def name_of(dtype):
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


@pytest.mark.parametrize("dtype", NUMPY_FLOATS + ["bfloat16"], ids=name_of)
def test_adasum_matches_the_recursive_rule_for_random_vectors(dtype):
    label = name_of(dtype)
    worst = 0.0
    for seed, n in enumerate([1, 7, 1000, 50000]):
        mine = random_input(R, n, seed, dtype)
        want = reference([random_input(r, n, seed, dtype) for r in range(N)])
        if dtype == "bfloat16":
            got = hvd_torch.allreduce(torch.from_numpy(mine).to(torch.bfloat16),
                                      name=f"adasum.random.{label}.{n}", op=hvd.Adasum)
            assert got.dtype == torch.bfloat16
            got = got.double().numpy()
        else:
            got = hvd.allreduce(mine.astype(dtype), name=f"adasum.random.{label}.{n}",
                                op=hvd.Adasum)
            assert got.dtype == np.dtype(dtype)
        d = difference(got, want)
        assert d <= TOL[label], (n, d)
        worst = max(worst, d)
    report(f"random vectors, {label}", worst)


@pytest.mark.parametrize("dtype", NUMPY_FLOATS, ids=name_of)
def test_adasum_of_orthogonal_vectors_is_their_sum(dtype):
    def ortho(r):
        return np.where(np.arange(64) % N == r, np.arange(64) % 7 + 1.0, 0.0)
    got = hvd.allreduce(ortho(R).astype(dtype), name=f"adasum.ortho.{name_of(dtype)}",
                        op=hvd.Adasum)
    want = sum(ortho(r) for r in range(N))
    assert np.array_equal(got.astype(np.float64), want), (got, want)
    assert difference(got, reference([ortho(r) for r in range(N)])) == 0.0
    report(f"orthogonal vectors, {name_of(dtype)} (= the sum)", difference(got, want))


@pytest.mark.parametrize("dtype", NUMPY_FLOATS, ids=name_of)
def test_adasum_of_parallel_vectors_is_their_average(dtype):
    v = np.arange(-5, 5, dtype=np.float64)
    same = hvd.allreduce(v.astype(dtype), name=f"adasum.same.{name_of(dtype)}", op=hvd.Adasum)
    assert np.array_equal(same.astype(np.float64), v), same  # equal vectors: the vector
    scaled = hvd.allreduce(((R + 1) * v).astype(dtype), name=f"adasum.scaled.{name_of(dtype)}",
                           op=hvd.Adasum)
    want = (N + 1) / 2 * v
    d = difference(scaled, want)
    assert d <= TOL[name_of(dtype)], (scaled, want)
    assert difference(reference([(r + 1) * v for r in range(N)]), want) < 1e-15
    report(f"parallel vectors (r + 1) v, {name_of(dtype)} (= the average)", d)


def test_adasum_applies_prescale_and_postscale_as_sum_does():
    v = np.linspace(-1, 1, 9)
    got = hvd.allreduce(v * (R + 1), name="adasum.scaled.factors", op=hvd.Adasum,
                        prescale_factor=2.0, postscale_factor=0.25)
    np.testing.assert_allclose(got, 0.5 * (N + 1) / 2 * v, rtol=1e-12, atol=1e-15)


def test_adasum_of_float16_extremes_has_no_inf_or_nan():
    # Equal vectors near float16's largest value: the sum would be inf, Adasum is the vector.
    big = np.where(np.arange(100) % 2 == 0, 65504.0, -60000.0).astype(np.float16)
    got = hvd.allreduce(big, name="adasum.f16.big", op=hvd.Adasum)
    assert np.all(np.isfinite(got))
    d = difference(got.astype(np.float64) / 65504.0, big.astype(np.float64) / 65504.0)
    assert d <= TOL["float16"]
    report("float16 equal vectors near 65504 (relative)", d)
    # Random vectors of magnitude 8e3: each rank's squared norm (~2e10) is far beyond float16.
    xs = [(random_input(r, 300, 9, np.float64) * 8e3).astype(np.float16).astype(np.float64)
          for r in range(N)]
    want = reference(xs)
    assert np.all(np.abs(want) < 65504), "the seed gives a result float16 can hold"
    got = hvd.allreduce(xs[R].astype(np.float16), name="adasum.f16.large", op=hvd.Adasum)
    d = difference(got.astype(np.float64) / 8e3, want / 8e3)
    assert d <= TOL["float16"], d
    report("float16 random vectors of magnitude 8e3 (relative to 8e3)", d)
    # Subnormal float16 values (6e-8 steps): parallel, so the average, not flushed to zero.
    tiny = (np.arange(30) % 3 * 6e-8 * (R + 1)).astype(np.float16)
    got = hvd.allreduce(tiny, name="adasum.f16.tiny", op=hvd.Adasum)
    want = reference([(np.arange(30) % 3 * 6e-8 * (r + 1)).astype(np.float16) for r in range(N)])
    assert np.all(np.isfinite(got))
    d = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    assert d <= 6e-8, d  # one float16 step down there
    report("float16 subnormals (absolute)", d)
    # bfloat16 at 1e38: the squared norms exceed float32; the float64 sums hold them.
    b = torch.full((16,), 1e38, dtype=torch.bfloat16)
    got = hvd_torch.allreduce(b, name="adasum.bf16.big", op=hvd.Adasum)
    assert torch.equal(got, b), got


def test_grouped_adasum_gives_each_tensor_its_own_dot_products():
    # One orthogonal, one parallel and two random tensors of different sizes in one group.
    sizes = [40, 10, 333, 1]

    def parts(r):
        return [np.where(np.arange(40) % N == r, 1.0 + np.arange(40) % 3, 0.0),
                (r + 1) * np.arange(10, dtype=np.float64),
                random_input(r, 333, 21, np.float64), random_input(r, 1, 22, np.float64)]
    for dtype in NUMPY_FLOATS:
        mine = [p.astype(dtype) for p in parts(R)]
        got = hvd.grouped_allreduce(mine, name=f"adasum.grouped.{name_of(dtype)}", op=hvd.Adasum)
        everyone = [[p.astype(dtype).astype(np.float64) for p in parts(r)] for r in range(N)]
        worst = 0.0
        for k, size in enumerate(sizes):
            assert got[k].shape == (size,)
            d = difference(got[k], reference([e[k] for e in everyone]))
            assert d <= TOL[name_of(dtype)], (k, d)
            worst = max(worst, d)
        report(f"grouped_allreduce of 4 tensors, {name_of(dtype)}", worst)


def test_an_async_burst_of_adasum_tensors_fuses_and_matches():
    """Twenty allreduce_async calls of different sizes in flight at once (fused into a few
    rounds), numpy and torch, float32."""
    sizes = [1, 5, 64, 1000, 3, 4096, 17, 2, 100, 777] * 2
    handles, wants = [], []
    for i, n in enumerate(sizes):
        x = random_input(R, n, 100 + i, np.float32).astype(np.float32)
        wants.append(reference([random_input(r, n, 100 + i, np.float32) for r in range(N)]))
        if i % 2:
            handles.append(hvd_torch.allreduce_async(torch.from_numpy(x),
                                                     name=f"adasum.burst.{i}", op=hvd.Adasum))
        else:
            handles.append(hvd.allreduce_async(x, name=f"adasum.burst.{i}", op=hvd.Adasum))
    worst = 0.0
    for i, (h, want) in enumerate(zip(handles, wants)):
        got = hvd_torch.synchronize(h).numpy() if i % 2 else hvd.synchronize(h)
        d = difference(got, want)
        assert d <= TOL["float32"], (i, d)
        worst = max(worst, d)
    report("async burst of 20 float32 tensors", worst)
    # In place, grouped and async: the same rule.
    ys = [torch.from_numpy(random_input(R, n, 200 + n, np.float32).astype(np.float32))
          for n in (3, 300)]
    h = hvd_torch.grouped_allreduce_async_(ys, name="adasum.grouped.inplace", op=hvd.Adasum)
    hvd_torch.synchronize(h)
    for y, n in zip(ys, (3, 300)):
        want = reference([random_input(r, n, 200 + n, np.float32) for r in range(N)])
        assert difference(y.numpy(), want) <= TOL["float32"]


def test_adasum_refuses_integer_tensors_on_every_rank():
    with pytest.raises(hvd.HorovodInternalError, match="Adasum reduces float16"):
        hvd.allreduce(np.ones(3, np.int64), name="adasum.int", op=hvd.Adasum)
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.reducescatter(np.ones((N, 2)), name="adasum.rs", op=hvd.Adasum)


@pytest.mark.ranks(4, "process sets of 2 and 3 ranks")
def test_adasum_on_a_process_set_of_two_and_a_refusal_on_a_set_of_three():
    pair = hvd.add_process_set([1, 3])
    three = hvd.add_process_set([0, 1, 2])
    try:
        if R in (1, 3):
            got = hvd.allreduce(random_input(R, 500, 31, np.float64), name="adasum.set.pair",
                                op=hvd.Adasum, process_set=pair)
            want = reference([random_input(r, 500, 31, np.float64) for r in (1, 3)])
            d = difference(got, want)
            assert d <= TOL["float64"], d
            report("process set [1, 3] at np 4, float64", d)
        if R in (0, 1, 2):
            with pytest.raises(hvd.HorovodInternalError, match="power-of-two number of ranks"):
                hvd.allreduce(np.ones(4), name="adasum.set.three", op=hvd.Adasum,
                              process_set=three)
            # The set goes on with other ops.
            got = hvd.allreduce(np.ones(4), name="adasum.set.three.sum", op=hvd.Sum,
                                process_set=three)
            assert np.array_equal(got, np.full(4, 3.0))
    finally:
        hvd.barrier()
        hvd.remove_process_set(three)
        hvd.remove_process_set(pair)


def test_adasum_gives_every_rank_the_same_bits():
    """np 1: the identity; otherwise every rank ends with the same result, bit for bit."""
    x = random_input(R, 2049, 41, np.float32).astype(np.float32)
    got = hvd.allreduce(x, name="adasum.same.everywhere", op=hvd.Adasum)
    if N == 1:
        assert np.array_equal(got, x)
    everyone = hvd.allgather(got[None, :], name="adasum.same.everywhere.gather")
    assert all(np.array_equal(everyone[0], row) for row in everyone)
