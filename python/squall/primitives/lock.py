"""``Lock``: a :class:`Semaphore` of one lease (docs/primitives.md)."""

from __future__ import annotations

import uuid
from typing import Any

from squall.primitives.requests import non_blocking
from squall.primitives.semaphore import Semaphore


class Lock(Semaphore):
    """distributed's ``Lock``: one holder at a time of ``name`` (random if not given),
    cluster-wide; released when its holder's client or worker is gone. Picklable into
    tasks by name."""

    def __init__(
        self, name: str | None = None, scheduler_rpc: Any = None, loop: Any = None
    ) -> None:
        super().__init__(max_leases=1, name=name or f"lock-{uuid.uuid4().hex}")

    def acquire(  # type: ignore[override]  # distributed's signature
        self, blocking: bool = True, timeout: float | str | None = None
    ) -> Any:
        """Take the lock, waiting up to ``timeout`` (None: as long as it takes; with
        ``blocking=False``, not at all); True if taken."""
        return super().acquire(timeout=non_blocking(blocking, timeout))

    async def _locked(self) -> bool:
        return bool(await self._get_value() == 1)

    def locked(self) -> Any:
        """Whether anyone holds the lock."""
        return self._bound.call(self._locked)

    def __getstate__(self) -> Any:
        return self.name

    def __setstate__(self, state: Any) -> None:
        Lock.__init__(self, name=state)
