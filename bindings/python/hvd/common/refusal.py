# SPDX-License-Identifier: Apache-2.0
"""One rank's mistake fails every rank's call (what hvd.torch and hvd.numpy share).

A mistake this rank makes before its call reaches hvd's core (an unsupported dtype or device,
a sparse tensor, an invalid op, reducescatter with Adasum, a non-tensor or non-array, an
argument out of range) would leave the other ranks waiting for it. `refusing(op)` wraps a
collective so that such a call is refused through negotiation instead (every rank's call of it
fails at once, naming this rank), then the mistake is raised here as it was.
"""
import functools
import inspect
import threading

from hvd import _core
from hvd.common.basics import _set_id, global_process_set
from hvd.common.exceptions import HorovodInternalError

MISTAKES = (ValueError, TypeError, NotImplementedError, AttributeError, RuntimeError,
            OverflowError)

_calls = threading.local()  # .n: calls that returned on this thread (one submitted or more)


def refusing(op, grouped=False, items="tensors"):
    """Decorator: a mistake raised by the wrapped collective `op` before it submitted anything
    is refused on every rank. `grouped`: the call takes a list named `items`."""
    def deco(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            before = getattr(_calls, "n", 0)
            try:
                out = fn(*args, **kwargs)
            except MISTAKES as e:
                # Only before anything was submitted (a wrapper failing after its inner call
                # submitted must not refuse a second call), and not the core's own refusals.
                if (not isinstance(e, HorovodInternalError) and getattr(_calls, "n", 0) == before
                        and not getattr(e, "_hvd_refused", False)):
                    _refuse(op, grouped and items, sig, args, kwargs, e)
                raise
            _calls.n = getattr(_calls, "n", 0) + 1
            return out
        return call
    return deco


def _refuse(op, items, sig, args, kwargs, err):
    err._hvd_refused = True
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return  # not even a call of `op`: nothing the other ranks could pair it with
    a = bound.arguments
    size = 0
    if items:
        try:
            size = max(len(a.get(items)), 1)
        except TypeError:
            size = 1
    refuse(op, a.get("name") or "", size, f"{type(err).__name__}: {err}",
           a.get("process_set", global_process_set))


def refuse(op, name, size, reason, process_set):
    """Refuses this rank's call of `op` (`size` members of a grouped call, or 0) named `name`
    on `process_set` through negotiation: every rank's call of it fails with `reason`. Returns
    (the refusal raised here is left to the caller's own error)."""
    try:
        ps = _set_id(process_set)
    except (TypeError, ValueError):
        ps = None  # a set never registered, or removed: the core cannot name it either
    try:
        if ps is None:
            _core.refuse_call_without_set(op, name, reason)
        else:
            _core.refuse_call(op, name, size, reason, ps)
    except HorovodInternalError:
        pass  # the refusal itself, raised on this rank as the caller's error instead
    except Exception:  # noqa: BLE001 - no set, not initialised: the caller's error says enough
        pass
