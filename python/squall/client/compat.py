"""Names distributed keeps only to point users elsewhere."""

from __future__ import annotations

from typing import NoReturn


def CompatibleExecutor(*args: object, **kwargs: object) -> NoReturn:
    """distributed's ``CompatibleExecutor``: gone there too; the executor is
    ``Client.get_executor()``."""
    raise RuntimeError("CompatibleExecutor has moved to the Client.get_executor() method")
