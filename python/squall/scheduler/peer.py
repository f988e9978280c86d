"""A connected worker, nanny or client, as the scheduler server knows it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from squall.protocol import comm
from squall.protocol import messages as m


@dataclass
class Peer:
    conn: comm.Comm
    stream: comm.BatchedSend
    name: str
    address: str = ""
    #: The address of the nanny supervising this worker, if any, and the worker's
    #: process id, which tells it from the next worker of that nanny (workers only).
    nanny: str | None = None
    pid: int | None = None
    #: Its nanny's ``worker-died`` came while it was still registered (workers only).
    died: bool = False
    #: The port of its HTTP routes (workers only; None: it serves none) and their
    #: scheme, "http" or "https".
    dashboard: int | None = None
    dashboard_scheme: str = "http"

    def send(self, msg: m.Message, payload: bytes | memoryview = b"") -> None:
        """Queue a message. One to a peer whose connection already closed is dropped:
        its reader is about to forget it, and whoever's event led here (another peer's
        message, a tick) must not fail for it."""
        with contextlib.suppress(comm.CommClosedError):
            self.stream.send(msg, payload)
