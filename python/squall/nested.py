"""The one walk over values nested in lists, tuples, sets and dicts: futures in a call's
arguments and their values in their place, futures in what ``gather`` is given and
their values in their place, keys in what dask asks for and their values."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

#: What a leaf function answers for an item that is not a leaf: walk into it if it is a
#: container, otherwise keep it.
DESCEND: Any = object()
#: What a leaf function answers for an item to leave out of its container.
DROP: Any = object()

# The containers walked into; with ``subclasses``, what their subclasses become.
_SEQUENCES: tuple[type, ...] = (list, tuple, set, frozenset)


def rebuild(obj: Any, leaf: Callable[[Any], Any], *, subclasses: bool = False) -> Any:
    """``obj`` with ``leaf(x)`` in place of every item ``x``, at any depth of lists,
    tuples, sets, frozensets and dict values, for which ``leaf`` does not answer
    :data:`DESCEND` (:data:`DROP`: the item is left out). Only containers of exactly
    these types are walked into, or also their subclasses with ``subclasses``: one
    that changes becomes its base type then (a namedtuple stays one), as distributed's
    ``parse_input`` does. A container in which nothing changed is returned as it is."""
    new = leaf(obj)
    if new is not DESCEND:
        return new
    t = type(obj)
    if t in _SEQUENCES or (subclasses and isinstance(obj, _SEQUENCES)):
        items = [rebuild(o, leaf, subclasses=subclasses) for o in obj]
        if all(map(operator.is_, items, obj)):
            return obj
        items = [x for x in items if x is not DROP]
        if t in _SEQUENCES:
            return t(items)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return obj._make(items)  # type: ignore[attr-defined]  # a namedtuple
        return next(base for base in _SEQUENCES if isinstance(obj, base))(items)
    if t is dict or (subclasses and isinstance(obj, dict)):
        values = {k: rebuild(v, leaf, subclasses=subclasses) for k, v in obj.items()}
        if all(map(operator.is_, values.values(), obj.values())):
            return obj
        return {k: v for k, v in values.items() if v is not DROP}
    return obj
