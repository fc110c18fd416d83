# SPDX-License-Identifier: Apache-2.0
"""Lifecycle, topology, build facts and process sets, shared by hvd.torch and hvd.numpy.

Names, arguments and return values follow horovod.common.basics and
horovod.common.process_sets (0.28).
"""
import atexit

from hvd import _core

# Reduction op constants (values are hvd's ReduceOp codes).
Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4
Adasum = 5  # allreduce (float tensors, a power-of-two number of ranks); not reducescatter

_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product",
             Adasum: "Adasum"}


def check_op(op):
    """Returns the core's code for `op`; raises ValueError for an unknown op."""
    if op not in _OP_NAMES:
        raise ValueError(f"unknown reduction op {op!r}; use hvd.Sum, Average, Min, Max, Product "
                         "or Adasum")
    return op


class ProcessSet:
    """A subset of ranks that collectives can run on (horovod.common.process_sets.ProcessSet).

    Create it with the global ranks, then register it with ``hvd.init(process_sets=[...])`` or
    ``hvd.add_process_set(ps)`` on every rank.
    """

    def __init__(self, ranks_or_comm):
        # From an mpi4py communicator: its processes' MPI_COMM_WORLD ranks, turned into ranks of
        # hvd's job now and again when the set is registered (hvd.init(comm=...) may come later).
        self._world_ranks = None
        if hasattr(ranks_or_comm, "Get_group"):
            self._world_ranks = _world_ranks_of(ranks_or_comm)
            ranks_or_comm = _job_ranks_of(self._world_ranks, quiet=True)
        self.ranks = sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None

    def _resolve(self):
        """Ranks of hvd's job for a set made from a communicator (ValueError: not all in it)."""
        if self._world_ranks is not None:
            self.ranks = sorted(_job_ranks_of(self._world_ranks))

    def _invalidate(self):
        self.process_set_id = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError(f"process set {self.ranks} is not registered: pass it to "
                             "hvd.init(process_sets=...) or hvd.add_process_set() first")
        return self.process_set_id

    def size(self):
        """Number of ranks in the set (None before registration, as Horovod)."""
        if self.process_set_id is None:
            return None
        return _core.process_set_size(self.process_set_id)

    def rank(self):
        """This process's rank within the set (-1 when not a member; None before registration)."""
        if self.process_set_id is None:
            return None
        return _core.process_set_rank(self.process_set_id)

    def included(self):
        """True when this process is a member."""
        if self.process_set_id is None:
            return None
        return _core.process_set_included(self.process_set_id)

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        super().__init__([])
        self.process_set_id = 0

    def _invalidate(self):
        pass

    @property
    def ranks(self):
        return list(range(_core.size())) if _core.is_initialized() else []

    @ranks.setter
    def ranks(self, value):
        pass


global_process_set = _GlobalProcessSet()
_registered = {}  # id -> ProcessSet


def _set_id(process_set):
    """The core id of a ProcessSet argument (global when None)."""
    if process_set is None or process_set is global_process_set:
        return 0
    if isinstance(process_set, ProcessSet):
        return process_set._id()
    raise TypeError(f"process_set must be a hvd ProcessSet, not {type(process_set).__name__}")


def init(comm=None, process_sets=None):
    """Starts hvd, collective over the processes of its job.

    `comm`: None (MPI_COMM_WORLD); an mpi4py communicator (hvd runs on its processes: rank(),
    size(), local and cross ranks, process sets' ranks and every collective relative to it; other
    processes are not involved, so disjoint communicators run independent jobs); or a list of
    MPI_COMM_WORLD ranks (Horovod's form: hvd's rank i is world rank comm[i]; every process of
    the list passes the same list; an empty list is MPI_COMM_WORLD). Elastic mode runs on
    MPI_COMM_WORLD only. `process_sets`: ProcessSet objects (or lists of ranks of hvd's job) to
    register now. When hvd already runs: a no-op for the same job, an error for another."""
    kwargs = _check_comm(comm)
    if process_sets == "dynamic":
        process_sets = None
    sets = [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in (process_sets or [])]
    if _core.is_initialized():
        if kwargs:
            _core.init([], **kwargs)  # the same job: nothing; another: refused
        return
    _core.init([], **kwargs)
    _job[0] = _job_members(comm, kwargs)
    try:
        for ps in sets:
            ps._resolve()
    except ValueError:
        shutdown()
        raise
    _registered.clear()
    for ps in sets:
        ps.process_set_id = _core.add_process_set(ps.ranks)
        _registered[ps.process_set_id] = ps
    _homogeneous[0] = _compute_homogeneous()


_job = [None]  # MPI_COMM_WORLD rank of each of hvd's ranks; None: MPI_COMM_WORLD itself


def _check_comm(comm):
    """The extension's arguments for init(comm=...): {} for MPI_COMM_WORLD."""
    if comm is None:
        return {}
    if hasattr(comm, "py2f"):  # an mpi4py communicator: its Fortran handle is portable
        return {"comm_f2c": comm.py2f()}
    if isinstance(comm, (str, bytes)) or not hasattr(comm, "__iter__"):
        raise TypeError(f"hvd.init(comm=...) takes an mpi4py communicator or a list of "
                        f"MPI_COMM_WORLD ranks, not {type(comm).__name__}")
    ranks = []
    for r in comm:
        if isinstance(r, bool) or not hasattr(r, "__index__"):
            raise TypeError(f"hvd.init(comm={list(comm)!r}): ranks are integers, not "
                            f"{type(r).__name__}")
        ranks.append(r.__index__())
    return {"world_ranks": ranks} if ranks else {}


def _job_members(comm, kwargs):
    """hvd's job as MPI_COMM_WORLD ranks after init(comm=...); None for MPI_COMM_WORLD."""
    if "world_ranks" in kwargs:
        return list(kwargs["world_ranks"])
    if "comm_f2c" in kwargs:
        return _world_ranks_of(comm)
    return None


def _world_ranks_of(comm):
    from mpi4py import MPI
    return MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.Get_size())),
                                     MPI.COMM_WORLD.Get_group())


def _job_ranks_of(world_ranks, quiet=False):
    """hvd's ranks of processes given by MPI_COMM_WORLD rank. Raises ValueError for one outside
    hvd's job, unless `quiet` (before hvd.init(), where the job is not known yet)."""
    job = _job[0] if _core.is_initialized() else None
    if job is None:
        return list(world_ranks)
    where = {w: i for i, w in enumerate(job)}
    outside = [w for w in world_ranks if w not in where]
    if outside and not quiet:
        raise ValueError(f"ProcessSet from a communicator: MPI_COMM_WORLD rank(s) {outside} are "
                         f"not in hvd's job (MPI_COMM_WORLD ranks {job}, from hvd.init(comm=...))"
                         "; make the set from a communicator within the job")
    return [where[w] for w in world_ranks if w in where]


def shutdown():
    """Stops hvd; pending collectives fail with a clear error. Idempotent."""
    for ps in _registered.values():
        ps._invalidate()
    _registered.clear()
    _core.shutdown()


atexit.register(shutdown)


def is_initialized():
    return _core.is_initialized()


def size():
    """Number of ranks. Raises ValueError before init(), as Horovod."""
    _check_init("size")
    return _core.size()


def rank():
    _check_init("rank")
    return _core.rank()


def local_rank():
    _check_init("local_rank")
    return _core.local_rank()


def local_size():
    _check_init("local_size")
    return _core.local_size()


def cross_rank():
    _check_init("cross_rank")
    return _core.cross_rank()


def cross_size():
    _check_init("cross_size")
    return _core.cross_size()


_homogeneous = {}


def _compute_homogeneous():
    """Every rank's local size, gathered once at init(): equal everywhere = homogeneous."""
    import array
    mine = array.array("i", [_core.local_size()])
    h = _core.allgather_async(mine, (mine.buffer_info()[0], 3, (1,), -1, 0),
                              "hvd.init.local_sizes", 0)
    h.wait()
    import numpy as np
    sizes = h.output_numpy(np.int32)
    return bool((sizes == sizes[0]).all())


def is_homogeneous():
    """True when every node runs the same number of ranks."""
    _check_init("is_homogeneous")
    return _homogeneous[0]


def _check_init(fn):
    if not _core.is_initialized():
        raise ValueError(f"hvd.{fn}() called before hvd.init() (or after hvd.shutdown()); "
                         "call hvd.init() first")


def mpi_threads_supported():
    _check_init("mpi_threads_supported")
    return _core.mpi_threads_supported()


def mpi_enabled():
    return True


def mpi_built():
    return _core.mpi_built()


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """The version code of the NCCL that hvd's GPU module loaded (e.g. 22809 for 2.28.9), as
    Horovod returns it; 0 when the module is not loaded (see gpu_support())."""
    return _core.nccl_version()


def gpu_support():
    """Whether hvd's GPU module is loaded, which NCCL and CUDA runtime it found, how many
    devices it sees, and otherwise why not: a dict (loaded, module, nccl_version,
    cuda_runtime_version, devices, reason)."""
    return _core.gpu_support()


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return _core.cuda_built()


def rocm_built():
    return False


_INT32 = 2**31


def add_process_set(process_set):
    """Registers a new process set (collective over all ranks); returns the ProcessSet."""
    _check_init("add_process_set")
    ps = None
    try:
        ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
        if ps.process_set_id is not None:
            raise ValueError(f"{ps} is already registered")
        ps._resolve()
        big = [r for r in ps.ranks if not 0 <= r < _INT32]
        if big:
            raise ValueError(f"add_process_set({ps.ranks}): rank {big[0]} is out of range (hvd "
                             f"has {size()} ranks: 0-{size() - 1})")
        # As Horovod: no two sets with the same ranks.
        for i in _core.process_set_ids():
            if _core.process_set_ranks(i) == ps.ranks:
                raise ValueError(f"Attempted to add a duplicate process set: {ps} has the ranks "
                                 f"of process set {i}; use that one")
    except (ValueError, TypeError, OverflowError) as e:
        # Found on this rank (its list may differ from the others'): refused through
        # negotiation, so that the other ranks' add_process_set fails too instead of waiting.
        try:
            ranks = [r for r in getattr(ps, "ranks", []) if 0 <= r < _INT32]
            _core.refuse_add_process_set(ranks, f"{type(e).__name__}: {e}")
        except Exception:  # noqa: BLE001 - the refusal itself, raised here as `e` instead
            pass
        raise
    ps.process_set_id = _core.add_process_set(ps.ranks)
    _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Removes a process set (collective over all ranks). Returns True when it was removed."""
    _check_init("remove_process_set")
    if process_set is global_process_set or process_set.process_set_id in (None, 0):
        return False
    _core.remove_process_set(process_set.process_set_id)
    _registered.pop(process_set.process_set_id, None)
    process_set._invalidate()
    return True


def get_process_set_ids_and_ranks():
    return {i: _core.process_set_ranks(i) for i in _core.process_set_ids()}


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline (chrome://tracing, Perfetto) of the executed
    collectives to `file_path` on rank 0 (other ranks write nothing). `mark_cycles`: also mark
    the start of every negotiation round (an instant "cycle" event)."""
    _check_init("start_timeline")
    _core.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Closes the timeline file (valid JSON)."""
    _check_init("stop_timeline")
    _core.stop_timeline()
