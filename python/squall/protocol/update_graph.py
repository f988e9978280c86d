"""The ``update-graph`` message, client side, and the call specs of a ``map`` batch.

The payload is encoded in Rust (``squall._core.encode_update_graph``) and decoded there
too (``Scheduler.submit_wire``), making no Python object per task; its layout is
described once, in ``rust/squall-wire/src/graph.rs`` (summed up in
docs/protocol.md#update-graph).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import chain, repeat
from typing import Any

from squall._core import encode_update_graph
from squall.protocol.specs import PLAIN_TYPES, make_spec

Key = Hashable

# The kwargs of every plain map item: pickled, never mutated.
_NO_KWARGS: dict[str, Any] = {}


def encode(
    keys: Sequence[Key],
    specs: Sequence[bytes | None],
    deps: Sequence[Sequence[Key]] | None = None,
    blobs: Sequence[bytes] = (),
) -> tuple[int, int, bytes, dict[Key, int]]:
    """``(n, keys_bytes, payload, index of each task key)`` for ``update-graph`` (``n``
    and ``keys_bytes`` go in its header); ``deps=None`` means no task has dependencies.
    A dependency that is not one of ``keys`` is sent as an external key; ``blobs``
    (bytes the specs share) are sent once and cut out of the specs."""
    n, keys_bytes, payload = encode_update_graph(keys, specs, deps, list(blobs))
    return n, keys_bytes, payload, dict(zip(keys, range(n), strict=True))


def call_specs(
    prefix: bytes,
    columns: Sequence[Sequence[Any]],
    kwargs: Mapping[str, Any],
    to_dep: Callable[[Any], Key | None],
) -> tuple[list[bytes], list[list[Key]] | None]:
    """``make_spec(prefix, args, kwargs, to_dep)`` for every ``args`` of
    ``zip(*columns)`` (a map batch, one column per iterable): the specs and their
    dependencies (None when no call has any). Calls on plain values only (the usual map)
    are pickled in C loops, the same bytes ``make_spec`` writes."""
    calls = zip(*columns, strict=True)
    if not kwargs and all(map(PLAIN_TYPES.__contains__, map(type, chain.from_iterable(columns)))):
        pickled = map(pickle.dumps, zip(calls, repeat(_NO_KWARGS)), repeat(5))
        return list(map(prefix.__add__, pickled)), None
    made = [make_spec(prefix, args, kwargs, to_dep) for args in calls]
    deps = [d for _, d in made]
    return [s for s, _ in made], deps if any(deps) else None
