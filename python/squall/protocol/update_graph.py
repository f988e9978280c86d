"""The ``update-graph`` message, client side, and the call specs of a ``map`` batch.

The scheduler decodes it in Rust (``Scheduler.submit_wire``), making no Python object
per task.

Payload: ``keys | i64 spec sizes[n] | u32 dependency offsets[n + 1] | u32 dependency
indices | specs``. ``keys`` (``encode_keys`` form, ``keys_bytes`` long) holds the n task
keys followed by the external keys (already known to the scheduler) they depend on; a
dependency index ``>= n`` names external key ``index - n``. A spec size of -1 marks a
task without a spec (data).
"""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import accumulate, chain, repeat
from typing import Any

from squall._core import encode_keys
from squall.protocol.specs import PLAIN_TYPES, make_spec

Key = Hashable

# The kwargs of every plain map item: pickled, never mutated.
_NO_KWARGS: dict[str, Any] = {}


def encode(
    keys: Sequence[Key],
    specs: Sequence[bytes | None],
    deps: Sequence[Sequence[Key]] | None = None,
) -> tuple[int, int, bytes, dict[Key, int]]:
    """``(n, keys_bytes, payload, index of each task key)`` for ``update-graph``;
    ``deps=None`` means no task has dependencies."""
    n = len(keys)
    index = dict(zip(keys, range(n), strict=True))
    external: dict[Key, int] = {}
    if deps is None or not any(deps):
        offsets = array("I", bytes(4 * (n + 1)))
        indices = array("I")
    else:
        # Whole-graph C-level passes (a per-dependency Python loop costs ~1 us each).
        flat = [k for ds in deps for k in ds]
        found = list(map(index.get, flat, repeat(-1)))
        if found and min(found) < 0:
            for j, i in enumerate(found):
                if i < 0:
                    found[j] = n + external.setdefault(flat[j], len(external))
        offsets = array("I", accumulate(map(len, deps), initial=0))
        indices = array("I", found)
    keys_bytes = encode_keys([*keys, *external] if external else keys)
    # C loops for the usual case of every task having a spec.
    if None in specs:
        sizes = array("q", [-1 if s is None else len(s) for s in specs])
        parts: Sequence[bytes] = [s for s in specs if s is not None]
    else:
        sizes = array("q", list(map(len, specs)))  # type: ignore[arg-type]  # no None left
        parts = specs  # type: ignore[assignment]
    payload = b"".join(
        chain((keys_bytes, sizes.tobytes(), offsets.tobytes(), indices.tobytes()), parts)
    )
    return n, len(keys_bytes), payload, index


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
