# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.numpy: the collectives on numpy arrays.

Every rank builds every rank's input from a formula, so each computes the expected result on
its own and compares.
"""
import math
import time
import warnings

import numpy as np
import pytest

import hvd.numpy as hvd
import hvd.torch as hvd_torch
from hvd import _core

R, N = hvd.rank(), hvd.size()

INTS = [np.uint8, np.int8, np.int16, np.int32, np.int64]
FLOATS = [np.float16, np.float32, np.float64]
REDUCIBLE = INTS + FLOATS
ALL = REDUCIBLE + [np.bool_]
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
       "Product": hvd.Product}
TOL = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-12}


def ids(t):
    return np.dtype(t).name


def is_float(dtype):
    return np.issubdtype(dtype, np.floating)


def check(out, expected, dtype):
    exp = np.asarray(expected, dtype=np.float64)
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.dtype(dtype), (out.dtype, dtype)
    assert out.shape == exp.shape, (out.shape, exp.shape)
    if is_float(dtype):
        np.testing.assert_allclose(out.astype(np.float64), exp, rtol=TOL[dtype], atol=TOL[dtype])
    elif dtype == np.bool_:
        np.testing.assert_array_equal(out, exp.astype(bool))
    else:
        np.testing.assert_array_equal(out.astype(np.int64), exp.astype(np.int64))


def value(q, i, dtype, op):
    if op == hvd.Product:
        return 1 + (q + i) % 2
    v = (q + 1) * (i % 3 + 1)
    if dtype != np.uint8 and i % 2:
        v = -v
    return v * 0.5 if is_float(dtype) else v


def make(q, dtype, op, shape=(4, 3)):
    n = math.prod(shape)
    return np.array([value(q, i, dtype, op) for i in range(n)], dtype=dtype).reshape(shape)


def expected(dtype, op, shape=(4, 3), pre=1.0, post=1.0):
    out = []
    for i in range(math.prod(shape)):
        vals = [value(q, i, dtype, op) * pre for q in range(N)]
        if op == hvd.Sum:
            v = sum(vals)
        elif op == hvd.Average:
            v = sum(vals) / N if is_float(dtype) else int(sum(vals) / N)  # C++ truncation
        elif op == hvd.Min:
            v = min(vals)
        elif op == hvd.Max:
            v = max(vals)
        else:
            v = math.prod(vals)
        out.append(v * post)
    return np.array(out, dtype=np.float64).reshape(shape)


def test_reexports_share_the_runtime_with_hvd_torch():
    assert hvd.is_initialized()
    assert (hvd.rank(), hvd.size()) == (hvd_torch.rank(), hvd_torch.size())
    assert (hvd.local_rank(), hvd.local_size()) == (hvd_torch.local_rank(), hvd_torch.local_size())
    assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1)
    assert (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product, hvd.Adasum) == (
        hvd_torch.Sum, hvd_torch.Average, hvd_torch.Min, hvd_torch.Max, hvd_torch.Product,
        hvd_torch.Adasum)
    assert hvd.HorovodInternalError is hvd_torch.HorovodInternalError is hvd.HvdInternalError
    assert hvd.global_process_set is hvd_torch.global_process_set
    assert hvd.mpi_built() is True and hvd.gloo_built() is False
    for name in hvd.__all__:
        assert hasattr(hvd, name), name


@pytest.mark.parametrize("op", list(OPS), ids=str)
@pytest.mark.parametrize("dtype", REDUCIBLE, ids=ids)
def test_allreduce_every_dtype_and_op_in_all_four_forms(dtype, op):
    op = OPS[op]
    x = make(R, dtype, op)
    before = x.copy()
    exp = expected(dtype, op)
    check(hvd.allreduce(x, op=op), exp, dtype)
    np.testing.assert_array_equal(x, before)
    check(hvd.synchronize(hvd.allreduce_async(x, op=op, name=f"np.ar.{ids(dtype)}.{op}")), exp,
          dtype)
    y = x.copy()
    assert hvd.allreduce_(y, op=op) is y
    check(y, exp, dtype)
    y = x.copy()
    assert hvd.synchronize(hvd.allreduce_async_(y, op=op)) is y
    check(y, exp, dtype)


def test_allreduce_defaults_scales_and_deprecated_average():
    x = make(R, np.float64, hvd.Sum)
    check(hvd.allreduce(x), expected(np.float64, hvd.Average), np.float64)
    check(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0),
          expected(np.float64, hvd.Sum, pre=0.5, post=3.0), np.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(hvd.allreduce(x, average=False), expected(np.float64, hvd.Sum), np.float64)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    # Lists and scalars are accepted as inputs.
    check(hvd.allreduce([R, 1], op=hvd.Sum), [N * (N - 1) / 2, N], np.int64)
    s = hvd.allreduce(np.float32(R + 1), op=hvd.Max)
    assert s.shape == () and s == N


def test_in_place_forms_write_back_into_noncontiguous_arrays():
    base = np.arange(24, dtype=np.float32).reshape(6, 4) + 100 * R
    view = base[::2].T
    assert not view.flags.c_contiguous
    exp = sum((np.arange(24, dtype=np.float64).reshape(6, 4) + 100 * q)[::2].T for q in range(N))
    untouched = base[1::2].copy()
    assert hvd.allreduce_(view, op=hvd.Sum) is view
    check(base[::2].T, exp, np.float32)
    np.testing.assert_array_equal(base[1::2], untouched)
    check(hvd.allreduce(base[1::2].T, op=hvd.Max), (untouched + 100 * (N - 1 - R)).T,
          np.float32)
    b2 = np.arange(24, dtype=np.float32).reshape(6, 4) + 100 * R
    hvd.broadcast_(b2[:, ::2], N - 1)
    check(b2[:, ::2], (np.arange(24).reshape(6, 4) + 100 * (N - 1))[:, ::2], np.float32)
    check(b2[:, 1::2], (np.arange(24).reshape(6, 4) + 100 * R)[:, 1::2], np.float32)
    b3 = np.arange(24, dtype=np.float32).reshape(6, 4) + 100 * R
    res = hvd.grouped_allreduce_([b3[:, ::2], b3[:, 1::2]], op=hvd.Sum)
    assert res[0].base is b3
    check(b3, sum(np.arange(24).reshape(6, 4) + 100 * q for q in range(N)), np.float32)


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float64], ids=ids)
def test_grouped_allreduce_in_all_four_forms(dtype):
    shapes = [(4, 3), (5,), ()]
    xs = [make(R, dtype, hvd.Sum, s) for s in shapes]
    exps = [expected(dtype, hvd.Sum, s) for s in shapes]
    for outs in (hvd.grouped_allreduce(xs, op=hvd.Sum),
                 hvd.synchronize(hvd.grouped_allreduce_async(xs, op=hvd.Sum))):
        assert len(outs) == 3
        for o, e in zip(outs, exps):
            check(o, e, dtype)
    ys = [x.copy() for x in xs]
    res = hvd.grouped_allreduce_(ys, op=hvd.Sum)
    assert all(a is b for a, b in zip(res, ys))
    for y, e in zip(ys, exps):
        check(y, e, dtype)
    ys = [x.copy() for x in xs]
    hvd.synchronize(hvd.grouped_allreduce_async_(ys, op=hvd.Sum))
    for y, e in zip(ys, exps):
        check(y, e, dtype)


def ag_make(q, dtype, rows=None):
    rows = (2 * q) % 3 if rows is None else rows  # ranks 0 and 3 send no rows
    v = (np.arange(rows * 2, dtype=np.int64).reshape(rows, 2) + 13 * q) % 50
    return (v % 2 == 0) if dtype == np.bool_ else v.astype(dtype)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_allgather_concatenates_ragged_rows_without_copying_the_output(dtype):
    exp = np.concatenate([ag_make(q, dtype) for q in range(N)])
    out = hvd.allgather(ag_make(R, dtype))
    assert out.dtype == np.dtype(dtype) and out.shape == exp.shape
    np.testing.assert_array_equal(out, exp)
    assert not out.flags.owndata and out.base is not None  # a view of hvd's memory
    out2 = hvd.synchronize(hvd.allgather_async(ag_make(R, dtype), name=f"np.ag.{ids(dtype)}"))
    np.testing.assert_array_equal(out2, exp)
    if out.size:
        out[...] = out2[0]  # writable, and not shared with another call's output
        np.testing.assert_array_equal(out2, exp)


def test_grouped_collectives_of_an_empty_list_fail_on_every_rank():
    for call in (hvd.grouped_allreduce, hvd.grouped_allreduce_, hvd.grouped_allgather,
                 hvd.grouped_reducescatter):
        with pytest.raises(ValueError, match="an empty list of tensors"):
            call([])


def test_grouped_allgather():
    xs = [ag_make(R, np.float32), ag_make(R, np.int16, rows=R + 1), ag_make(R, np.bool_, rows=0)]
    outs = hvd.grouped_allgather(xs)
    exps = [np.concatenate([ag_make(q, np.float32) for q in range(N)]),
            np.concatenate([ag_make(q, np.int16, rows=q + 1) for q in range(N)]),
            np.zeros((0, 2), dtype=bool)]
    for o, e in zip(outs, exps):
        assert o.dtype == e.dtype and o.shape == e.shape
        np.testing.assert_array_equal(o, e)


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float16, np.float32, np.bool_],
                         ids=ids)
def test_broadcast_from_every_root_in_all_four_forms(dtype):
    def make_b(q):
        v = (np.arange(6).reshape(2, 3) * 3 + 7 * q) % 60
        return (v % 2 == 1) if dtype == np.bool_ else v.astype(dtype)
    for root in range(N):
        x = make_b(R)
        out = hvd.broadcast(x, root)
        np.testing.assert_array_equal(out, make_b(root))
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(x, make_b(R))
        np.testing.assert_array_equal(hvd.synchronize(hvd.broadcast_async(x, root)), make_b(root))
        y = x.copy()
        assert hvd.broadcast_(y, root) is y
        np.testing.assert_array_equal(y, make_b(root))
        y = x.copy()
        assert hvd.synchronize(hvd.broadcast_async_(y, root_rank=root)) is y
        np.testing.assert_array_equal(y, make_b(root))


def split(q, j):
    return (q + j) % 3


def a2a_rows(q, j, dtype):
    v = np.array([q * 16 + j * 4 + m for m in range(split(q, j))], dtype=np.int64)
    return (v % 2 == 1) if dtype == np.bool_ else v.astype(dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.bool_], ids=ids)
def test_alltoall_with_and_without_splits(dtype):
    x = np.concatenate([a2a_rows(R, j, dtype) for j in range(N)])
    exp = np.concatenate([a2a_rows(q, R, dtype) for q in range(N)])
    out, received = hvd.alltoall(x, splits=[split(R, j) for j in range(N)])
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, exp)
    assert received.dtype == np.int32 and received.tolist() == [split(q, R) for q in range(N)]
    out, received = hvd.synchronize(hvd.alltoall_async(
        x, np.array([split(R, j) for j in range(N)], dtype=np.int32)))
    np.testing.assert_array_equal(out, exp)
    even = np.repeat(np.arange(N) + 10 * R, 2).astype(dtype)
    out = hvd.alltoall(even)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, np.repeat(np.arange(N) * 10 + R, 2).astype(dtype))


def rs_make(q, dtype, rows):
    v = np.array([[(q + 1) + i + j for j in range(2)] for i in range(rows)], dtype=np.float64)
    return (v * 0.5 if is_float(dtype) else v).astype(dtype).reshape(rows, 2)


def rs_expected(dtype, op, rows):
    base, extra = divmod(rows, N)
    start, count = R * base + min(R, extra), base + (1 if R < extra else 0)
    total = sum(rs_make(q, dtype, rows).astype(np.float64) for q in range(N))
    if op == hvd.Average:
        total = total / N if is_float(dtype) else np.trunc(total / N)
    return total[start:start + count]


@pytest.mark.parametrize("op", ["Sum", "Average"], ids=str)
@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float16, np.float64], ids=ids)
def test_reducescatter_gives_each_rank_its_uneven_slice(dtype, op):
    op = OPS[op]
    rows = 2 * N + 1
    x = rs_make(R, dtype, rows)
    check(hvd.reducescatter(x, op=op), rs_expected(dtype, op, rows), dtype)
    check(hvd.synchronize(hvd.reducescatter_async(x, op=op)), rs_expected(dtype, op, rows), dtype)
    outs = hvd.grouped_reducescatter([x, rs_make(R, dtype, N - 1)], op=op)
    check(outs[0], rs_expected(dtype, op, rows), dtype)
    check(outs[1], rs_expected(dtype, op, N - 1), dtype)


def test_barrier_poll_join_and_process_sets():
    hvd.barrier()
    h = hvd.allreduce_async(np.full(3, R + 1.0), op=hvd.Sum)
    while not hvd.poll(h):
        pass
    check(hvd.synchronize(h), [N * (N + 1) / 2] * 3, np.float64)
    if R == 0:
        last = hvd.join()
    else:
        check(hvd.allreduce(np.full(2, float(R)), name="np.join.avg"),
              [sum(range(1, N)) / N] * 2, np.float64)
        if R == 1:
            time.sleep(0.3)  # the last of ranks 1..N-1 to join, not the highest
        last = hvd.join()
    assert last == (1 if N > 1 else 0)
    check(hvd.allgather(np.array([last])), [last] * N, np.int64)
    if N == 1:
        return  # [0] is the global set, which add_process_set refuses to add again
    ps = hvd.add_process_set([0])
    try:
        if R == 0:
            check(hvd.allreduce(np.ones(2), op=hvd.Sum, process_set=ps), [1, 1], np.float64)
            check(hvd.allgather(np.ones((1, 2)), process_set=ps), [[1, 1]], np.float64)
        else:
            with pytest.raises(hvd.HorovodInternalError, match="not a member"):
                hvd.allreduce(np.ones(2), process_set=ps)
    finally:
        hvd.remove_process_set(ps)


def test_errors():
    if N > 1:  # shapes that differ between ranks
        with pytest.raises(hvd.HorovodInternalError) as info:
            hvd.allreduce(np.ones(R + 1, np.float32), name="np.err.shape")
        assert "'np.err.shape'" in str(info.value) and "rank 0" in str(info.value)
        with pytest.raises(hvd.HorovodInternalError) as info:
            hvd.allgather(np.ones((1, R + 1), np.float32), name="np.err.gather")
        assert "'np.err.gather'" in str(info.value)
    for bad in (np.ones(2, np.uint16), np.ones(2, np.complex64), np.ones(2, ">f4"),
                np.array(["a"])):
        with pytest.raises(ValueError, match="not supported"):
            hvd.allreduce(bad)
    ro = np.ones(2)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        hvd.allreduce_(ro)
    with pytest.raises(TypeError, match="numpy array"):
        hvd.broadcast_([1.0, 2.0], 0)
    check(hvd.allreduce(np.ones(2), op=hvd.Adasum), [1, 1], np.float64)  # equal: the vector
    with pytest.raises(hvd.HorovodInternalError, match="Adasum reduces float16"):
        hvd.allreduce(np.ones(2, np.int32), op=hvd.Adasum)
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.reducescatter(np.ones(2), op=hvd.Adasum)
    with pytest.raises(ValueError, match="Sum or Average"):
        hvd.reducescatter(np.ones(2), op=hvd.Min)
    with pytest.raises(hvd.HorovodInternalError, match="bool"):
        hvd.allreduce(np.ones(2, bool), op=hvd.Max)
    with pytest.raises(hvd.HorovodInternalError, match="root rank"):
        hvd.broadcast(np.ones(2), N)
    check(hvd.allreduce(np.ones(2), op=hvd.Sum), [N, N], np.float64)  # the job goes on


# (label, the correct call, the mistaken call on the last rank, what that rank raises, match)
def _ro():
    a = np.ones(4)
    a.flags.writeable = False
    return a


ONE_RANK_MISTAKES = [
    ("complex dtype", lambda n: hvd.allreduce(np.ones(4), name=n),
     lambda n: hvd.allreduce(np.ones(4, np.complex64), name=n), ValueError, "not supported"),
    ("big-endian", lambda n: hvd.allreduce(np.ones(4, np.float32), name=n),
     lambda n: hvd.allreduce(np.ones(4, ">f4"), name=n), ValueError, "not supported"),
    ("invalid op", lambda n: hvd.allreduce(np.ones(4), name=n, op=hvd.Sum),
     lambda n: hvd.allreduce(np.ones(4), name=n, op=99), ValueError, "unknown reduction op"),
    ("Adasum of ints", lambda n: hvd.allreduce(np.ones(4, np.int32), name=n, op=hvd.Sum),
     lambda n: hvd.allreduce(np.ones(4, np.int32), name=n, op=hvd.Adasum),
     hvd.HorovodInternalError, "Adasum"),
    ("not an array, in place", lambda n: hvd.broadcast_(np.ones(4), 0, name=n),
     lambda n: hvd.broadcast_([1.0] * 4, 0, name=n), TypeError, "numpy array"),
    ("read-only, in place", lambda n: hvd.allreduce_(np.ones(4), name=n),
     lambda n: hvd.allreduce_(_ro(), name=n), ValueError, "read-only"),
    ("a string array", lambda n: hvd.allgather(np.ones(4), name=n),
     lambda n: hvd.allgather(np.array(["a"]), name=n), ValueError, "not supported"),
    ("reducescatter op=Min", lambda n: hvd.reducescatter(np.ones((N, 2)), name=n, op=hvd.Sum),
     lambda n: hvd.reducescatter(np.ones((N, 2)), name=n, op=hvd.Min), ValueError,
     "Sum or Average"),
    ("a bad array in a group", lambda n: hvd.grouped_allreduce([np.ones(2), np.ones(2)], name=n),
     lambda n: hvd.grouped_allreduce([np.ones(2), np.ones(2, np.complex64)], name=n),
     ValueError, "not supported"),
    ("an empty grouped allgather", lambda n: hvd.grouped_allgather([np.ones(2)], name=n),
     lambda n: hvd.grouped_allgather([], name=n), ValueError, "empty list"),
    ("a bad alltoall split", lambda n: hvd.alltoall(np.ones(N), splits=[1] * N, name=n),
     lambda n: hvd.alltoall(np.ones(N), splits=[object()] * N, name=n), TypeError, ""),
]


@pytest.mark.parametrize("case", ONE_RANK_MISTAKES, ids=[m[0] for m in ONE_RANK_MISTAKES])
@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_a_mistake_on_one_rank_fails_every_rank_at_once(case, named):
    """hvd.numpy's own checks go through the negotiated refusal: the other ranks' calls fail at
    once naming the rank that made the mistake (the conftest deadline catches a rank left
    waiting)."""
    label, right, wrong, raised, match = case
    last = N - 1
    name = f"np.one.{label}" if named else None
    start = time.monotonic()
    if R == last:
        with pytest.raises(raised, match=match):
            wrong(name)
    else:
        with pytest.raises(hvd.HorovodInternalError) as e:
            right(name)
        assert f"refused on rank {last}" in str(e.value), str(e.value)
        assert match in str(e.value), str(e.value)
    took = hvd.allgather(np.array([time.monotonic() - start]))
    print(f"[numpy {label}{'' if named else ', unnamed'}] every rank failed within "
          f"{float(took.max()) * 1000:.1f} ms")
    check(hvd.allreduce(np.ones(2), op=hvd.Sum), [N, N], np.float64)  # the job goes on


def test_a_mistake_on_one_rank_fails_every_rank_for_a_name_the_cache_holds():
    """The others' call of a name negotiated before with the same parameters takes the response
    cache's path; the last rank's refusal of it still fails them at once."""
    last = N - 1
    for _ in range(2):
        hvd.allreduce(np.ones(4), name="np.one.cached", op=hvd.Sum)
    if R == last:
        with pytest.raises(ValueError, match="not supported"):
            hvd.allreduce(np.ones(4, np.complex64), name="np.one.cached", op=hvd.Sum)
    else:
        with pytest.raises(hvd.HorovodInternalError, match=f"refused on rank {last}"):
            hvd.allreduce(np.ones(4), name="np.one.cached", op=hvd.Sum)
    check(hvd.allreduce(np.ones(2), op=hvd.Sum), [N, N], np.float64)  # the job goes on


def test_dropped_handles_release_their_arrays():
    x = np.ones(64, np.float32)
    for _ in range(2000):
        hvd.allreduce_async(x)
        hvd.allgather_async(x)
    hvd.barrier()
    hvd.synchronize(hvd.allreduce_async(x, name="np.settle"))
    deadline = time.monotonic() + 10  # the last ones may finish just after the sync point
    while _core.graveyard_size() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert _core.graveyard_size() == 0
