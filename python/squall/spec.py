"""Run specs: how a client describes a task and a worker runs it.

A spec is opaque bytes to the scheduler, one of two pickles:

* ``cloudpickle((func, args, kwargs))`` (``submit``/``map``) where every dependency (a
  future passed as an argument) has been replaced by a :class:`Dep` marker; the worker
  substitutes the dependency's value before calling;
* a dask task-spec node (``dask._task_spec.GraphNode``, from collections), called with
  the values of its dependencies.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

# Argument types pickle can write exactly as cloudpickle would.
_PLAIN = frozenset({int, float, str, bytes, bool, type(None)})


@functools.lru_cache(maxsize=256)
def load_function(blob: bytes) -> Callable[..., Any]:
    """A function pickled once on the client, unpickled once per worker process."""
    func: Callable[..., Any] = cloudpickle.loads(blob)
    return func


@dataclass(frozen=True)
class Dep:
    """Stands for the value of task ``key`` inside a spec's arguments."""

    key: Hashable


class PickledFunction:
    """A function pickled once; calling it unpickles (cached per process) and calls.

    ``map`` puts this in every per-item spec so the function is pickled once per batch
    instead of once per item."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return load_function(self.blob)(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return PickledFunction, (self.blob,)


def _replace(
    obj: Any, deps: dict[Hashable, None], to_dep: Callable[[Any], Hashable | None]
) -> Any:
    key = to_dep(obj)
    if key is not None:
        deps[key] = None  # a dict: ordered and O(1) for calls on many futures
        return Dep(key)
    if type(obj) in (list, tuple, set, frozenset):
        return type(obj)(_replace(o, deps, to_dep) for o in obj)
    if type(obj) is dict:
        return {k: _replace(v, deps, to_dep) for k, v in obj.items()}
    return obj


def make_spec(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    to_dep: Callable[[Any], Hashable | None],
) -> tuple[bytes, list[Hashable]]:
    """Pickle a call; ``to_dep(obj)`` names the key an argument stands for (a future)
    or returns None. Returns the spec and the dependency keys, in first-seen order."""
    if type(func) is PickledFunction and not kwargs and all(type(a) in _PLAIN for a in args):
        # Plain values (the common map item) need neither futures replaced nor
        # cloudpickle, which is several times slower than pickle for small calls.
        return pickle.dumps((func, args, {}), protocol=5), []
    deps: dict[Hashable, None] = {}
    call = (func, _replace(args, deps, to_dep), _replace(dict(kwargs), deps, to_dep))
    return cloudpickle.dumps(call), list(deps)


def _fill(obj: Any, data: Mapping[Hashable, Any]) -> Any:
    if isinstance(obj, Dep):
        return data[obj.key]
    if type(obj) in (list, tuple, set, frozenset):
        return type(obj)(_fill(o, data) for o in obj)
    if type(obj) is dict:
        return {k: _fill(v, data) for k, v in obj.items()}
    return obj


def run_spec(spec: bytes, data: Mapping[Hashable, Any]) -> Any:
    """Run a spec with its dependencies' values taken from ``data``."""
    obj = cloudpickle.loads(spec)
    if type(obj) is tuple:
        func, args, kwargs = obj
        if not data:  # no dependencies: nothing to substitute
            return func(*args, **kwargs)
        return func(*_fill(args, data), **_fill(kwargs, data))
    return obj({k: data[k] for k in obj.dependencies})
