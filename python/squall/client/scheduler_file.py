"""distributed's scheduler file: the scheduler's identity as JSON (``address`` and
more), written by ``squall scheduler --scheduler-file``, ``Scheduler(scheduler_file=)``
and ``Client.write_scheduler_file``, read by ``squall worker --scheduler-file``,
``Client(scheduler_file=)`` and ``Nanny(scheduler_file=)``, which wait for it to appear
(docs/deploy.md#command-lines)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from squall.errors import TimeoutError

#: How often a reader looks for the file (distributed's period).
POLL = 0.1


def write_scheduler_file(path: str | Path, identity: dict[str, Any]) -> None:
    """Written whole, then renamed into place: a reader never sees half of it."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(identity, indent=2))
    os.replace(partial, path)


def read_scheduler_file(path: str | Path) -> str:
    """The scheduler address a scheduler file gives."""
    return str(json.loads(Path(path).read_text())["address"])


def wait_for_scheduler_file(path: str | Path, timeout: float | None) -> str:
    """The address in the scheduler file at ``path``, once it holds one (a scheduler
    starting elsewhere writes it), waiting up to ``timeout`` seconds (None: forever);
    ``TimeoutError`` naming the file after that."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            return read_scheduler_file(path)
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            pass  # not there yet, or a writer not using write_scheduler_file is midway
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(
                f"no scheduler address in the scheduler file {path} after {timeout}s"
            )
        time.sleep(POLL)
