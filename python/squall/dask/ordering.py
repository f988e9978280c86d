"""``squall.order``: a drop-in, faster ``dask.order.order``."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from squall._core import order_mapping

Key = Hashable


def order(
    dsk: Mapping[Key, Any], dependencies: Mapping[Key, Iterable[Key]] | None = None
) -> dict[Key, int]:
    """Order the nodes of a Dask graph; lower numbers should run first.

    Same contract as ``dask.order.order``: a graph mapping (task-spec nodes or legacy
    tuples) in, ``{key: int}`` out. Dependencies are taken from ``dependencies`` when
    given, else from each node (``.dependencies``, or by walking a legacy task's
    arguments as ``dask.core.get_dependencies`` does). Dependencies outside the graph
    are treated as existing data and left out of the result. Raises
    ``squall.CycleError`` on a cycle.

    The graph is read and ordered in Rust; the ordering runs without the GIL.
    """
    if type(dsk) is not dict:
        dsk = dict(dsk)
    return order_mapping(dsk, dependencies)
