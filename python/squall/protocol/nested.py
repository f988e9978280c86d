"""The one walk over values nested in lists, tuples, sets and dicts.

It finds futures in a call's arguments and puts their values in their place, finds
futures in what ``gather`` is given and puts their values in their place, and puts
values in place of the keys dask asks for.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import repeat
from typing import Any

#: What a leaf function answers for an item that is not a leaf: walk into it if it is a
#: container, otherwise keep it.
DESCEND: Any = object()
#: What a leaf function answers for an item to leave out of its container.
DROP: Any = object()

# The containers walked into; with ``subclasses``, what their subclasses become.
_SEQUENCES: tuple[type, ...] = (list, tuple, set, frozenset)
_EXACT = frozenset(_SEQUENCES)
_is = operator.is_


def rebuild(obj: Any, leaf: Callable[[Any], Any], subclasses: bool = False) -> Any:
    """``obj`` with ``leaf(x)`` in place of every item ``x``, at any depth of lists,
    tuples, sets, frozensets and dict values, for which ``leaf`` does not answer
    :data:`DESCEND` (:data:`DROP`: the item is left out). Only containers of exactly
    these types are walked into, or also their subclasses with ``subclasses``: one
    that changes becomes its base type then (a namedtuple stays one), as distributed's
    ``parse_input`` does. A container in which nothing changed is returned as it is.

    Workers run it for every task called with futures among its arguments: its checks
    are C loops."""
    new = leaf(obj)
    if new is not DESCEND:
        return new
    t = type(obj)
    if t in _EXACT or (subclasses and isinstance(obj, _SEQUENCES)):
        items = [rebuild(o, leaf, subclasses) for o in obj]
        if all(map(_is, items, obj)):
            return obj
        if any(map(_is, items, repeat(DROP))):
            items = [x for x in items if x is not DROP]
        if t in _EXACT:
            return t(items)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return obj._make(items)  # type: ignore[attr-defined]  # a namedtuple
        return next(base for base in _SEQUENCES if isinstance(obj, base))(items)
    if t is dict or (subclasses and isinstance(obj, dict)):
        if not obj:
            return obj
        values = {k: rebuild(v, leaf, subclasses) for k, v in obj.items()}
        if all(map(_is, values.values(), obj.values())):
            return obj
        return {k: v for k, v in values.items() if v is not DROP}
    return obj
