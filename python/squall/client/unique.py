"""Unique ids for the keys of impure calls (``submit(..., pure=False)``).

They have the shape of ``str(uuid.uuid4())``, the keys distributed makes, but cost no
``urandom`` call each (about a quarter of a ``submit`` call's time on the client): a
random prefix is drawn once per process, again in a forked child, and a counter
completes it.
"""

from __future__ import annotations

import itertools
import os
import uuid


class UniqueIds:
    def __init__(self) -> None:
        self._draw()
        os.register_at_fork(after_in_child=self._draw)

    def _draw(self) -> None:
        r = uuid.uuid4().hex
        self._prefix = f"{r[:8]}-{r[8:12]}-{r[12:16]}-{r[16:20]}-{r[20:24]}"
        self._count = itertools.count()

    def next(self) -> str:
        """A fresh id: 36 characters, 8-4-4-4-12 hex digits."""
        n = next(self._count)
        if n >> 32:  # the counter's 8 digits are used up: draw a new prefix
            self._draw()
            return self.next()
        return f"{self._prefix}{n:08x}"


unique_ids = UniqueIds()
