"""Routing messages to handlers by type: each room (scheduler, worker, nanny, client)
declares one table per route it reads, and the table must handle every message of that
route (docs/protocol.md#messages), so that adding a message is its declaration in
:mod:`squall.protocol.messages` and one handler."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from squall.protocol import messages as m

R = TypeVar("R")
#: A handler takes the message (of the type it is registered for) and its payload.
Handler = Callable[[Any, memoryview], R]


class Handlers(Generic[R]):
    """``{message type: handler}`` for every message of ``route``; a
    :class:`~squall.protocol.messages.Malformed` message goes to ``malformed``."""

    def __init__(
        self,
        route: m.Route,
        table: Mapping[type[m.Message], Handler[R]],
        malformed: Callable[[m.Malformed], R],
    ) -> None:
        declared = set(m.messages(route))
        missing = sorted(c.op() for c in declared - set(table))
        extra = sorted(c.op() for c in set(table) - declared)
        if missing or extra:
            raise TypeError(f"handlers of {route.value}: missing {missing}, not on it {extra}")
        self.route = route
        self._table = dict(table)
        self._malformed = malformed

    def __call__(self, msg: m.Message | m.Malformed, payload: memoryview) -> R:
        if isinstance(msg, m.Malformed):
            return self._malformed(msg)
        return self._table[type(msg)](msg, payload)
