"""``run``: a function a client sends, called in a server process outside the task
system — a worker's or a nanny's (``Client.run``) or the scheduler's
(``Client.run_on_scheduler``, docs/runtime.md#admin-calls)."""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Awaitable, Callable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from squall.protocol import messages as m
from squall.protocol.remote_errors import error_fields, pack_error


async def run_function(
    server: object,
    msg: m.Run,
    payload: memoryview,
    spawn: Callable[[Any], None],
    *,
    arg: str = "dask_worker",
    announce: Callable[[Callable[..., Any]], None] | None = None,
) -> tuple[m.RunResult, bytes]:
    """Unpickle ``(function, args, kwargs)`` and call it on the event loop (as Dask),
    giving ``server`` to a parameter named ``arg``; a coroutine is awaited unless not
    ``wait`` (then handed to ``spawn``). ``announce`` is told the function before the
    call. The answer carries the pickled result or the error report."""
    try:
        func, args, kwargs = pickle.loads(payload)
        if announce is not None:
            announce(func)
        if takes_arg(func, arg):
            kwargs = {**kwargs, arg: server}
        result = func(*args, **kwargs)
        if inspect.isawaitable(result):
            if msg.wait:
                result = await result
            else:
                spawn(_awaited(result))
                result = None
        return m.RunResult(id=msg.id, status="OK"), cloudpickle.dumps(result)
    except Exception as e:
        return error_fields(m.RunResult(id=msg.id, status="error"), pack_error(e))


async def _awaited(aw: Awaitable[Any]) -> None:
    await aw


def takes_arg(func: Any, name: str) -> bool:
    """Whether ``func``'s signature has a parameter ``name``."""
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False
