"""Run specs: how a client describes a task and a worker runs it.

A spec is opaque bytes to the scheduler, one of two kinds:

* a **call spec** (``submit``/``map``): ``b"\\x01"``, the u32 little-endian length of the
  cloudpickled function, those bytes, then ``pickle((args, kwargs))`` in which every
  dependency (a future passed as an argument) has been replaced by a :class:`Dep`
  marker that the worker fills with the dependency's value. The function's bytes are
  shared by every spec of a ``map`` and unpickled once per worker process (cached by
  their content), and the worker's compiled loop calls such a spec without going
  through Python code of its own;
* a pickled dask task-spec node (``dask._task_spec.GraphNode``, from collections),
  called with the values of its dependencies (pickles start with ``0x80``).
"""

from __future__ import annotations

import functools
import operator
import pickle
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

# Argument types pickle can write exactly as cloudpickle would.
PLAIN_TYPES = frozenset({int, float, str, bytes, bool, type(None)})


@functools.lru_cache(maxsize=256)
def load_function(blob: bytes) -> Callable[..., Any]:
    """A function pickled once on the client, unpickled once per worker process."""
    func: Callable[..., Any] = cloudpickle.loads(blob)
    return func


@dataclass(frozen=True)
class Dep:
    """Stands for the value of task ``key`` inside a spec's arguments."""

    key: Hashable


CALL_TAG = 1


def call_prefix(func_blob: bytes) -> bytes:
    """The part of a call spec naming the function (shared by a ``map``'s specs)."""
    return bytes((CALL_TAG,)) + len(func_blob).to_bytes(4, "little") + func_blob


def _replace(
    obj: Any, deps: dict[Hashable, None], to_dep: Callable[[Any], Hashable | None]
) -> Any:
    """``obj`` with the futures in it (at any depth of lists, tuples, sets and dicts,
    their subclasses too, as distributed's ``parse_input``) replaced by :class:`Dep`
    markers. A container holding none is returned as it is; one holding some is rebuilt
    as its base type (a namedtuple as itself), as distributed does."""
    key = to_dep(obj)
    if key is not None:
        deps[key] = None  # a dict: ordered and O(1) for calls on many futures
        return Dep(key)
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [_replace(o, deps, to_dep) for o in obj]
        if all(map(operator.is_, items, obj)):
            return obj
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return obj._make(items)  # type: ignore[attr-defined]  # a namedtuple
        return next(t for t in _BASES if isinstance(obj, t))(items)
    if isinstance(obj, dict):
        values = {k: _replace(v, deps, to_dep) for k, v in obj.items()}
        if all(map(operator.is_, values.values(), obj.values())):
            return obj
        return values
    return obj


# The types a container subclass holding futures can become.
_BASES: tuple[type, ...] = (list, tuple, set, frozenset)


def make_spec(
    prefix: bytes,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    to_dep: Callable[[Any], Hashable | None],
) -> tuple[bytes, list[Hashable]]:
    """A call spec of the function named by ``prefix`` (:func:`call_prefix`);
    ``to_dep(obj)`` names the key an argument stands for (a future) or returns None.
    Returns the spec and the dependency keys, in first-seen order."""
    if not kwargs and all(type(a) in PLAIN_TYPES for a in args):
        # Plain values (the common map item) need neither futures replaced nor
        # cloudpickle, which is several times slower than pickle for small calls.
        return prefix + pickle.dumps((args, {}), protocol=5), []
    deps: dict[Hashable, None] = {}
    call = (_replace(args, deps, to_dep), _replace(dict(kwargs), deps, to_dep))
    return prefix + cloudpickle.dumps(call, protocol=5), list(deps)


def _fill(obj: Any, data: Mapping[Hashable, Any]) -> Any:
    if isinstance(obj, Dep):
        return data[obj.key]
    t = type(obj)
    if t in _BASES:
        return t(_fill(o, data) for o in obj)
    if t is dict:
        return {k: _fill(v, data) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return obj._make(_fill(o, data) for o in obj)  # type: ignore[attr-defined]
    return obj


def fill_call(
    args: tuple[Any, ...], kwargs: dict[str, Any], data: Mapping[Hashable, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call spec's arguments with its dependencies' values in place of the markers."""
    return _fill(args, data), _fill(kwargs, data)


def split_call(spec: bytes) -> tuple[bytes, bytes]:
    """A call spec's function bytes and its pickled ``(args, kwargs)``."""
    n = int.from_bytes(spec[1:5], "little")
    return spec[5 : 5 + n], spec[5 + n :]


def run_spec(spec: bytes, data: Mapping[Hashable, Any]) -> Any:
    """Run a spec with its dependencies' values taken from ``data``."""
    if spec[:1] == bytes((CALL_TAG,)):
        blob, call = split_call(spec)
        args, kwargs = pickle.loads(call)
        if data:
            args, kwargs = fill_call(args, kwargs, data)
        return load_function(blob)(*args, **kwargs)
    node = pickle.loads(spec)
    return node({k: data[k] for k in node.dependencies})
