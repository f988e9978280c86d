"""Waits with a bound that behave alike on every supported Python
(docs/install.md#supported-pythons)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from squall.errors import TimeoutError

T = TypeVar("T")


async def within(aw: Awaitable[T], seconds: float | None) -> T:
    """``await aw``, or squall's ``TimeoutError`` after ``seconds`` (None: no bound),
    with ``aw`` cancelled. Not ``asyncio.wait_for``: a ``TimeoutError`` raised by ``aw``
    itself passes through as it is, and a cancellation of the caller that meets ``aw``'s
    end is never swallowed (wait_for can swallow one before Python 3.12)."""
    if seconds is None:
        return await aw
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise TimeoutError(f"timed out after {seconds} s")
    return task.result()
