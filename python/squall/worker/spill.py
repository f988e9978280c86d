"""The spill store: values a worker moved out of memory, in its scratch directory
(docs/runtime.md#memory).

Each spilled value is a file of a ``zict.File`` mapping, holding the value pickled
exactly as ``get-data`` sends it, so a spilled key is served from its bytes without
unpickling. A value is named by a counter, never by its key, so a key freed and
computed again can never find or delete another incarnation's file. The worker's
machine holds a ``Spilled`` handle in place of the value; the file is deleted when
the last reference to the handle goes (the machine let go of the key, and no task
is still loading it).
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import shutil
import tempfile
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import zict

from squall.protocol.specs import PLAIN_TYPES


def dumps(value: Any) -> bytes:
    """A value as ``get-data`` sends it: plain values with ``pickle`` (several times
    faster than cloudpickle for small ones), others with cloudpickle; protocol 5."""
    if type(value) in PLAIN_TYPES:
        return pickle.dumps(value, protocol=5)
    blob: bytes = cloudpickle.dumps(value, protocol=5)
    return blob


class SpillStore:
    """Spilled values in a fresh directory under ``parent``, removed by ``close``."""

    def __init__(self, parent: str) -> None:
        self.directory = tempfile.mkdtemp(prefix="squall-worker-", dir=parent)
        self._file = zict.File(self.directory)
        self._values = zict.Func(dumps, pickle.loads, self._file)
        self._names = itertools.count()
        self._closed = False

    def write(self, value: Any) -> Spilled:
        """Writes ``value`` out (blocking IO: call it off the event loop)."""
        name = str(next(self._names))
        blob = dumps(value)
        self._file[name] = blob
        return Spilled(self, name, len(blob))

    def load(self, name: str) -> Any:
        return self._values[name]

    def raw(self, name: str) -> bytearray | memoryview:
        return self._file[name]

    def discard(self, name: str) -> None:
        if not self._closed:
            with contextlib.suppress(KeyError, OSError):
                del self._file[name]

    def close(self) -> None:
        self._closed = True
        shutil.rmtree(self.directory, ignore_errors=True)


class Spilled:
    """What the worker's machine holds for a spilled value: ``load()`` gives the value
    back, ``raw()`` its pickled bytes; the file goes with the last reference."""

    __slots__ = ("_store", "name", "nbytes")

    def __init__(self, store: SpillStore, name: str, nbytes: int) -> None:
        self._store = store
        self.name = name
        self.nbytes = nbytes

    def load(self) -> Any:
        return self._store.load(self.name)

    def raw(self) -> bytearray | memoryview:
        return self._store.raw(self.name)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # also at interpreter exit
            self._store.discard(self.name)

    def __repr__(self) -> str:
        return f"<Spilled {self.name}: {self.nbytes} bytes>"
