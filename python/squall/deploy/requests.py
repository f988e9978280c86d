"""One request to a scheduler on a connection of its own (what a cluster object asks),
and running such a coroutine from synchronous code."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from squall.protocol import comm
from squall.protocol import messages as m
from squall.security import Security

T = TypeVar("T")
R = TypeVar("R", bound=m.Message)


async def ask(
    address: str, request: m.Request, answer: type[R], security: Security | None = None
) -> R:
    """One request to a scheduler on a connection of its own; its ``answer`` (a
    ``request-failed`` raises RuntimeError)."""
    c = await comm.connect(
        address,
        role="client",
        info={"client": f"{request.op()}-request", "one_request": True},
        security=security,
    )
    try:
        await c.read()  # registered
        request.id = 0
        await c.write(request)
        while True:
            for msg, _ in await c.read_messages():
                if isinstance(msg, m.RequestFailed):
                    raise RuntimeError(f"scheduler: {msg.error}")
                if isinstance(msg, answer):
                    return msg
    finally:
        await c.close()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, also on a thread whose loop is running (an asynchronous
    ``Client()`` starting its cluster), where it runs on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
