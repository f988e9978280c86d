"""``Event``: a cluster-wide flag to wait for (docs/primitives.md)."""

from __future__ import annotations

import uuid
from typing import Any

from squall.client.client import Client
from squall.primitives.requests import Bound, Primitive, seconds
from squall.protocol import messages as m


class Event(Primitive):
    """distributed's ``Event``: a flag named ``name`` (random if not given), false until
    ``set``; ``wait`` returns once it is set. Picklable into tasks by name."""

    def __init__(self, name: str | None = None, client: Client | None = None) -> None:
        self.name = name or f"event-{uuid.uuid4().hex}"
        self._bound = Bound(client)

    async def _ask(self, msg: m.Request) -> bool:
        reply, _ = await self._bound.ask(msg)
        return reply.ok and reply.count > 0 if isinstance(msg, m.EventIsSet) else reply.ok

    def wait(self, timeout: float | str | None = None) -> Any:
        """Wait until the event is set, up to ``timeout`` (None: as long as it takes);
        True if it is set, False on timeout."""
        return self._bound.call(self._ask, m.EventWait(name=self.name, timeout=seconds(timeout)))

    async def _do(self, msg: m.Request) -> None:
        await self._bound.ask(msg)

    def set(self) -> Any:
        """Set the flag: every waiter returns."""
        return self._bound.call(self._do, m.EventSet(name=self.name))

    def clear(self) -> Any:
        """Clear the flag: waits block again."""
        return self._bound.call(self._do, m.EventClear(name=self.name))

    def is_set(self) -> Any:
        return self._bound.call(self._ask, m.EventIsSet(name=self.name))

    def __reduce__(self) -> Any:
        return (Event, (self.name,))

    def __repr__(self) -> str:
        return f"<Event: {self.name}>"
