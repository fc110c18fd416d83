# SPDX-License-Identifier: Apache-2.0
"""Elastic training's framework-agnostic half: State, ObjectState and the run wrapper.

Names and behaviour follow horovod.common.elastic (0.28). What differs is how a failure is
survived. Open MPI 4.1 cannot re-initialize or shrink a live job, so hvd does not reset inside
the process: ``hvdrun --min-np/--max-np ...`` runs the job in generations (every generation a
fresh set of processes), and the state crosses from one generation to the next through the
host's snapshot file (hvd.common.elastic_snapshot):

- ``commit()`` saves the state in host memory (as Horovod) and the lowest local rank of each host
  also writes it, with a commit id, to ``$HVD_ELASTIC_STATE_DIR/snapshot`` (hvdrun: /dev/shm).
- When the decorated function starts, every rank reads its host's snapshot; the ranks agree on
  the newest commit id and the lowest rank holding it broadcasts the snapshot (the protocol and
  the file format live in C++, hvd/optim/elastic_store.h, shared with libtorch programs). Every
  rank then restores it, runs the reset callbacks and syncs. Without any snapshot (the first
  generation) the state is synced from rank 0, as Horovod does at start.
- HorovodInternalError or HostsUpdatedInterrupt inside the function ends the process with exit
  code RESTART_EXIT_CODE (75): hvdrun then starts the next generation, which resumes from the
  last commit. An error a restart cannot fix (``_restart_cannot_fix``: an invalid argument,
  ranks disagreeing about a collective, a ValueError or TypeError, an ElasticStateError) is
  printed with its traceback and ends the process with FATAL_EXIT_CODE (76): hvdrun then ends
  the job (exit code 1, what the uncaught exception gives without elastic mode). Any other
  exception is printed the same way and ends the process at once with exit code 1, a failure
  that hvdrun restarts. Outside hvdrun's elastic mode (no HVD_ELASTIC_STATE_DIR) nothing
  persists and the exception propagates.
- ``commit()`` tells hvdrun its commit id (through the progress file): a generation that fails
  before any new commit counts towards ``hvdrun --max-restarts-without-progress``.
- When the function returns, the rank writes $HVD_ELASTIC_COMPLETION_FILE (when set), so that
  hvdrun can tell a finished job from a worker that exited 0 early.
"""
import copy
import functools
import os
import pickle
import queue
import sys
import time
import traceback

from hvd import _core
from hvd.common import basics
from hvd.common.elastic_snapshot import remove_stale_temporaries, resume_from_newest, write_snapshot
from hvd.common import exceptions
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

#: Exit code of a rank that asks hvdrun for a new generation (EX_TEMPFAIL; C++'s
#: hvd::elastic::kRestartExitCode).
RESTART_EXIT_CODE = _core.ELASTIC_RESTART_EXIT_CODE
#: Exit code of a rank whose error a restart cannot fix: hvdrun ends the job instead of starting
#: a new generation (C++'s hvd::elastic::kFatalExitCode).
FATAL_EXIT_CODE = _core.ELASTIC_FATAL_EXIT_CODE
#: ``report_progress()`` tells hvdrun's step watchdog that this rank is alive. hvd calls it at
#: the start of the run, at every commit, and (a C++ thread started by the first call) whenever
#: a collective completed. Long rank-local work inside ``@hvd.elastic.run`` (validation on one
#: rank, a checkpoint, a compilation: no collective for longer than ``--elastic-step-timeout``)
#: calls it itself, e.g. every few batches, while the other ranks wait in their next
#: collective. hvd's own (Horovod has none). It lives in C++ for Python and libtorch programs
#: alike (optimizer/include/hvd/optim/elastic_progress.h); outside elastic mode it does nothing.
report_progress = _core.elastic_report_progress


def _env(name):
    """The elastic variables hvdrun sets for every rank (empty means unset)."""
    return os.environ.get(name) or None


def state_dir():
    """Where this host keeps the job's last committed snapshot; None outside elastic mode."""
    return _env("HVD_ELASTIC_STATE_DIR")


class State:
    """The state of an elastic job: saved at ``commit()``, restored after a failure.

    ``bcast_object(obj, root_rank)`` and ``get_rank()`` are the framework's; subclasses define
    save/restore/sync and how their saved state becomes bytes (``_dumps``/``_loads``).
    """

    def __init__(self, bcast_object, get_rank, allgather_object=None):
        self._bcast_object = bcast_object
        self._get_rank = get_rank
        self._allgather_object = allgather_object
        self._reset_callbacks = []
        self._host_updates = queue.Queue()
        self._last_host_update = 0
        self._launcher_host_seq = 0
        self._commit_id = 0

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after the state was reset to the last commit."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Queues a host change (timestamp, HostUpdateResult); noticed at the next commit."""
        self._host_updates.put((timestamp, update_res))

    def commit(self):
        """Saves the state (host memory and, under hvdrun's elastic mode, the host's snapshot
        file), then checks for host changes. Collective: every rank calls it at the same step."""
        self.save()
        self._commit_id += 1
        directory = state_dir()
        if directory is not None and basics.local_rank() == 0:
            write_snapshot(directory, self._commit_id, basics.size(), self._dumps())
        _core.elastic_report_commit(self._commit_id)  # progress, and a new commit for hvdrun
        self.check_host_updates()

    @property
    def commit_id(self):
        """How many commits the job has made (continues across generations)."""
        return self._commit_id

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when rank 0 has seen a host change.
        Collective (one 16-byte broadcast from rank 0), so every rank stops at the same step."""
        if self._get_rank() == 0:
            self._poll_launcher_host_updates()
        last, result = self._last_host_update, 0
        while not self._host_updates.empty():
            timestamp, res = self._host_updates.get()
            if timestamp > last:
                last = timestamp
            result |= int(res)
        last, result = _broadcast_host_update(last, result)
        if last > self._last_host_update:
            self._last_host_update = last
            # Only additions: the current workers keep their state (Horovod's skip_sync).
            raise HostsUpdatedInterrupt(skip_sync=result == HostUpdateResult.added)

    def _poll_launcher_host_updates(self):
        """hvdrun's elastic mode writes "<seq> <bits>" to $HVD_ELASTIC_HOSTS_FILE when its host
        source changed (runner/include/hvd/runner/wire.h, HOSTS); a new seq is a host update."""
        path = _env("HVD_ELASTIC_HOSTS_FILE")
        if path is None:
            return
        update = _core.elastic_read_host_update(path)  # the format lives in C++ (elastic_store.h)
        if update is None:
            return
        seq, bits = update
        if seq > self._launcher_host_seq:
            self._launcher_host_seq = seq
            self.on_hosts_updated(max(time.time(), self._last_host_update + 1e-6), bits)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass

    def _dumps(self):
        raise NotImplementedError()

    def _loads(self, payload):
        raise NotImplementedError()


def _broadcast_host_update(timestamp, bits):
    """Rank 0's (timestamp of its newest host update, update bits) on every rank: a single
    broadcast of two float64 (exact for a time.time() stamp and small bit flags), nothing
    pickled: it runs at every commit."""
    import numpy as np  # as in hvd.common.basics: numpy only where it is used
    import hvd.numpy
    buf = hvd.numpy.broadcast_(np.array([timestamp, bits], dtype=np.float64), root_rank=0,
                               name="hvd.elastic.host_updates")
    return float(buf[0]), int(buf[1])


class HostUpdateResult:
    """Bit flags of a host change (horovod.runner.elastic.worker.HostUpdateResult)."""
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class ObjectState(State):
    """State made of picklable attributes given as keyword arguments."""

    def __init__(self, bcast_object, get_rank, allgather_object=None, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object, get_rank, allgather_object)

    #: copy_field(value, previous copy): the copy save() keeps (TorchState's reuses tensors).
    _copy_field = staticmethod(lambda value, previous: copy.deepcopy(value))

    def save(self):
        old = self._saved_state
        self._saved_state = {k: self._copy_field(getattr(self, k), old[k]) for k in old}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root_rank=0,
                                                   name="hvd.elastic.object_state")
            self._set_attrs()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, copy.deepcopy(v))

    def _dumps(self):
        return pickle.dumps(self._saved_state, protocol=pickle.HIGHEST_PROTOCOL)

    def _loads(self, payload):
        self._saved_state = pickle.loads(payload)


def _start_generation(state):
    """Brings every rank to the same state at the start of the decorated function; returns
    True when it resumed from a committed snapshot (module docstring)."""
    directory = state_dir()
    if directory is None:
        state.sync()
        return False
    if basics.local_rank() == 0:
        remove_stale_temporaries(directory)
    snapshot = resume_from_newest(directory)
    if snapshot is None:
        state.sync()
        return False
    newest, payload = snapshot.commit_id, snapshot.payload
    state._loads(payload)
    state._commit_id = newest
    state.restore()
    state.on_reset()
    state.sync()
    return True


def _leave_generation(error):
    """A collective failed or hosts changed: under hvdrun's elastic mode end this process so
    that the next generation resumes from the last commit; otherwise let the error propagate."""
    if state_dir() is None:
        return
    sys.stderr.write(f"hvd.elastic: rank {basics.rank()}: {type(error).__name__}: {error}; "
                     f"leaving this generation (exit {RESTART_EXIT_CODE}) for hvdrun to restart "
                     "from the last commit\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(RESTART_EXIT_CODE)


def _restart_cannot_fix(error):
    """Whether `error` would fail every generation again at the same step: an invalid argument
    or ranks disagreeing about a collective (every rank gets it), an ElasticStateError, a
    ValueError or TypeError of the program. A HorovodInternalError otherwise (a lost peer, a
    failed backend, NotInitializedError after the runtime stopped) is worth a restart."""
    if isinstance(error, (_core.InvalidArgumentError, _core.MismatchError)):
        return True
    if isinstance(error, exceptions.ElasticStateError):
        return True
    if isinstance(error, (HorovodInternalError, HostsUpdatedInterrupt)):
        return False
    return isinstance(error, (ValueError, TypeError))


def _end_job(error):
    """Under hvdrun's elastic mode: print `error` with its traceback (as the interpreter would)
    and end this process with FATAL_EXIT_CODE, so that hvdrun ends the job instead of restarting
    it into the same error. Outside elastic mode: return (the error propagates)."""
    if state_dir() is None:
        return
    rank = basics.rank() if basics.is_initialized() else -1
    _print_and_exit(error, FATAL_EXIT_CODE,
                    f"hvd.elastic: rank {rank}: {type(error).__name__}: a restart cannot fix "
                    f"this error; ending the job (exit {FATAL_EXIT_CODE})\n")


def _end_rank(error):
    """Any other exception, under hvdrun's elastic mode: print it with its traceback (as the
    interpreter would) and end this process at once with the interpreter's exit code for it
    (1). Its peers' restart requests, which a normal exit (hvd's shutdown at exit) would send
    first, then do not hide it: hvdrun restarts the generation and quotes this error when it
    gives up (--max-restarts-without-progress). Outside elastic mode: return."""
    if state_dir() is None:
        return
    _print_and_exit(error, 1)


def _print_and_exit(error, code, line=""):
    """`error` with its traceback on stderr (as the interpreter prints it), then `line`, then
    the end of this process with `code` at once (os._exit: no atexit, no hvd shutdown)."""
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    sys.stderr.write(line)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _report_completion():
    path = _env("HVD_ELASTIC_COMPLETION_FILE")
    if path is not None:
        # In the state directory: never through a planted link (O_NOFOLLOW).
        fd = os.open(path, os.O_NOFOLLOW | os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "w") as f:
            f.write("done\n")


def run_fn(func, reset=None):
    """The body of ``@hvd.elastic.run``: ``func(state, *args, **kwargs)`` with the state brought
    in step first (resumed from the newest commit when one exists). ``reset`` is accepted for
    Horovod's signature; hvd restarts processes instead of re-initializing them."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not basics.is_initialized():
            basics.init()
        report_progress()  # arms hvdrun's step watchdog
        try:
            # Inside the try: a rank lost during the resume broadcast is a restart, too.
            _start_generation(state)
            result = func(state, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - sorted below; everything else propagates
            if _restart_cannot_fix(e):
                _end_job(e)
            elif isinstance(e, (HorovodInternalError, HostsUpdatedInterrupt)):
                _leave_generation(e)
            else:
                _end_rank(e)
            raise
        _report_completion()
        return result

    return wrapper


__all__ = ["FATAL_EXIT_CODE", "HostUpdateResult", "ObjectState", "RESTART_EXIT_CODE", "State",
           "report_progress", "run_fn", "state_dir"]
