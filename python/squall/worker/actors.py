"""The actors a worker holds (docs/actors.md): their instances by key, and the calls
peers make on them.

An actor task's result in the worker's store is only a handle; the instance lives
here, so it is never pickled, spilled or sent elsewhere. Plain methods run one at a
time on the worker's actor thread (as Dask's single actor executor); ``async def``
methods run on the worker's event loop. A call answers when it is done, so that a
slow method does not hold up the calls and transfers behind it.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Key = Hashable

_actor_thread = threading.local()


def in_actor_thread(address: str) -> bool:
    """Whether this thread is running an actor method of the worker at ``address``
    (then a call on another of its actors runs at once: waiting for the actor
    thread from the actor thread would never end)."""
    return getattr(_actor_thread, "address", None) == address


class ActorHost:
    """The actor instances of one worker, by key, and the task ids they were built by
    (``free-keys`` names tasks by id)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.instances: dict[Key, object] = {}
        self._keys_by_task: dict[int, Key] = {}
        self._executor: ThreadPoolExecutor | None = None

    def set_address(self, address: str) -> None:
        self.address = address

    def add(self, task: int, key: Key, instance: object) -> None:
        self.instances[key] = instance
        self._keys_by_task[task] = key

    def free(self, payload: bytes) -> None:
        """Drop the actors of the tasks a ``free-keys`` payload (packed u32 ids) names.
        Only a worker holding actors looks, and in C: ``set & dict keys``."""
        if not self._keys_by_task:
            return
        ids = memoryview(payload).cast("I")  # little-endian, as every supported host
        for tid in self._keys_by_task.keys() & set(ids):
            self.instances.pop(self._keys_by_task.pop(tid), None)

    def clear(self) -> None:
        """The scheduler that knew these actors is gone: it reported them lost."""
        self.instances.clear()
        self._keys_by_task.clear()

    def close(self) -> None:
        self.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def call(
        self, key: Key, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run ``instance.method(*args, **kwargs)``: on the event loop for a coroutine
        function, else on the actor thread. KeyError: no such actor here."""
        func = getattr(self.instances[key], method)
        if inspect.iscoroutinefunction(func):
            return await func(*args, **kwargs)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="squall-actor")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run, func, args, kwargs)

    def _run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        _actor_thread.address = self.address
        try:
            return func(*args, **kwargs)
        finally:
            _actor_thread.address = None

    def attribute(self, key: Key, name: str) -> Any:
        """``getattr(instance, name)``. KeyError: no such actor here."""
        return getattr(self.instances[key], name)
