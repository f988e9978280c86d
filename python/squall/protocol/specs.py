"""Run specs: how a client describes a task and a worker runs it.

A spec is opaque bytes to the scheduler, one of two kinds:

* a **call spec** (``submit``/``map``): :func:`call_prefix` (the cloudpickled
  function's bytes behind a tag and their length), then ``pickle((args, kwargs))`` in
  which every dependency (a future passed as an argument) has been replaced by a
  :class:`Dep` marker that the worker fills with the dependency's value. The function's
  bytes are shared by every spec of a ``map`` and unpickled once per worker process
  (:func:`load_function`, cached by their content), and the worker's compiled loop
  calls such a spec without going through Python code of its own. The format and the
  cache are Rust's (squall-wire's ``spec``, ``squall._core``), the only side that reads
  call specs on the hot path: this module uses them rather than spelling them again;
* a pickled dask task-spec node (``dask._task_spec.GraphNode``, from collections),
  called with the values of its dependencies (pickles start with ``0x80``).
"""

from __future__ import annotations

import pickle
import sys
import types
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from squall._core import call_node, call_prefix, load_function, split_call
from squall.protocol.nested import DESCEND, rebuild

__all__ = [
    "PLAIN_TYPES",
    "Dep",
    "call_prefix",
    "fill_call",
    "function_prefix",
    "load_function",
    "make_spec",
    "run_spec",
]

# Argument types pickle can write exactly as cloudpickle would.
PLAIN_TYPES = frozenset({int, float, str, bytes, bool, type(None)})


@dataclass(frozen=True)
class Dep:
    """Stands for the value of task ``key`` inside a spec's arguments."""

    key: Hashable


#: ``function_prefix``'s cache: at most this many functions, then no more are added.
PREFIX_CACHE_SIZE = 1024
_prefixes: dict[Callable[..., Any], bytes] = {}


def function_prefix(func: Callable[..., Any]) -> bytes:
    """``call_prefix(cloudpickle.dumps(func))``, cached for a function pickled by
    reference (its module's name and its own): a ``submit`` loop on one function
    pickles it once. Whether it still is (its module may have been registered by value
    since, or the name rebound) is checked on each use. A function pickled by value (a
    lambda, a closure, one from ``__main__`` or from a module registered with
    cloudpickle's ``register_pickle_by_value``) carries its code and globals, which
    may change, and is pickled anew each time."""
    prefix = _prefixes.get(func) if type(func) is types.FunctionType else None
    if prefix is not None and _by_reference(func):
        return prefix
    prefix = call_prefix(cloudpickle.dumps(func))
    if len(_prefixes) < PREFIX_CACHE_SIZE and _by_reference(func):
        _prefixes[func] = prefix
    return prefix


def _by_reference(func: Callable[..., Any]) -> bool:
    """Whether cloudpickle writes ``func`` as a reference: a Python function that its
    module (imported, not ``__main__``, not registered by value) names. (A function's
    hash is its identity; a builtin method's may be its object's, or fail.)"""
    if type(func) is not types.FunctionType:
        return False
    name, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
    if not isinstance(name, str) or name == "__main__" or _registered_by_value(name):
        return False
    module = sys.modules.get(name)
    if module is None:
        return False
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj is func


def _registered_by_value(module: str) -> bool:
    registered = cloudpickle.list_registry_pickle_by_value()
    return bool(registered) and any(module == r or module.startswith(r + ".") for r in registered)


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
    deps: dict[Hashable, None] = {}  # a dict: ordered and O(1) for calls on many futures

    def marker(obj: Any) -> Any:
        key = to_dep(obj)
        if key is None:
            return DESCEND
        deps[key] = None
        return Dep(key)

    # Futures at any depth of lists, tuples, sets and dicts, their subclasses too (as
    # distributed's ``parse_input``).
    call = (rebuild(args, marker, True), rebuild(dict(kwargs), marker, True))
    return prefix + cloudpickle.dumps(call, protocol=5), list(deps)


def fill_call(
    args: tuple[Any, ...], kwargs: dict[str, Any], data: Mapping[Hashable, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call spec's arguments with its dependencies' values in place of the markers."""

    def value(obj: Any) -> Any:
        return data[obj.key] if type(obj) is Dep else DESCEND

    # Runs for every task with dependencies: calls seldom have keyword arguments.
    return rebuild(args, value, True), (rebuild(kwargs, value, True) if kwargs else kwargs)


def run_spec(spec: bytes, data: Mapping[Hashable, Any]) -> Any:
    """Run a spec with its dependencies' values taken from ``data``."""
    parts = split_call(spec)
    if parts is not None:
        blob, call = parts
        args, kwargs = pickle.loads(call)
        if data:
            args, kwargs = fill_call(args, kwargs, data)
        return load_function(blob)(*args, **kwargs)
    return call_node(pickle.loads(spec), data)
