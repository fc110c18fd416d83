# SPDX-License-Identifier: Apache-2.0
"""[python] Horovod's semantics where scripts rely on them (issue 20): broadcast roots on a
process set are global ranks; join() as Horovod (Average divides by size(), the last rank to
join is returned); the facade (ValueError for a duplicate name, nccl_built() as a version code,
bool reductions); and a mistake made on one rank only fails every rank's call at once."""
import faulthandler
import time

import pytest
import torch

import hvd.torch as hvd

R, N = hvd.rank(), hvd.size()
LAST = N - 1  # the rank that makes the mistake in the one-rank tests


def the_job_goes_on():
    out = hvd.allreduce(torch.full((2,), float(R + 1)), op=hvd.Sum)
    assert out.tolist() == [N * (N + 1) / 2] * 2


# ---- process sets: global roots ----------------------------------------------------------

@pytest.fixture
def tail_set():
    """The process set of every rank but 0 (np 2: [1]; np 4: [1, 2, 3])."""
    ps = hvd.add_process_set(list(range(1, N)))
    yield ps
    hvd.barrier()
    hvd.remove_process_set(ps)


def refused_outside(ps, call):
    """Rank 0, outside `ps`: the set says so, and `call` (a collective on it) is refused at once,
    naming the rank and the set, while the members run theirs."""
    assert R == 0 and ps.included() is False and ps.rank() == -1
    t0 = time.monotonic()
    with pytest.raises((hvd.HorovodInternalError, ValueError),
                       match=f"rank 0 is not a member of process set {ps.process_set_id}"):
        call()
    assert time.monotonic() - t0 < 2.0


@pytest.mark.ranks(2, "a process set of every rank but 0")
def test_broadcasts_on_a_process_set_take_global_roots(tail_set):
    ps = tail_set
    if R == 0:
        refused_outside(ps, lambda: hvd.broadcast(torch.zeros(3), 1, name="g.b.out", process_set=ps))
        return
    assert ps.included() and ps.rank() == R - 1
    for root in sorted({1, N - 1}):
        def fresh():
            return torch.full((3,), float(R * 10))
        want = [root * 10.0] * 3
        assert hvd.broadcast(fresh(), root, name=f"g.b.{root}", process_set=ps).tolist() == want
        t = fresh()
        hvd.broadcast_(t, root, name=f"g.b_.{root}", process_set=ps)
        assert t.tolist() == want
        h = hvd.broadcast_async(fresh(), root, name=f"g.ba.{root}", process_set=ps)
        assert hvd.synchronize(h).tolist() == want
        t = fresh()
        hvd.synchronize(hvd.broadcast_async_(t, root, name=f"g.ba_.{root}", process_set=ps))
        assert t.tolist() == want
        assert hvd.broadcast_object({"from": R}, root, name=f"g.obj.{root}",
                                    process_set=ps) == {"from": root}
        model = torch.nn.Linear(2, 1)
        with torch.no_grad():
            model.weight.fill_(R)
            model.bias.fill_(R)
        hvd.broadcast_parameters(model.state_dict(), root, process_set=ps)
        assert model.weight.tolist() == [[float(root)] * 2] and model.bias.tolist() == [root]
        opt = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1), momentum=0.5)
        hvd.broadcast_optimizer_state(opt, root, process_set=ps)
        assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * (root + 1))


@pytest.mark.ranks(2, "a process set of every rank but 0")
def test_a_broadcast_root_outside_the_set_fails_on_every_member(tail_set):
    ps = tail_set
    if R == 0:  # the root named is this rank, outside the set: refused here too
        refused_outside(ps, lambda: hvd.broadcast(torch.ones(2), 0, name="g.out", process_set=ps))
        return
    assert ps.included()
    with pytest.raises(hvd.HorovodInternalError, match="root rank 0 is not a member"):
        hvd.broadcast(torch.ones(2), 0, name="g.out", process_set=ps)
    if ps.size() > 1:  # only the last member names rank 0: every member fails, naming it
        bad = 0 if R == LAST else 1
        with pytest.raises(hvd.HorovodInternalError, match="root rank 0 is not a member") as e:
            hvd.broadcast(torch.ones(2), bad, name="g.out1", process_set=ps)
        if R != LAST:
            assert f"refused on rank {ps.size() - 1}" in str(e.value)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=ps).tolist() == [N - 1]


# ---- join as Horovod -----------------------------------------------------------------------

def test_after_join_average_divides_by_size_and_join_returns_the_last_rank():
    last_rank = N // 2  # not the highest rank: the answer cannot be size() - 1 by default
    if R != last_rank:
        assert hvd.join() == last_rank
    else:
        time.sleep(0.3)  # the others' joins are negotiated first
        avg = hvd.allreduce(torch.full((3,), float(R + 1)), name="sem.join.avg")
        assert avg.tolist() == [(R + 1) / N] * 3  # joined ranks contributed zeros
        s = hvd.allreduce(torch.full((2,), R + 1, dtype=torch.int32), op=hvd.Sum,
                          name="sem.join.sum")
        assert s.tolist() == [R + 1] * 2
        assert hvd.join() == last_rank
    the_job_goes_on()


@pytest.mark.ranks(2, "a rank joining after the others")
def test_join_returns_the_rank_that_joined_last_whichever_it_is():
    # The others have nothing to do meanwhile, so every join may reach rank 0 in one round:
    # the answer is the rank that called join() last (Horovod's), not the highest one.
    got = []
    for last_rank in range(N):
        if R == last_rank:
            time.sleep(0.4)
        got.append(hvd.join())
    assert got == list(range(N))
    the_job_goes_on()


# ---- the facade ------------------------------------------------------------------------------

@pytest.mark.ranks(2, "a collective left in flight by a rank that submits late")
def test_a_duplicate_in_flight_name_is_a_value_error():
    # Rank 0's "sem.dup" stays in flight until the others submit it, after "sem.dup.go".
    if R == 0:
        h = hvd.allreduce_async(torch.ones(4), name="sem.dup", op=hvd.Sum)
        with pytest.raises(ValueError, match="already in flight") as e:
            hvd.allreduce_async(torch.ones(4), name="sem.dup", op=hvd.Sum)
        assert isinstance(e.value, hvd.HorovodInternalError)
        hvd.allreduce(torch.ones(1), name="sem.dup.go")
    else:
        hvd.allreduce(torch.ones(1), name="sem.dup.go")
        h = hvd.allreduce_async(torch.ones(4), name="sem.dup", op=hvd.Sum)
    assert hvd.synchronize(h).tolist() == [N] * 4


def test_nccl_built_is_the_nccl_version_code():
    v = hvd.nccl_built()
    assert type(v) is int
    if hvd.cuda_built():
        assert v >= 2000  # NCCL_VERSION_CODE, e.g. 22809 for 2.28.9 (>= 2700 for scripts)
    else:
        assert v == 0


@pytest.mark.parametrize("op", [hvd.Min, hvd.Max, hvd.Sum])
def test_bool_reductions_are_refused_on_every_rank(op):
    with pytest.raises(hvd.HorovodInternalError, match="dtype bool cannot be reduced"):
        hvd.allreduce(torch.tensor([True, R % 2 == 0]), op=op, name=f"sem.bool.{op}")
    the_job_goes_on()


# ---- one rank's mistake fails every rank ---------------------------------------------------

DEADLINE_S = 20  # per test: a rank left waiting ends the run with every thread's stack


@pytest.fixture
def deadline():
    faulthandler.dump_traceback_later(DEADLINE_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def good():
    return torch.ones(4)


def sparse():
    return torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (4,))


# (label, the correct call, the mistaken call on rank LAST, what that rank raises, match)
MISTAKES = [
    ("complex dtype", lambda n: hvd.allreduce(good(), name=n),
     lambda n: hvd.allreduce(torch.ones(4, dtype=torch.complex64), name=n),
     ValueError, "not supported"),
    ("meta device", lambda n: hvd.allreduce(good(), name=n),
     lambda n: hvd.allreduce(torch.ones(4, device="meta"), name=n), ValueError, "meta"),
    ("invalid op", lambda n: hvd.allreduce(good(), name=n, op=hvd.Sum),
     lambda n: hvd.allreduce(good(), name=n, op=99), ValueError, "unknown reduction op"),
    ("Adasum on one rank", lambda n: hvd.allreduce(good(), name=n, op=hvd.Sum),
     lambda n: hvd.allreduce(good(), name=n, op=hvd.Adasum), hvd.HorovodInternalError,
     "Adasum"),
    ("Adasum of ints", lambda n: hvd.allreduce(torch.ones(4, dtype=torch.int32), name=n),
     lambda n: hvd.allreduce(torch.ones(4, dtype=torch.int32), name=n, op=hvd.Adasum),
     hvd.HorovodInternalError, "Adasum reduces float16"),
    ("a list", lambda n: hvd.allreduce(good(), name=n),
     lambda n: hvd.allreduce([good(), good()], name=n), TypeError, "grouped_allreduce"),
    ("a sparse tensor", lambda n: hvd.allreduce(good(), name=n),
     lambda n: hvd.allreduce(sparse(), name=n), ValueError, "sparse"),
    ("a sparse tensor, in place", lambda n: hvd.allreduce_(good(), name=n),
     lambda n: hvd.allreduce_(sparse(), name=n), ValueError, "sparse"),
    ("allgather of a list", lambda n: hvd.allgather(good(), name=n),
     lambda n: hvd.allgather([good()], name=n), TypeError, "expected a torch.Tensor"),
    ("reducescatter op=Max", lambda n: hvd.reducescatter(torch.ones(N, 2), name=n, op=hvd.Sum),
     lambda n: hvd.reducescatter(torch.ones(N, 2), name=n, op=hvd.Max), ValueError,
     "Sum or Average"),
    ("an empty grouped call", lambda n: hvd.grouped_allreduce([good(), good()], name=n),
     lambda n: hvd.grouped_allreduce([], name=n), ValueError, "empty list"),
    ("an empty grouped allgather", lambda n: hvd.grouped_allgather([good()], name=n),
     lambda n: hvd.grouped_allgather([], name=n), ValueError, "empty list"),
    ("a bad tensor in a group", lambda n: hvd.grouped_allreduce([good(), good()], name=n),
     lambda n: hvd.grouped_allreduce([good(), torch.ones(2, dtype=torch.complex64)], name=n),
     ValueError, "not supported"),
    ("prescale 1 + 1e-9", lambda n: hvd.allreduce(good(), name=n, op=hvd.Sum),
     lambda n: hvd.allreduce(good(), name=n, op=hvd.Sum, prescale_factor=1.0 + 1e-9),
     hvd.HorovodInternalError, "1.000000001"),
    ("float alltoall splits", lambda n: hvd.alltoall(torch.ones(N), splits=[1] * N, name=n),
     lambda n: hvd.alltoall(torch.ones(N), splits=torch.ones(N), name=n), ValueError,
     "splits must hold integers"),
    # pybind11 refuses it before hvd's int_arg could (root_rank is a C int): not truncated to 1.
    ("a root 2**32 + 1", lambda n: hvd.broadcast(good(), 0, name=n),
     lambda n: hvd.broadcast(good(), 2**32 + 1, name=n), TypeError,
     "incompatible function arguments"),
]


@pytest.mark.parametrize("case", MISTAKES, ids=[m[0] for m in MISTAKES])
@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_a_mistake_on_one_rank_fails_every_rank_at_once(deadline, case, named):
    label, right, wrong, raised, match = case
    if raised is hvd.HorovodInternalError and N < 2:
        pytest.skip("needs at least 2 ranks (a mismatch between ranks, found by the "
                    f"coordinator); this run has {N}")
    name = f"sem.one.{label}" if named else None
    hvd.barrier()  # a common start: the time to fail, not the ranks' skew
    start = time.monotonic()
    if R == LAST:
        with pytest.raises(raised, match=match):
            wrong(name)
    else:
        with pytest.raises(hvd.HorovodInternalError) as e:
            right(name)
        msg = str(e.value)
        if raised is not hvd.HorovodInternalError:  # a refusal, naming the rank that made it
            assert f"refused on rank {LAST}" in msg, msg
        if match:
            assert match in msg, msg
    elapsed = time.monotonic() - start
    took = hvd.allgather(torch.tensor([elapsed]), name=None)
    print(f"[{label}{'' if named else ', unnamed'}] every rank failed within "
          f"{float(took.max()) * 1000:.1f} ms")
    the_job_goes_on()


@pytest.mark.parametrize("arg", ["dtype", "op", "process_set"])
def test_the_c_path_refuses_an_int_beyond_int32_rather_than_truncating_it(arg):
    """The in-place host allreduce reads its integers itself (_core.allreduce_host: no pybind11
    casting): 2**32 + k must be refused by hvd's int_arg, not truncated to k (a process set
    2**32 would become the global set 0, a dtype or op 2**32 + 1 would become code 1)."""
    from hvd import _core
    from hvd.torch import mpi_ops
    t = torch.full((3,), float(R + 1))
    args = {"dtype": mpi_ops._DTYPES[t.dtype], "op": hvd.Sum, "process_set": 0}
    big = 2**32 if arg == "process_set" else 2**32 + 1
    args[arg] = big
    with pytest.raises(ValueError, match=rf"hvd: integer argument {big} is out of range "
                                         r"\[-2147483648, 2147483647\]"):
        _core.allreduce_host(t, t.data_ptr(), args["dtype"], t.shape, f"sem.int.{arg}",
                             args["op"], 1.0, 1.0, args["process_set"])
    assert t.tolist() == [float(R + 1)] * 3  # nothing ran
    the_job_goes_on()


# (label, the list every other rank passes, what the last rank passes, what it raises, what the
# others' error says)
SET_MISTAKES = [
    ("a duplicate of the global set", lambda: [0], lambda: list(range(N)), ValueError,
     (f"add_process_set({list(range(N))}): ValueError: Attempted to add a duplicate",)),
    ("a list that differs", lambda: [0], lambda: [LAST], hvd.HorovodInternalError,
     ("rank list [0] on rank", f"but [{LAST}] on rank {LAST}")),
    ("a list it cannot read", lambda: [0], lambda: [0, "one"], ValueError, ("invalid literal",)),
    ("a rank beyond int32", lambda: [0], lambda: [0, 2**40], ValueError,
     ("rank 1099511627776 is out of range",)),
]


@pytest.mark.parametrize("case", SET_MISTAKES, ids=[m[0] for m in SET_MISTAKES])
def test_a_process_set_list_that_differs_on_one_rank_fails_every_rank(deadline, case):
    label, right, wrong, raised, match = case
    if raised is hvd.HorovodInternalError and N < 2:
        pytest.skip("needs at least 2 ranks (a mismatch between ranks, found by the "
                    f"coordinator); this run has {N}")
    before = hvd.get_process_set_ids_and_ranks()
    hvd.barrier()  # a common start: the time to fail, not the ranks' skew
    start = time.monotonic()
    if R == LAST:
        with pytest.raises(raised):
            hvd.add_process_set(wrong())
    else:
        with pytest.raises(hvd.HorovodInternalError) as e:
            hvd.add_process_set(right())
        assert all(m in str(e.value) for m in match), str(e.value)
        if raised is not hvd.HorovodInternalError:  # refused on the last rank: it is named
            assert f"refused on rank {LAST}" in str(e.value), str(e.value)
    elapsed = time.monotonic() - start
    took = hvd.allgather(torch.tensor([elapsed]), name=None)
    print(f"[add_process_set, {label}] every rank failed within "
          f"{float(took.max()) * 1000:.1f} ms")
    assert hvd.get_process_set_ids_and_ranks() == before  # no set was added anywhere
    the_job_goes_on()
