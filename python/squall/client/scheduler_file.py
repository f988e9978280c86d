"""distributed's scheduler file: the scheduler's identity as JSON (``address`` and
more), written by ``Scheduler(scheduler_file=)`` and ``Client.write_scheduler_file``,
read by ``Client(scheduler_file=)`` and ``Nanny(scheduler_file=)``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_scheduler_file(path: str | Path, identity: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(identity, indent=2))


def read_scheduler_file(path: str | Path) -> str:
    """The scheduler address a scheduler file gives."""
    return str(json.loads(Path(path).read_text())["address"])
