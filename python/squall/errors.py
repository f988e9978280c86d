"""The exceptions squall raises to users beside the core's (``squall._core``)."""

from __future__ import annotations

import concurrent.futures
from asyncio import TimeoutError as TimeoutError
from collections.abc import Hashable

CancelledError = concurrent.futures.CancelledError

# ``TimeoutError`` above is squall's one time-out error, asyncio's as distributed's: the
# builtin from Python 3.11 on, a class of its own on 3.10. Every module raises and catches
# this name (tests/test_pythons.py checks it), so ``except squall.TimeoutError`` catches
# every bounded wait's time-out on every supported Python (docs/install.md).


class FutureCancelledError(CancelledError):
    """Raised by ``result()`` of a cancelled future (as distributed's)."""

    def __init__(self, key: Hashable, reason: str | None = None, msg: str | None = None) -> None:
        super().__init__(key, reason, msg)
        self.key = key
        self.reason = reason or "unknown"
        self.msg = msg

    def __str__(self) -> str:
        text = f"{self.key} cancelled for reason: {self.reason}."
        return f"{text}\n{self.msg}" if self.msg else text


class KilledWorker(Exception):
    """A task was running on too many workers that died (``error_kind`` KilledWorker).

    The scheduler sends only text for this error; it is ``str(exc)``."""

    def __init__(self, text: str, key: Hashable = None) -> None:
        super().__init__(text)
        self.key = key


class RemoteError(Exception):
    """A task failed remotely and its exception could not be unpickled here."""


class Reschedule(Exception):
    """Raised by a task to have the scheduler run it again, maybe on another worker
    (its usual placement decides); its result is not an error."""
