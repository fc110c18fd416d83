# SPDX-License-Identifier: Apache-2.0
"""What a TorchState commit costs: the copy of the state kept in memory and its bytes.

``copy_into(value, old)`` is ``copy.deepcopy(value)`` for the values a state dict holds (dicts,
lists, tuples, sets, tensors, numbers, strings), except that a tensor of ``old`` with the same
place, shape, dtype and device is reused as the buffer of the new copy (``copy_``): a commit
allocates nothing once the shapes have settled, and a Python set of sample indices is copied at C
speed (a set's elements are hashable, hence treated as immutable). Anything else is deep-copied.

``dumps(obj)``/``loads(payload)`` are the snapshot's payload: the object pickled with each plain
tensor in its dicts, lists and tuples replaced by (dtype, shape, offset, length) and the tensors'
bytes appended after the pickle, one copy each (torch.save writes a zip archive with one record per
tensor: several times slower for a small model). A payload written by torch.save still loads.
"""
import collections
import copy
import io
import pickle
import struct

import torch

_ATOMS = (int, float, complex, str, bytes, bool, type(None), torch.dtype, torch.device)
_MAGIC = b"HVDSTATE1"
_LENGTH = struct.Struct("<Q")


def _reusable(value, old):
    return (isinstance(old, torch.Tensor) and old is not value and old.layout == torch.strided and
            value.layout == torch.strided and old.shape == value.shape and
            old.dtype == value.dtype and old.device == value.device and
            old.requires_grad == value.requires_grad and not old.is_quantized)


def copy_into(value, old=None):
    """A deep copy of ``value``; tensors reuse ``old``'s matching tensors (module docstring)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if isinstance(value, torch.Tensor):
        if _reusable(value, old):
            if old.requires_grad:  # a leaf that requires grad is written under no_grad only
                with torch.no_grad():
                    old.copy_(value)
            else:
                old.copy_(value)
            return old
        return copy.deepcopy(value)
    if kind is dict or kind is collections.OrderedDict:
        olds = old if isinstance(old, dict) else {}
        out = kind((k, copy_into(v, olds.get(k))) for k, v in value.items())
        metadata = getattr(value, "_metadata", None)  # a module's state_dict: its versions
        if metadata is not None:
            out._metadata = copy_into(metadata)
        return out
    if kind is list or kind is tuple:
        olds = old if type(old) is kind and len(old) == len(value) else (None,) * len(value)
        items = [copy_into(v, o) for v, o in zip(value, olds)]
        return items if kind is list else tuple(items)
    if kind is set or kind is frozenset:
        return kind(value)
    return copy.deepcopy(value)


class _Ref:
    """A tensor's place in the bytes after the pickle: (dtype, shape, offset, length)."""
    __slots__ = ("where",)

    def __init__(self, *where):
        self.where = where

    def __reduce__(self):
        return _Ref, self.where


def _plain(t):
    return (type(t) is torch.Tensor and t.layout == torch.strided and not t.is_quantized and
            not t.requires_grad)


def _lift(obj, chunks, offset):
    """obj with its plain tensors (inside dicts, lists and tuples) replaced by _Ref, their bytes
    appended to chunks; returns (obj, the offset after them). Sets and other objects are left
    whole (a tensor inside them is pickled by torch's own reduction)."""
    kind = type(obj)
    if kind is torch.Tensor and _plain(obj):
        data = obj.detach().cpu().contiguous().reshape(-1)
        n = data.numel() * data.element_size()
        if n:
            try:
                chunks.append(data.view(torch.uint8).numpy())
            except (RuntimeError, TypeError):  # a dtype without a byte view: pickled whole
                return obj, offset
        return _Ref(obj.dtype, tuple(obj.shape), offset, n), offset + n
    if kind is dict or kind is collections.OrderedDict:
        out = kind()
        for k, v in obj.items():
            out[k], offset = _lift(v, chunks, offset)
        metadata = getattr(obj, "_metadata", None)
        if metadata is not None:
            out._metadata = metadata
        return out, offset
    if kind is list or kind is tuple:
        items = []
        for v in obj:
            v, offset = _lift(v, chunks, offset)
            items.append(v)
        return (items if kind is list else tuple(items)), offset
    return obj, offset


def _lower(obj, data):
    """The inverse of _lift: each _Ref becomes a tensor of its bytes in data."""
    kind = type(obj)
    if kind is _Ref:
        dtype, shape, offset, n = obj.where
        if n == 0:
            return torch.empty(shape, dtype=dtype)
        raw = bytearray(data[offset:offset + n])
        return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)
    if kind is dict or kind is collections.OrderedDict:
        for k, v in obj.items():
            obj[k] = _lower(v, data)
        return obj
    if kind is list:
        obj[:] = [_lower(v, data) for v in obj]
        return obj
    if kind is tuple:
        return tuple(_lower(v, data) for v in obj)
    return obj


def dumps(obj):
    """The payload of ``obj`` (module docstring)."""
    chunks = []
    lifted, _ = _lift(obj, chunks, 0)
    pickled = pickle.dumps(lifted, protocol=pickle.HIGHEST_PROTOCOL)
    return b"".join([_MAGIC, _LENGTH.pack(len(pickled)), pickled, *chunks])


def loads(payload):
    """The object of a payload written by ``dumps`` (or by torch.save), tensors on the CPU."""
    view = memoryview(payload)
    if bytes(view[:len(_MAGIC)]) != _MAGIC:
        # hvd's own snapshot, written by this job: every object loads, as torch < 2.6 did by
        # default (2.6 defaults to weights_only=True, which refuses e.g. a field's class).
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
    start = len(_MAGIC) + _LENGTH.size
    (length,) = _LENGTH.unpack(view[len(_MAGIC):start])
    return _lower(pickle.loads(view[start:start + length]), view[start + length:])
