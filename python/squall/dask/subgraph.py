"""Fused tasks run in an order from squall's compiled ``order``.

dask's blockwise fusion makes one task per output chunk that runs a small inner graph
(``dask._task_spec._execute_subgraph``). dask orders that inner graph with its
Python ``dask.order`` at every call, which was most of such a task's cost on a worker
(docs/runtime.md#fused-tasks). :func:`execute_subgraph` takes the same arguments and
gives the same value; the client pickles it in place of dask's
(:mod:`squall.dask.graphs`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from dask._task_spec import GraphNode

from squall._core import order_mapping

Key = Hashable


def execute_subgraph(
    inner_dsk: Mapping[Key, GraphNode], outkey: Key, inkeys: tuple[Key, ...], *dependencies: Any
) -> Any:
    """The value of ``outkey`` in ``inner_dsk``, whose inputs ``inkeys`` have the values
    ``dependencies``. Nodes run in the order ``squall.order`` gives the inner graph
    (its inputs are data outside it); a value is dropped once the nodes that need it
    have run, as dask drops it."""
    dsk = inner_dsk if type(inner_dsk) is dict else dict(inner_dsk)
    priority = order_mapping(dsk)
    keys = sorted(priority, key=priority.__getitem__)
    cache: dict[Key, Any] = dict(zip(inkeys, dependencies, strict=False))  # as dask's
    if len(keys) <= 2:  # nothing to drop before the end
        for key in keys:
            cache[key] = dsk[key](cache)
        return cache[outkey]
    left: dict[Key, int] = {}
    for node in dsk.values():
        for dep in node.dependencies:
            left[dep] = left.get(dep, 0) + 1
    for key in keys:
        node = dsk[key]
        cache[key] = node(cache)
        for dep in node.dependencies:
            left[dep] -= 1
            if not left[dep] and dep != outkey:
                del cache[dep]
    return cache[outkey]
