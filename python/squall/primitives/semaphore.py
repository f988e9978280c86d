"""``Semaphore``: at most ``max_leases`` holders at once, cluster-wide (docs/primitives.md)."""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any

from squall.primitives.requests import Bound, Primitive, Taken, seconds
from squall.protocol import messages as m


class Semaphore(Taken, Primitive):
    """distributed's ``Semaphore``: leases of ``name`` (random if not given), at most
    ``max_leases`` held at once; ``acquire`` waits (up to ``timeout``) for one. A lease
    is tied to its holder's client and worker: it comes back when either is gone
    (docs/primitives.md#when-a-holder-dies), not after a lease timeout. Picklable
    into tasks by name and ``max_leases``; ``scheduler_rpc`` and ``loop`` are accepted
    and unused."""

    def __init__(
        self,
        max_leases: int = 1,
        name: str | None = None,
        scheduler_rpc: Any = None,
        loop: Any = None,
    ) -> None:
        self.name = name or f"semaphore-{uuid.uuid4().hex}"
        self.max_leases = max_leases
        self.id = uuid.uuid4().hex
        #: The ids of the acquires that took this object's leases, oldest first.
        self._leases: deque[int] = deque()
        self._bound = Bound(None)

    def register(self, **kwargs: Any) -> Any:
        """Nothing to do: the scheduler makes the semaphore on its first acquire."""
        return self._bound.call(self._nothing)

    async def _nothing(self) -> None:
        return None

    async def _acquire(self, timeout: float | None) -> bool:
        msg = m.SemaphoreAcquire(name=self.name, max_leases=self.max_leases, timeout=timeout)
        reply, _ = await self._bound.ask(msg)
        if reply.ok:
            assert reply.id is not None
            self._leases.append(reply.id)
        return reply.ok

    def acquire(self, timeout: float | str | None = None) -> Any:
        """Take a lease, waiting up to ``timeout`` (seconds or a string like ``"1s"``;
        None: as long as it takes); True if taken."""
        return self._bound.call(self._acquire, seconds(timeout))

    async def _release(self, lease: int) -> bool:
        await self._bound.ask(m.SemaphoreRelease(name=self.name, lease=lease))
        return True

    def release(self) -> Any:
        """Give back this object's oldest lease; RuntimeError if it holds none."""
        if not self._leases:
            raise RuntimeError("Released too often")
        return self._bound.call(self._release, self._leases.popleft())

    async def _get_value(self) -> int:
        reply, _ = await self._bound.ask(m.SemaphoreValue(name=self.name))
        return reply.count

    def get_value(self) -> Any:
        """How many leases are held (by anyone)."""
        return self._bound.call(self._get_value)

    async def _close(self) -> None:
        await self._bound.ask(m.SemaphoreClose(name=self.name))

    def close(self) -> Any:
        """Forget the semaphore on the scheduler (its leases with it)."""
        return self._bound.call(self._close)

    def __getstate__(self) -> Any:
        return (self.name, self.max_leases)

    def __setstate__(self, state: Any) -> None:
        name, max_leases = state
        Semaphore.__init__(self, max_leases=max_leases, name=name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.name}>"
