"""The ``update-graph`` message, client side (the scheduler decodes it in Rust,
``Scheduler.submit_wire``, making no Python object per task).

Payload: ``keys | i64 spec sizes[n] | u32 dependency offsets[n + 1] | u32 dependency
indices | specs``. ``keys`` (``encode_keys`` form, ``keys_bytes`` long) holds the n task
keys followed by the external keys (already known to the scheduler) they depend on; a
dependency index ``>= n`` names external key ``index - n``. A spec size of -1 marks a
task without a spec (data).
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence
from itertools import accumulate, repeat
from typing import Any

from squall._core import encode_keys

Key = Hashable


def encode(
    keys: Sequence[Key], specs: Sequence[bytes | None], deps: Sequence[Sequence[Key]]
) -> tuple[dict[str, Any], bytes, dict[Key, int]]:
    """``(header fields, payload, index of each task key)`` for ``update-graph``."""
    n = len(keys)
    index = dict(zip(keys, range(n), strict=True))
    # Whole-graph C-level passes (a per-dependency Python loop costs ~1 us each).
    flat = [k for ds in deps for k in ds]
    found = list(map(index.get, flat, repeat(-1)))
    external: dict[Key, int] = {}
    if found and min(found) < 0:
        for j, i in enumerate(found):
            if i < 0:
                found[j] = n + external.setdefault(flat[j], len(external))
    offsets = array("I", accumulate(map(len, deps), initial=0))
    indices = array("I", found)
    keys_bytes = encode_keys([*keys, *external])
    sizes = array("q", [-1 if s is None else len(s) for s in specs])
    payload = b"".join(
        [keys_bytes, sizes.tobytes(), offsets.tobytes(), indices.tobytes()]
        + [s for s in specs if s is not None]
    )
    return {"op": "update-graph", "n": n, "keys_bytes": len(keys_bytes)}, payload, index
