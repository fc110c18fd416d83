# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.torch's collectives give Horovod 0.28's results.

Every rank builds every rank's input from a formula (value(q, ...) for rank q), so each rank
computes the expected result on its own, in plain Python, and compares.
"""
import math
import os
import time
import warnings

import pytest
import torch

import hvd.torch as hvd

R, N = hvd.rank(), hvd.size()

INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
REDUCIBLE = INTS + FLOATS
ALL = REDUCIBLE + [torch.bool]
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
       "Product": hvd.Product}
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-6, torch.float64: 1e-12}


def ids(x):
    return str(x).replace("torch.", "")


def assert_values(out, expected, dtype, shape=None):
    """`out` has `dtype`, `shape` and the values `expected` (nested lists or a tensor)."""
    exp = torch.as_tensor(expected, dtype=torch.float64)
    assert out.dtype == dtype, (out.dtype, dtype)
    assert tuple(out.shape) == tuple(shape if shape is not None else exp.shape)
    if dtype == torch.bool:
        assert torch.equal(out, exp.reshape(out.shape).bool())
    elif dtype.is_floating_point:
        tol = TOL[dtype]
        torch.testing.assert_close(out.double(), exp.reshape(out.shape), rtol=tol, atol=tol)
    else:
        assert torch.equal(out.long(), exp.reshape(out.shape).long()), (out, exp)


# ---- topology and build facts -----------------------------------------------------------

def test_topology_matches_the_launcher():
    env = os.environ
    assert hvd.is_initialized()
    assert hvd.rank() == int(env["OMPI_COMM_WORLD_RANK"])
    assert hvd.size() == int(env["OMPI_COMM_WORLD_SIZE"])
    assert hvd.local_rank() == int(env["OMPI_COMM_WORLD_LOCAL_RANK"])
    assert hvd.local_size() == int(env["OMPI_COMM_WORLD_LOCAL_SIZE"])
    # One host: every rank is local, one node.
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1
    assert hvd.is_homogeneous() is True
    ranks = hvd.allgather(torch.tensor([hvd.rank()])).tolist()
    assert ranks == list(range(N))


def test_build_facts_are_horovods_types():
    assert hvd.mpi_built() is True and hvd.mpi_enabled() is True
    assert hvd.gloo_built() is False and hvd.gloo_enabled() is False
    assert type(hvd.nccl_built()) is int
    assert hvd.ddl_built() is False and hvd.ccl_built() is False and hvd.rocm_built() is False
    assert type(hvd.cuda_built()) is bool
    assert type(hvd.mpi_threads_supported()) is bool
    assert hvd.HvdInternalError is hvd.HorovodInternalError
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert (hvd.Sum, hvd.Average) != (hvd.Average, hvd.Sum)
    assert len({hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product, hvd.Adasum}) == 6


def test_gpu_support_says_whether_the_gpu_module_loaded_and_nccl_built_is_its_version():
    g = hvd.gpu_support()
    assert set(g) == {"loaded", "module", "nccl_version", "cuda_runtime_version", "devices",
                      "reason"}
    assert hvd.nccl_built() == g["nccl_version"]
    assert hvd.cuda_built() == g["loaded"]
    if g["loaded"]:
        # NCCL 2.x: version code major*10000 + minor*100 + patch (2.28.9 -> 22809).
        assert 21000 <= hvd.nccl_built() < 30000, g
        assert g["module"].endswith("/libhvd_nccl.so"), g
        assert g["devices"] > 0 or "no usable CUDA device" in g["reason"], g
    else:
        assert hvd.nccl_built() == 0 and g["reason"], g


# ---- allreduce --------------------------------------------------------------------------

def ar_value(q, i, dtype, op):
    """Rank q's element i for an allreduce with `op`."""
    if op == hvd.Product:
        return 1 + (q + i) % 2
    v = (q + 1) * (i % 3 + 1)
    if dtype != torch.uint8 and i % 2:
        v = -v
    return v * 0.5 if dtype.is_floating_point else v


def ar_input(q, dtype, op, shape=(4, 3)):
    n = math.prod(shape)
    return torch.tensor([ar_value(q, i, dtype, op) for i in range(n)], dtype=dtype).reshape(shape)


def ar_expected(dtype, op, shape=(4, 3), ranks=None, pre=1.0, post=1.0):
    ranks = list(range(N)) if ranks is None else ranks
    out = []
    for i in range(math.prod(shape)):
        vals = [ar_value(q, i, dtype, op) * pre for q in ranks]
        if op == hvd.Sum:
            v = sum(vals)
        elif op == hvd.Average:
            s = sum(vals)
            v = s / len(ranks) if dtype.is_floating_point else int(s / len(ranks))  # trunc
        elif op == hvd.Min:
            v = min(vals)
        elif op == hvd.Max:
            v = max(vals)
        else:
            v = math.prod(vals)
        out.append(v * post)
    return torch.tensor(out, dtype=torch.float64).reshape(shape)


@pytest.mark.parametrize("op", list(OPS), ids=str)
@pytest.mark.parametrize("dtype", REDUCIBLE, ids=ids)
def test_allreduce_every_dtype_and_op_in_all_four_forms(dtype, op):
    op = OPS[op]
    x = ar_input(R, dtype, op)
    before = x.clone()
    exp = ar_expected(dtype, op)

    assert_values(hvd.allreduce(x, op=op), exp, dtype)
    assert torch.equal(x, before), "allreduce must not modify its input"

    y = x.clone()
    assert hvd.allreduce_(y, op=op, name=f"ar_.{dtype}.{op}") is y
    assert_values(y, exp, dtype)

    h = hvd.allreduce_async(x, op=op)
    assert_values(hvd.synchronize(h), exp, dtype)
    assert torch.equal(x, before)

    y = x.clone()
    h = hvd.allreduce_async_(y, op=op, name=f"ar_async_.{dtype}.{op}")
    assert hvd.synchronize(h) is y
    assert_values(y, exp, dtype)


def test_allreduce_defaults_to_average():
    x = ar_input(R, torch.float32, hvd.Average)
    assert_values(hvd.allreduce(x), ar_expected(torch.float32, hvd.Average), torch.float32)
    assert_values(hvd.synchronize(hvd.allreduce_async(x)),
                  ar_expected(torch.float32, hvd.Average), torch.float32)


def test_deprecated_average_argument_selects_average_or_sum_and_warns():
    x = ar_input(R, torch.float64, hvd.Sum)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        avg = hvd.allreduce(x, average=True)
        tot = hvd.allreduce(x, average=False)
        y = x.clone()
        hvd.allreduce_(y, average=False)
        g = hvd.grouped_allreduce([x], average=True)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert_values(avg, ar_expected(torch.float64, hvd.Average), torch.float64)
    assert_values(tot, ar_expected(torch.float64, hvd.Sum), torch.float64)
    assert_values(y, ar_expected(torch.float64, hvd.Sum), torch.float64)
    assert_values(g[0], ar_expected(torch.float64, hvd.Average), torch.float64)
    with pytest.raises(ValueError, match="supersedes"):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_adasum_runs_in_every_allreduce_form_and_reducescatter_refuses_it():
    # Every rank holds the same vector: its Adasum is that vector (test_adasum.py has the rest).
    x = torch.tensor([1.0, -2.0])
    for result in (lambda: hvd.allreduce(x, op=hvd.Adasum),
                   lambda: hvd.synchronize(hvd.allreduce_async(x, op=hvd.Adasum)),
                   lambda: hvd.allreduce_(x.clone(), op=hvd.Adasum),
                   lambda: hvd.synchronize(hvd.allreduce_async_(x.clone(), op=hvd.Adasum)),
                   lambda: hvd.grouped_allreduce([x], op=hvd.Adasum)[0],
                   lambda: hvd.grouped_allreduce_([x.clone()], op=hvd.Adasum)[0]):
        assert_values(result(), [1.0, -2.0], torch.float32)
    for call in (lambda: hvd.reducescatter(x, op=hvd.Adasum),
                 lambda: hvd.grouped_reducescatter([x], op=hvd.Adasum)):
        with pytest.raises(NotImplementedError, match="Adasum"):
            call()
    with pytest.raises(ValueError, match="unknown reduction op"):
        hvd.allreduce(x, op=17)
    # Nothing was submitted: the next collective runs.
    assert_values(hvd.allreduce(x, op=hvd.Sum), [N, -2 * N], torch.float32)


@pytest.mark.parametrize("op", ["Sum", "Average"], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_allreduce_applies_prescale_and_postscale(dtype, op):
    op = OPS[op]
    x = ar_input(R, dtype, op)
    exp = ar_expected(dtype, op, pre=0.5, post=3.0)
    assert_values(hvd.allreduce(x, op=op, prescale_factor=0.5, postscale_factor=3.0), exp, dtype)
    y = x.clone()
    hvd.synchronize(hvd.allreduce_async_(y, op=op, prescale_factor=0.5, postscale_factor=3.0))
    assert_values(y, exp, dtype)
    g = hvd.grouped_allreduce([x, x[0]], op=op, prescale_factor=0.5, postscale_factor=3.0)
    assert_values(g[0], exp, dtype)
    assert_values(g[1], exp[0], dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=ids)
def test_allreduce_scales_integers_by_integer_factors_exactly(dtype):
    x = ar_input(R, dtype, hvd.Sum)
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2, postscale_factor=3)
    assert_values(out, ar_expected(dtype, hvd.Sum, pre=2, post=3), dtype)


def test_allreduce_of_scalars_and_empty_tensors():
    s = hvd.allreduce(torch.tensor(float(R + 1)), op=hvd.Sum)
    assert s.shape == () and s.item() == N * (N + 1) / 2
    e = hvd.allreduce(torch.ones(0, 3), op=hvd.Sum)
    assert e.shape == (0, 3)
    y = torch.tensor(R + 1, dtype=torch.int64)
    hvd.allreduce_(y, op=hvd.Max)
    assert y.item() == N


def noncontiguous(q, dtype=torch.float32):
    """Rank q's (6, 4) base and its (4, 3) non-contiguous view (every other column, transposed)."""
    base = (torch.arange(24, dtype=torch.float64).reshape(6, 4) + 100 * q).to(dtype)
    return base, base[::2].t()


def test_allreduce_reads_and_writes_noncontiguous_tensors():
    base, view = noncontiguous(R)
    assert not view.is_contiguous()
    exp = sum(noncontiguous(q, torch.float64)[1] for q in range(N))
    out = hvd.allreduce(view, op=hvd.Sum)
    assert_values(out, exp, torch.float32)
    untouched = base[1::2].clone()
    assert hvd.allreduce_(view, op=hvd.Sum) is view
    assert_values(view, exp, torch.float32)
    assert_values(base[::2].t(), exp, torch.float32)  # written through to the base
    assert torch.equal(base[1::2], untouched)           # and nowhere else
    base, view = noncontiguous(R)
    hvd.synchronize(hvd.allreduce_async_(view, op=hvd.Sum))
    assert_values(base[::2].t(), exp, torch.float32)
    base, view = noncontiguous(R)
    hvd.grouped_allreduce_([view, base[1::2]], op=hvd.Sum)
    assert_values(base[::2].t(), exp, torch.float32)
    assert_values(base[1::2], sum(noncontiguous(q, torch.float64)[0][1::2] for q in range(N)),
                  torch.float32)


def test_bool_cannot_be_reduced():
    with pytest.raises(hvd.HorovodInternalError, match="bool"):
        hvd.allreduce(torch.tensor([True, False]), op=hvd.Max)
    assert_values(hvd.allreduce(torch.ones(1), op=hvd.Sum), [N], torch.float32)


# ---- grouped allreduce ------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Sum", "Average", "Max"], ids=str)
@pytest.mark.parametrize("dtype", REDUCIBLE, ids=ids)
def test_grouped_allreduce_in_all_four_forms(dtype, op):
    op = OPS[op]
    shapes = [(4, 3), (5,), (1, 2, 2)]
    xs = [ar_input(R, dtype, op, s) for s in shapes]
    exps = [ar_expected(dtype, op, s) for s in shapes]
    before = [x.clone() for x in xs]

    outs = hvd.grouped_allreduce(xs, op=op)
    assert isinstance(outs, list) and len(outs) == 3
    for o, e in zip(outs, exps):
        assert_values(o, e, dtype)
    assert all(torch.equal(x, b) for x, b in zip(xs, before))

    outs = hvd.synchronize(hvd.grouped_allreduce_async(xs, op=op, name=f"g.{dtype}.{op}"))
    for o, e in zip(outs, exps):
        assert_values(o, e, dtype)

    ys = [x.clone() for x in xs]
    res = hvd.grouped_allreduce_(ys, op=op)
    assert all(a is b for a, b in zip(res, ys))
    for y, e in zip(ys, exps):
        assert_values(y, e, dtype)

    ys = [x.clone() for x in xs]
    hvd.synchronize(hvd.grouped_allreduce_async_(ys, op=op))
    for y, e in zip(ys, exps):
        assert_values(y, e, dtype)


def test_grouped_allreduce_mixes_dtypes():
    a = ar_input(R, torch.float32, hvd.Sum)
    b = ar_input(R, torch.int16, hvd.Sum, (3,))
    oa, ob = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    assert_values(oa, ar_expected(torch.float32, hvd.Sum), torch.float32)
    assert_values(ob, ar_expected(torch.int16, hvd.Sum, (3,)), torch.int16)


def test_grouped_collectives_of_an_empty_list_fail_on_every_rank():
    # As Horovod (which raises for an empty list); negotiated, so one rank's empty list fails
    # the other ranks' calls too (test_one_rank_mistakes.py).
    for call in (hvd.grouped_allreduce, hvd.grouped_allreduce_, hvd.grouped_allgather,
                 hvd.grouped_reducescatter):
        with pytest.raises(ValueError, match="an empty list of tensors"):
            call([])
    assert_values(hvd.allreduce(torch.ones(1), op=hvd.Sum), [N], torch.float32)


# ---- allgather --------------------------------------------------------------------------

def ag_rows(q):
    return (2 * q) % 3  # ranks 0 and 3 send no rows


def ag_input(q, dtype, rows=None, trailing=(2, 3)):
    rows = ag_rows(q) if rows is None else rows
    idx = torch.arange(rows * math.prod(trailing), dtype=torch.int64).reshape(rows, *trailing)
    v = (idx + 13 * q) % 50
    if dtype == torch.bool:
        return (v % 2 == 0)
    return v.to(dtype)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_allgather_concatenates_ragged_rows_in_rank_order(dtype):
    x = ag_input(R, dtype)
    exp = torch.cat([ag_input(q, dtype) for q in range(N)])
    out = hvd.allgather(x)
    assert out.dtype == dtype and torch.equal(out, exp)
    out = hvd.synchronize(hvd.allgather_async(x, name=f"ag.{dtype}"))
    assert out.dtype == dtype and torch.equal(out, exp)


def test_allgather_of_zero_rows_everywhere_and_noncontiguous_inputs():
    out = hvd.allgather(torch.ones(0, 4))
    assert out.shape == (0, 4)
    base, view = noncontiguous(R)
    out = hvd.allgather(view)
    assert torch.equal(out, torch.cat([noncontiguous(q)[1] for q in range(N)]))


def test_grouped_allgather_returns_one_output_per_tensor():
    xs = [ag_input(R, torch.float32), ag_input(R, torch.int8, rows=R + 1, trailing=(1,)),
          ag_input(R, torch.bool, rows=1, trailing=(2,))]
    exps = [torch.cat([ag_input(q, torch.float32) for q in range(N)]),
            torch.cat([ag_input(q, torch.int8, rows=q + 1, trailing=(1,)) for q in range(N)]),
            torch.cat([ag_input(q, torch.bool, rows=1, trailing=(2,)) for q in range(N)])]
    for outs in (hvd.grouped_allgather(xs),
                 hvd.synchronize(hvd.grouped_allgather_async(xs, name="gag"))):
        assert isinstance(outs, list) and len(outs) == 3
        for o, e in zip(outs, exps):
            assert o.dtype == e.dtype and torch.equal(o, e)


def test_allgather_outputs_are_independent_writable_tensors():
    a = hvd.allgather(torch.ones(1, 2) * R)
    b = hvd.allgather(torch.ones(1, 2) * R)
    a.add_(100)
    assert torch.equal(b, torch.arange(N, dtype=torch.float32).repeat_interleave(2).view(N, 2))


# ---- broadcast --------------------------------------------------------------------------

def bc_input(q, dtype):
    v = (torch.arange(6, dtype=torch.int64).reshape(2, 3) * 3 + 7 * q) % 60
    return (v % 2 == 1) if dtype == torch.bool else v.to(dtype)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_broadcast_from_every_root_in_all_four_forms(dtype):
    for root in range(N):
        x = bc_input(R, dtype)
        exp = bc_input(root, dtype)
        out = hvd.broadcast(x, root)
        assert out.dtype == dtype and torch.equal(out, exp)
        assert torch.equal(x, bc_input(R, dtype)), "broadcast must not modify its input"
        out = hvd.synchronize(hvd.broadcast_async(x, root_rank=root, name=f"bc.{dtype}.{root}"))
        assert torch.equal(out, exp)
        y = x.clone()
        assert hvd.broadcast_(y, root) is y and torch.equal(y, exp)
        y = x.clone()
        assert hvd.synchronize(hvd.broadcast_async_(y, root)) is y and torch.equal(y, exp)


def test_broadcast_into_a_noncontiguous_tensor():
    base, view = noncontiguous(R)
    untouched = base[1::2].clone()
    hvd.broadcast_(view, N - 1)
    assert torch.equal(view, noncontiguous(N - 1)[1])
    assert torch.equal(base[1::2], untouched)
    s = hvd.broadcast(torch.tensor(float(R)), 0)
    assert s.shape == () and s.item() == 0.0


# ---- alltoall ---------------------------------------------------------------------------

def a2a_split(q, j):
    """Rows rank q sends to rank j (some zero)."""
    return (q + j) % 3


def a2a_rows(q, j, dtype):
    """The rows rank q sends to rank j: each row says (from, to, index)."""
    n = a2a_split(q, j)
    v = torch.tensor([[q * 16 + j * 4 + m, m] for m in range(n)], dtype=torch.int64).reshape(n, 2)
    return (v % 2 == 1) if dtype == torch.bool else v.to(dtype)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_alltoall_with_splits_returns_output_and_received_splits(dtype):
    x = torch.cat([a2a_rows(R, j, dtype) for j in range(N)])
    exp = torch.cat([a2a_rows(q, R, dtype) for q in range(N)])
    splits = [a2a_split(R, j) for j in range(N)]
    received = [a2a_split(q, R) for q in range(N)]

    res = hvd.alltoall(x, splits=splits)
    assert isinstance(res, tuple) and len(res) == 2
    out, rsplits = res
    assert out.dtype == dtype and torch.equal(out, exp)
    assert rsplits.dtype == torch.int32 and rsplits.tolist() == received

    out, rsplits = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))
    assert torch.equal(out, exp) and rsplits.tolist() == received

    out, rsplits = hvd.synchronize(hvd.alltoall_async(x, splits, name=f"a2a.{dtype}"))
    assert torch.equal(out, exp) and rsplits.tolist() == received


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.float64, torch.bool],
                         ids=ids)
def test_alltoall_without_splits_divides_rows_equally_and_returns_only_the_output(dtype):
    def rows(q, j):  # two rows from q to j
        v = torch.tensor([q * 10 + j * 2 + k for k in range(2)], dtype=torch.int64)
        return (v % 2 == 1) if dtype == torch.bool else v.to(dtype)
    x = torch.cat([rows(R, j) for j in range(N)])
    exp = torch.cat([rows(q, R) for q in range(N)])
    out = hvd.alltoall(x)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and torch.equal(out, exp)
    out, rsplits = hvd.synchronize(hvd.alltoall_async(x))
    assert torch.equal(out, exp) and rsplits.tolist() == [2] * N


def test_alltoall_of_a_noncontiguous_tensor():
    x = torch.arange(N * 3 * 2, dtype=torch.float32).reshape(2, N * 3).t() + 1000 * R
    assert not x.is_contiguous()
    out = hvd.alltoall(x)
    exp = torch.cat([(torch.arange(N * 3 * 2, dtype=torch.float32).reshape(2, N * 3).t()
                      + 1000 * q)[R * 3:(R + 1) * 3] for q in range(N)])
    assert torch.equal(out, exp)


# ---- reducescatter ----------------------------------------------------------------------

def rs_slice(r, rows):
    """Horovod's split: the first rows % N ranks get one row more."""
    base, extra = divmod(rows, N)
    start = r * base + min(r, extra)
    return start, base + (1 if r < extra else 0)


def rs_value(q, i, j, dtype):
    v = (q + 1) + i + j
    return v * 0.5 if dtype.is_floating_point else v


def rs_input(q, dtype, rows):
    return torch.tensor([[rs_value(q, i, j, dtype) for j in range(2)] for i in range(rows)],
                        dtype=dtype).reshape(rows, 2)


def rs_expected(r, dtype, op, rows, pre=1.0, post=1.0):
    start, count = rs_slice(r, rows)
    out = []
    for i in range(start, start + count):
        row = []
        for j in range(2):
            s = sum(rs_value(q, i, j, dtype) * pre for q in range(N))
            if op == hvd.Average:
                s = s / N if dtype.is_floating_point else int(s / N)
            row.append(s * post)
        out.append(row)
    return torch.tensor(out, dtype=torch.float64).reshape(count, 2)


@pytest.mark.parametrize("op", ["Sum", "Average"], ids=str)
@pytest.mark.parametrize("dtype", REDUCIBLE, ids=ids)
def test_reducescatter_gives_each_rank_its_uneven_slice(dtype, op):
    op = OPS[op]
    rows = 2 * N + 1
    x = rs_input(R, dtype, rows)
    exp = rs_expected(R, dtype, op, rows)
    assert_values(hvd.reducescatter(x, op=op), exp, dtype)
    assert_values(hvd.synchronize(hvd.reducescatter_async(x, name=f"rs.{dtype}.{op}", op=op)),
                  exp, dtype)


def test_reducescatter_defaults_to_average_and_handles_fewer_rows_than_ranks():
    x = rs_input(R, torch.float32, 2 * N + 1)
    assert_values(hvd.reducescatter(x), rs_expected(R, torch.float32, hvd.Average, 2 * N + 1),
                  torch.float32)
    assert_values(hvd.reducescatter(x, op=None),
                  rs_expected(R, torch.float32, hvd.Average, 2 * N + 1), torch.float32)
    rows = N - 1  # the last rank gets an empty slice
    out = hvd.reducescatter(rs_input(R, torch.float32, rows), op=hvd.Sum)
    assert_values(out, rs_expected(R, torch.float32, hvd.Sum, rows), torch.float32)
    assert out.shape[0] == (0 if R == N - 1 else 1)


@pytest.mark.parametrize("op", ["Sum", "Average"], ids=str)
def test_reducescatter_applies_prescale_and_postscale(op):
    op = OPS[op]
    rows = 2 * N + 1
    x = rs_input(R, torch.float64, rows)
    out = hvd.reducescatter(x, op=op, prescale_factor=0.25, postscale_factor=3.0)
    assert_values(out, rs_expected(R, torch.float64, op, rows, 0.25, 3.0), torch.float64)


def test_reducescatter_of_a_noncontiguous_tensor():
    x = rs_input(R, torch.float32, 2 * N + 1).t().contiguous().t()
    assert not x.is_contiguous()
    assert_values(hvd.reducescatter(x, op=hvd.Sum),
                  rs_expected(R, torch.float32, hvd.Sum, 2 * N + 1), torch.float32)


def test_grouped_reducescatter_returns_one_slice_per_tensor():
    xs = [rs_input(R, torch.float32, 2 * N + 1), rs_input(R, torch.int32, N)]
    exps = [rs_expected(R, torch.float32, hvd.Sum, 2 * N + 1),
            rs_expected(R, torch.int32, hvd.Sum, N)]
    for outs in (hvd.grouped_reducescatter(xs, op=hvd.Sum),
                 hvd.synchronize(hvd.grouped_reducescatter_async(xs, op=hvd.Sum))):
        assert isinstance(outs, list) and len(outs) == 2
        assert_values(outs[0], exps[0], torch.float32)
        assert_values(outs[1], exps[1], torch.int32)
    outs = hvd.grouped_reducescatter(xs[:1], prescale_factor=2.0)
    assert_values(outs[0], rs_expected(R, torch.float32, hvd.Average, 2 * N + 1, pre=2.0),
                  torch.float32)


# ---- sparse, barrier, poll, join ------------------------------------------------------

def sparse_input(q):
    """Rank q: ones at (0..q, 0) and 10*(q+1) at (N, 1): a (N+1, 2) COO tensor, q+2 entries."""
    idx = [[i for i in range(q + 1)] + [N], [0] * (q + 1) + [1]]
    val = [1.0] * (q + 1) + [10.0 * (q + 1)]
    return torch.sparse_coo_tensor(idx, val, (N + 1, 2))


def sparse_expected(op):
    dense = torch.zeros(N + 1, 2, dtype=torch.float64)
    for i in range(N):
        dense[i, 0] = N - i  # ranks i..N-1 put a one there
    dense[N, 1] = 10 * N * (N + 1) / 2
    return dense / N if op == hvd.Average else dense


@pytest.mark.parametrize("op", ["Sum", "Average"], ids=str)
def test_sparse_allreduce_async_sums_or_averages_every_ranks_entries(op):
    op = OPS[op]
    h = hvd.sparse_allreduce_async(sparse_input(R), name=f"sparse.{op}", op=op)
    out = hvd.synchronize(h)
    assert out.is_sparse and out.shape == (N + 1, 2)
    assert_values(out.to_dense(), sparse_expected(op), torch.float32)
    # Horovod's handle is a callable; two unnamed calls may be in flight together.
    h1 = hvd.sparse_allreduce_async(sparse_input(R), None, op)
    h2 = hvd.sparse_allreduce_async(sparse_input(R), None, op)
    assert_values(h2().to_dense(), sparse_expected(op), torch.float32)
    assert_values(h1().to_dense(), sparse_expected(op), torch.float32)


@pytest.mark.ranks(2, "a rank that arrives late")
def test_barrier_waits_for_the_slowest_rank():
    assert hvd.barrier() is None  # everyone leaves this one together
    if R == 0:
        time.sleep(0.5)
    t0 = time.monotonic()
    hvd.barrier()
    waited = time.monotonic() - t0
    if R != 0:
        assert waited > 0.25, f"barrier returned after {waited:.3f} s, before rank 0 arrived"


@pytest.mark.ranks(2, "a rank that submits late")
def test_poll_is_false_until_every_rank_submitted_then_synchronize_returns():
    x = torch.full((3,), float(R + 1))
    if R == 0:
        h = hvd.allreduce_async(x, name="polled", op=hvd.Sum)
        time.sleep(0.05)
        assert hvd.poll(h) is False  # the others submit after the barrier
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async(x, name="polled", op=hvd.Sum)
    deadline = time.monotonic() + 30
    while not hvd.poll(h):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert hvd.poll(h) is True
    assert_values(hvd.synchronize(h), [N * (N + 1) / 2] * 3, torch.float32)


def test_join_lets_a_finished_rank_take_part_with_nothing_and_returns_the_last_rank():
    # While a rank is joined, the others name their collectives: automatic names count calls
    # per rank, and the joined rank makes none (as in Horovod).
    if R == 0:
        last = hvd.join()
    else:
        # Average divides by size() (as Horovod): rank 0 joined and contributed zeros.
        avg = hvd.allreduce(torch.full((3,), float(R)), name="join.avg")
        assert_values(avg, [sum(range(1, N)) / N] * 3, torch.float32)
        tot = hvd.allreduce(torch.full((2,), R, dtype=torch.int32), op=hvd.Sum, name="join.sum")
        assert_values(tot, [sum(range(1, N))] * 2, torch.int32)
        g = hvd.grouped_allreduce([torch.ones(2) * R, torch.ones(1) * R], op=hvd.Sum,
                                  name="join.grouped")
        assert_values(g[1], [sum(range(1, N))], torch.float32)
        gathered = hvd.allgather(torch.full((1, 2), float(R)), name="join.gather")
        assert_values(gathered, [[q, q] for q in range(1, N)], torch.float32)  # none from 0
        b = hvd.broadcast(torch.full((2,), float(R)), root_rank=N - 1, name="join.bcast")
        assert_values(b, [N - 1] * 2, torch.float32)
        if R == 1:
            time.sleep(0.3)  # the last of ranks 1..N-1 to join, not the highest
        last = hvd.join()
    assert last == (1 if N > 1 else 0)
    assert hvd.allgather(torch.tensor([last])).tolist() == [last] * N
    # Every rank joins again, rank 0 last: it is every rank's answer, not the highest rank.
    if R == 0:
        time.sleep(0.3)
    assert hvd.join() == 0


# ---- process sets -----------------------------------------------------------------------

@pytest.mark.ranks(2, "a process set leaving ranks out")
def test_collectives_on_process_sets_involve_only_their_members():
    evens = [q for q in range(N) if q % 2 == 0]
    odds = [q for q in range(N) if q % 2 == 1]
    ps_even = hvd.add_process_set(evens)
    ps_odd = hvd.add_process_set(hvd.ProcessSet(odds))
    try:
        mine, members = (ps_even, evens) if R % 2 == 0 else (ps_odd, odds)
        other = ps_odd if mine is ps_even else ps_even
        assert mine.included() is True and other.included() is False
        assert mine.size() == len(members) and mine.rank() == members.index(R)
        assert other.rank() == -1
        assert mine.ranks == members
        table = hvd.get_process_set_ids_and_ranks()
        assert table[0] == list(range(N))
        assert table[mine.process_set_id] == members
        assert hvd.global_process_set.size() == N and hvd.global_process_set.rank() == R

        x = torch.full((2,), float(R + 1))
        assert_values(hvd.allreduce(x, op=hvd.Sum, process_set=mine),
                      [sum(q + 1 for q in members)] * 2, torch.float32)
        assert_values(hvd.allreduce(x, process_set=mine),
                      [sum(q + 1 for q in members) / len(members)] * 2, torch.float32)
        g = hvd.allgather(torch.full((1,), float(R)), process_set=mine)
        assert_values(g, members, torch.float32)
        # Roots are global ranks (as in Horovod).
        b = hvd.broadcast(torch.full((1,), float(R)), members[-1], process_set=mine)
        assert_values(b, [members[-1]], torch.float32)
        xs = torch.tensor([R * 10 + j for j in range(len(members))], dtype=torch.int64)
        out = hvd.alltoall(xs, process_set=mine)
        me = members.index(R)
        assert out.tolist() == [q * 10 + me for q in members]
        rs = hvd.reducescatter(torch.ones(len(members), 1) * (R + 1), op=hvd.Sum,
                               process_set=mine)
        assert_values(rs, [[sum(q + 1 for q in members)]], torch.float32)
        hvd.barrier(process_set=mine)
        with pytest.raises(ValueError, match="duplicate"):
            hvd.add_process_set(list(evens))  # as Horovod: one set per list of ranks
        with pytest.raises(ValueError, match="duplicate"):
            hvd.add_process_set(range(N))  # the global set's ranks
        with pytest.raises(ValueError, match="already registered"):
            hvd.add_process_set(ps_even)
    finally:
        assert hvd.remove_process_set(ps_even) is True
        assert hvd.remove_process_set(ps_odd) is True
    assert ps_even.size() is None and ps_even.process_set_id is None
    assert hvd.remove_process_set(hvd.global_process_set) is False
    assert sorted(hvd.get_process_set_ids_and_ranks()) == [0]
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=ps_even)


# ---- compression ------------------------------------------------------------------------

@pytest.mark.parametrize("name,wire", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_compression_sends_floats_at_half_width_and_restores_the_dtype(name, wire):
    comp = getattr(hvd.Compression, name)
    x = ar_input(R, torch.float32, hvd.Sum)
    sent, ctx = comp.compress(x)
    assert sent.dtype == wire and comp.decompress(sent, ctx).dtype == torch.float32
    for op in (hvd.Sum, hvd.Average):
        out = hvd.allreduce(x, op=op, compression=comp)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.double(), ar_expected(torch.float32, op), rtol=TOL[wire],
                                   atol=TOL[wire])
    outs = hvd.grouped_allreduce([x, x.double()], op=hvd.Sum, compression=comp)
    assert [o.dtype for o in outs] == [torch.float32, torch.float64]
    torch.testing.assert_close(outs[1], ar_expected(torch.float64, hvd.Sum), rtol=TOL[wire],
                               atol=TOL[wire])
    i = ar_input(R, torch.int32, hvd.Sum)  # integers travel as they are
    assert_values(hvd.allreduce(i, op=hvd.Sum, compression=comp),
                  ar_expected(torch.int32, hvd.Sum), torch.int32)
    rows = 2 * N + 1
    out = hvd.reducescatter(rs_input(R, torch.float32, rows), op=hvd.Sum, compression=comp)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), rs_expected(R, torch.float32, hvd.Sum, rows),
                               rtol=TOL[wire], atol=TOL[wire])
    outs = hvd.grouped_reducescatter([rs_input(R, torch.float32, rows)], op=hvd.Sum,
                                     compression=comp)
    assert outs[0].dtype == torch.float32


# ---- autograd ---------------------------------------------------------------------------

TRI = N * (N + 1) / 2  # sum over ranks of (q + 1)


@pytest.mark.parametrize("op,pre,post,scale", [
    ("Sum", 1.0, 1.0, TRI), ("Average", 1.0, 1.0, TRI / N), ("Sum", 0.5, 4.0, 2 * TRI)])
def test_allreduce_gradient_is_the_allreduced_gradient(op, pre, post, scale):
    x = torch.full((3,), float(R), requires_grad=True)
    y = hvd.allreduce(x, op=OPS[op], prescale_factor=pre, postscale_factor=post)
    (y * (R + 1)).sum().backward()  # d loss / d y = (rank + 1)
    assert_values(x.grad, [scale] * 3, torch.float32)


def test_grouped_allreduce_gradient():
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(1, 3, requires_grad=True)
    ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    ((ya * (R + 1)).sum() + (yb * 2 * (R + 1)).sum()).backward()
    assert_values(a.grad, [TRI] * 2, torch.float32)
    assert_values(b.grad, [[2 * TRI] * 3], torch.float32)


def gathered_grad_expected(rows, weight):
    """Gradient of sum(allgather(x) * (rank+1) * weight(global row)) for rank R: Horovod
    averages the ranks' output gradients, then takes this rank's rows."""
    offset = sum(rows(q) for q in range(R))
    return [[(N + 1) / 2 * weight(offset + j)] * 2 for j in range(rows(R))]


def test_allgather_gradient_averages_the_ranks_gradients_and_slices_this_ranks_rows():
    def rows(q):
        return q + 1
    x = torch.ones(rows(R), 2, requires_grad=True)
    y = hvd.allgather(x)
    w = torch.arange(1, y.shape[0] + 1, dtype=torch.float32).view(-1, 1) * (R + 1)
    (y * w).sum().backward()
    assert_values(x.grad, gathered_grad_expected(rows, lambda g: g + 1), torch.float32)


def test_grouped_allgather_gradient():
    a = torch.ones(R + 1, 2, requires_grad=True)
    b = torch.ones(1, 2, requires_grad=True)
    ya, yb = hvd.grouped_allgather([a, b])
    wa = torch.arange(1, ya.shape[0] + 1, dtype=torch.float32).view(-1, 1) * (R + 1)
    ((ya * wa).sum() + (yb * (R + 1)).sum()).backward()
    assert_values(a.grad, gathered_grad_expected(lambda q: q + 1, lambda g: g + 1), torch.float32)
    assert_values(b.grad, [[(N + 1) / 2] * 2], torch.float32)


def test_broadcast_gradient_reaches_only_the_root():
    for root in range(N):
        x = torch.full((3,), float(R), requires_grad=True)
        y = hvd.broadcast(x, root)
        (y * (R + 1)).sum().backward()
        assert_values(x.grad, [(N + 1) / 2 if R == root else 0.0] * 3, torch.float32)


def test_alltoall_gradient_returns_each_row_the_gradient_of_where_it_went():
    splits = [a2a_split(R, j) for j in range(N)]
    x = torch.zeros(sum(splits), requires_grad=True)
    y, rsplits = hvd.alltoall(x, splits=splits)
    w = torch.arange(y.shape[0], dtype=torch.float32) + 100 * (R + 1)
    (y * w).sum().backward()
    exp = []
    for j in range(N):  # rows sent to rank j land after what ranks < R sent to j
        start = sum(a2a_split(q, j) for q in range(R))
        exp += [100 * (j + 1) + start + m for m in range(a2a_split(R, j))]
    assert_values(x.grad, exp, torch.float32)
    x2 = torch.zeros(2 * N, requires_grad=True)
    (hvd.alltoall(x2) * (R + 1)).sum().backward()
    assert_values(x2.grad, [j + 1 for j in range(N) for _ in range(2)], torch.float32)


@pytest.mark.parametrize("op,pre,post", [("Sum", 1.0, 1.0), ("Average", 1.0, 1.0),
                                         ("Sum", 0.5, 3.0)])
def test_reducescatter_gradient_is_the_allgathered_gradient(op, pre, post):
    rows = 2 * N + 1
    owner = [q for q in range(N) for _ in range(rs_slice(q, rows)[1])]
    # Horovod's convention: times the set size for Sum, times the scale factors.
    scale = (N if op == "Sum" else 1) * pre * post
    x = torch.ones(rows, 2, requires_grad=True)
    y = hvd.reducescatter(x, op=OPS[op], prescale_factor=pre, postscale_factor=post)
    (y * (R + 1)).sum().backward()
    assert_values(x.grad, [[(owner[i] + 1) * scale] * 2 for i in range(rows)], torch.float32)
    a = torch.ones(rows, 2, requires_grad=True)
    (ya,) = hvd.grouped_reducescatter([a], op=OPS[op], prescale_factor=pre,
                                      postscale_factor=post)
    (ya * (R + 1)).sum().backward()
    assert_values(a.grad, [[(owner[i] + 1) * scale] * 2 for i in range(rows)], torch.float32)


# ---- CUDA (where a GPU is present) ------------------------------------------------------

@pytest.mark.skipif(not (torch.cuda.is_available() and hvd.nccl_built()),
                    reason="needs CUDA and an NCCL build")
def test_collectives_on_cuda_tensors():
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    x = ar_input(R, torch.float32, hvd.Sum).to(dev)
    out = hvd.allreduce(x, op=hvd.Sum)
    assert out.device == dev
    assert_values(out.cpu(), ar_expected(torch.float32, hvd.Sum), torch.float32)
    g = hvd.allgather(ag_input(R, torch.float32).to(dev))
    assert g.device == dev
    assert torch.equal(g.cpu(), torch.cat([ag_input(q, torch.float32) for q in range(N)]))
    y = bc_input(R, torch.float32).to(dev)
    hvd.broadcast_(y, 0)
    assert torch.equal(y.cpu(), bc_input(0, torch.float32))
    rows = 2 * N + 1
    rs = hvd.reducescatter(rs_input(R, torch.float32, rows).to(dev), op=hvd.Sum)
    assert_values(rs.cpu(), rs_expected(R, torch.float32, hvd.Sum, rows), torch.float32)
