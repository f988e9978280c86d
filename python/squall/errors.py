"""The exceptions squall raises to users beside the core's (``squall._core``)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Hashable

CancelledError = concurrent.futures.CancelledError


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
