"""Fused tasks run without dask's per-call ordering.

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

from squall._core import call_node, order_mapping

Key = Hashable


def execute_subgraph(
    inner_dsk: Mapping[Key, GraphNode], outkey: Key, inkeys: tuple[Key, ...], *dependencies: Any
) -> Any:
    """The value of ``outkey`` in ``inner_dsk``, whose inputs ``inkeys`` have the values
    ``dependencies``. A chain (each node needing at most one other) runs in its only
    order; other graphs in the order ``squall.order`` gives them (their inputs are
    data outside them). A value is dropped once the nodes that need it have run, as
    dask drops it."""
    dsk = inner_dsk if type(inner_dsk) is dict else dict(inner_dsk)
    cache: dict[Key, Any] = dict(zip(inkeys, dependencies, strict=False))  # as dask's
    chain = _chain(dsk, outkey)
    if chain is not None:
        for before, key in zip([None, *chain], chain, strict=False):
            cache[key] = call_node(dsk[key], cache)
            if before is not None:
                del cache[before]  # a chain's link is needed by the next one only
        return cache[outkey]
    priority = order_mapping(dsk)
    left: dict[Key, int] = {}
    for node in dsk.values():
        for dep in node.dependencies:
            left[dep] = left.get(dep, 0) + 1
    for key in sorted(priority, key=priority.__getitem__):
        node = dsk[key]
        cache[key] = call_node(node, cache)
        for dep in node.dependencies:
            left[dep] -= 1
            if not left[dep] and dep != outkey:
                del cache[dep]
    return cache[outkey]


def _chain(dsk: dict[Key, GraphNode], outkey: Key) -> list[Key] | None:
    """The keys of ``dsk`` in dependency order if it is one chain ending at ``outkey``
    (each node needs at most one other node of it), else None."""
    chain: list[Key] = []
    key: Key | None = outkey
    while key is not None:
        if len(chain) == len(dsk):
            return None  # a cycle: squall.order reports it
        chain.append(key)
        inside = [d for d in dsk[key].dependencies if d in dsk]
        if len(inside) > 1:
            return None
        key = inside[0] if inside else None
    if len(chain) != len(dsk):
        return None  # nodes off the chain
    chain.reverse()
    return chain
