# SPDX-License-Identifier: Apache-2.0
"""[python] hvd.init(comm=...): an mpi4py communicator or a list of MPI_COMM_WORLD ranks.

The even and the odd MPI_COMM_WORLD ranks run two independent jobs in one mpirun. Every
expected value is computed here from the job's MPI_COMM_WORLD ranks, not from hvd. Each test
shuts down the session's hvd (on MPI_COMM_WORLD) first and starts it there again at the end.
"""
import os

import pytest
import torch

import hvd.torch as hvd

MPI = pytest.importorskip("mpi4py.MPI", reason="hvd.init(comm=...) tests need mpi4py "
                          "(Debian: python3-mpi4py, installed by scripts/install-deps.sh)")

WR, WN = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
pytestmark = pytest.mark.ranks(2, "two jobs (the even and the odd ranks) in one mpirun")


@pytest.fixture(autouse=True)
def off_world():
    hvd.shutdown()
    yield
    hvd.shutdown()
    hvd.init()
    assert hvd.size() == WN


def my_job():
    """This process's job: the MPI_COMM_WORLD ranks of its parity, in order."""
    return list(range(WR % 2, WN, 2))


def check_job(members, tag):
    """What hvd running on `members` (MPI_COMM_WORLD ranks in hvd's rank order) gives here."""
    n, me = len(members), members.index(WR)
    assert (hvd.rank(), hvd.size()) == (me, n)
    # One host: every process of the job is on it, one node.
    assert (hvd.local_rank(), hvd.local_size()) == (me, n)
    assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1)
    assert hvd.global_process_set.ranks == list(range(n))

    x = torch.full((3,), float(WR))
    assert hvd.allreduce(x, op=hvd.Sum, name=tag + ".sum").tolist() == [float(sum(members))] * 3
    assert hvd.allreduce(x, name=tag + ".avg").tolist() == [sum(members) / n] * 3
    # The root is a rank of the job (its last one).
    b = hvd.broadcast(torch.tensor([WR]), n - 1, name=tag + ".bcast")
    assert b.tolist() == [members[-1]]
    g = hvd.allgather(torch.tensor([[WR, 10 * WR]]), name=tag + ".gather")
    assert g.tolist() == [[w, 10 * w] for w in members]

    # A process set of ranks of the job: its last rank alone (at np 2 every job has one rank,
    # and a set of the global set's ranks is refused as a duplicate, as Horovod).
    if n > 1:
        ps = hvd.add_process_set([n - 1])
        assert ps.ranks == [n - 1] and ps.included() == (me == n - 1)
        if ps.included():
            s = hvd.allreduce(torch.tensor([WR]), op=hvd.Sum, name=tag + ".set", process_set=ps)
            assert s.tolist() == [members[-1]]
        hvd.remove_process_set(ps)


def train(tag, steps=3):
    """A DistributedOptimizer's parameters after `steps` steps on this process's own data (seeded
    by its MPI_COMM_WORLD rank), and the same steps in plain PyTorch with the gradient averaged
    here over the job's members, each member's data rebuilt from its rank."""
    def model():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 1, bias=False).double()

    def data(w):
        gen = torch.Generator().manual_seed(100 + w)
        return torch.randn(8, 4, generator=gen, dtype=torch.float64), \
            torch.randn(8, 1, generator=gen, dtype=torch.float64)

    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                   named_parameters=[(tag + ".w", net.weight)])
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    x, y = data(WR)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    ref = model()
    members = list(range(WR % 2, WN, 2))
    for _ in range(steps):
        grads = []
        for w in members:
            ref.zero_grad()
            xw, yw = data(w)
            torch.nn.functional.mse_loss(ref(xw), yw).backward()
            grads.append(ref.weight.grad.clone())
        with torch.no_grad():
            ref.weight -= 0.1 * torch.stack(grads).mean(0)
    return net.weight.detach(), ref.weight.detach()


def test_mpi4py_communicator_runs_an_independent_job():
    comm = MPI.COMM_WORLD.Split(WR % 2, WR)
    hvd.init(comm=comm)
    check_job(my_job(), "split")
    # A ProcessSet made from a communicator: its ranks are ranks of hvd's job; one with
    # processes outside the job is refused on every rank of the job.
    assert hvd.ProcessSet(comm).ranks == list(range(len(my_job())))
    others = [w for w in range(WN) if w % 2 != WR % 2]
    with pytest.raises(ValueError) as e:
        hvd.add_process_set(hvd.ProcessSet(MPI.COMM_WORLD))
    assert f"MPI_COMM_WORLD rank(s) {others} are not in hvd's job" in str(e.value)
    comm.Free()  # hvd runs on its own duplicates
    check_job(my_job(), "split.again")


def test_distributed_optimizer_steps_agree_within_a_job_and_differ_between_jobs():
    comm = MPI.COMM_WORLD.Split(WR % 2, WR)
    hvd.init(comm=comm)
    comm.Free()
    w, ref = train("job")
    torch.testing.assert_close(w, ref, rtol=1e-12, atol=1e-12)
    mine = hvd.allgather(w.reshape(1, -1), name="job.weights")
    for row in mine:
        assert torch.equal(row, w.reshape(-1))
    every = MPI.COMM_WORLD.allgather(w.reshape(-1).tolist())
    assert every[WR ^ 1] != every[WR], "the two jobs trained on different data"


def test_rank_list_orders_ranks_and_another_job_follows_a_shutdown():
    job = my_job()[::-1]  # last first: hvd's rank 0 is the job's highest MPI_COMM_WORLD rank
    hvd.init(comm=job)
    check_job(job, "list")
    hvd.init(comm=job)  # the same job: nothing happens
    with pytest.raises(hvd.HorovodInternalError, match="hvd already runs, on another job"):
        hvd.init(comm=MPI.COMM_WORLD)
    hvd.shutdown()
    comm = MPI.COMM_WORLD.Split(WR % 2, WR)
    hvd.init(comm=comm)
    comm.Free()
    check_job(my_job(), "after")


def test_world_communicator_is_plain_init():
    hvd.init(comm=MPI.COMM_WORLD)
    check_job(list(range(WN)), "world")
    hvd.shutdown()
    hvd.init(comm=[])  # Horovod: an empty list is MPI_COMM_WORLD
    assert (hvd.rank(), hvd.size()) == (WR, WN)


@pytest.mark.parametrize("comm,needle", [
    (lambda: MPI.COMM_NULL, "MPI_COMM_NULL"),
    (lambda: [WR, WR], f"rank {WR} is listed twice"),
    (lambda: [WR, WN], f"rank {WN} is out of range: MPI_COMM_WORLD has {WN} ranks"),
    (lambda: [(WR + 1) % WN], f"this process (rank {WR} of MPI_COMM_WORLD) is not in the list"),
], ids=["COMM_NULL", "duplicate", "out-of-range", "not-a-member"])
def test_bad_communicator_or_list_is_refused(comm, needle):
    with pytest.raises(ValueError) as e:
        hvd.init(comm=comm())
    assert needle in str(e.value)
    assert not hvd.is_initialized()


@pytest.mark.ranks(4, "a job of two ranks or more")
def test_same_ranks_in_another_order_fail_on_every_process_of_the_job():
    job = my_job()
    if WR == job[-1]:
        job = job[::-1]
    with pytest.raises(ValueError, match="another process of the job passed a different list"):
        hvd.init(comm=job)
    assert not hvd.is_initialized()


def test_elastic_mode_stays_on_the_world(monkeypatch):
    monkeypatch.setenv("HVD_ELASTIC_STATE_DIR", "/nonexistent/hvd-init-comm-test")
    with pytest.raises(ValueError, match="elastic mode"):
        hvd.init(comm=my_job())
    assert not hvd.is_initialized()
    monkeypatch.delenv("HVD_ELASTIC_STATE_DIR")


def test_comm_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="mpi4py communicator or a list"):
        hvd.init(comm="0,2")
    with pytest.raises(TypeError, match="ranks are integers"):
        hvd.init(comm=[0.0, 2.0])
    assert not hvd.is_initialized()
    assert os.environ.get("HVD_ELASTIC_STATE_DIR") is None
