"""``MultiLock``: several named locks taken together (docs/primitives.md)."""

from __future__ import annotations

import uuid
from typing import Any

from squall.client.client import Client
from squall.primitives.requests import Bound, Primitive, Taken, non_blocking, seconds
from squall.protocol import messages as m


class MultiLock(Taken, Primitive):
    """distributed's ``MultiLock``: the locks ``names`` taken together (or
    ``num_locks`` of them), without deadlock between holders of overlapping sets. Its
    locks are not :class:`Lock`'s (another namespace, as distributed's). Picklable into
    tasks by names."""

    def __init__(self, names: list[str] | None = None, client: Client | None = None) -> None:
        self.names = list(names or [])
        self.id = uuid.uuid4().hex
        self._bound = Bound(client)
        #: The id of the acquire that holds the locks (None: not held).
        self._lease: int | None = None

    async def _acquire(self, timeout: float | None, num_locks: int | None) -> bool:
        msg = m.MultiLockAcquire(names=self.names, num_locks=num_locks, timeout=timeout)
        reply, _ = await self._bound.ask(msg)
        if reply.ok:
            self._lease = reply.id
        return reply.ok

    def acquire(
        self,
        blocking: bool = True,
        timeout: float | str | None = None,
        num_locks: int | None = None,
    ) -> Any:
        """Take the locks (``num_locks`` of them; None: all), waiting up to ``timeout``
        (None: as long as it takes; with ``blocking=False``, not at all); True if taken."""
        wait = seconds(non_blocking(blocking, seconds(timeout)))
        return self._bound.call(self._acquire, wait, num_locks)

    async def _release(self, lease: int) -> None:
        await self._bound.ask(m.MultiLockRelease(lease=lease))

    def release(self) -> Any:
        """Give the locks back; ValueError if they are not held."""
        lease, self._lease = self._lease, None
        if lease is None:
            raise ValueError("Lock is not yet acquired")
        return self._bound.call(self._release, lease)

    def locked(self) -> bool:
        """Whether this object holds its locks."""
        return self._lease is not None

    def __reduce__(self) -> Any:
        return (type(self), (self.names,))
