"""The spill store: values a worker moved out of memory, in its scratch directory
(docs/runtime.md#memory).

Each spilled value is a file of a ``zict.File`` mapping, holding the value pickled
exactly as ``get-data`` sends it, so a spilled key is served from its bytes without
unpickling. Writing copies nothing in memory: the pickler hands large buffers (numpy's,
protocol 5) over by reference and the file gets them as they are; loading reads the
file into the new value's own buffers (``pickle.load`` from the file), once. A value
is named by a counter, never by its key, so a key freed and computed again can never
find or delete another incarnation's file. The worker's machine holds a ``Spilled``
handle in place of the value; the file is deleted when the last reference to the
handle goes (the machine let go of the key, and no task is still loading it).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import zict

from squall.protocol.specs import PLAIN_TYPES


def dumps(
    value: Any, buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None
) -> bytes:
    """A value as ``get-data`` sends it: plain values with ``pickle`` (several times
    faster than cloudpickle for small ones), others with cloudpickle; protocol 5, large
    buffers (numpy's) handed to ``buffer_callback`` if given, else pickled in-band."""
    if type(value) in PLAIN_TYPES:
        return pickle.dumps(value, protocol=5, buffer_callback=buffer_callback)
    blob: bytes = cloudpickle.dumps(value, protocol=5, buffer_callback=buffer_callback)
    return blob


class _Parts:
    """A pickler's file that keeps what it is given, large buffers by reference."""

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview] = []

    def write(self, data: Any) -> int:
        part = data.raw() if isinstance(data, pickle.PickleBuffer) else memoryview(data)
        self.parts.append(part)
        return len(part)


def dump_parts(value: Any) -> list[bytes | bytearray | memoryview]:
    """``dumps(value)`` in parts, without copying large buffers."""
    sink = _Parts()
    pickler = pickle.Pickler if type(value) in PLAIN_TYPES else cloudpickle.CloudPickler
    pickler(sink, protocol=5).dump(value)
    return sink.parts


#: The activities ``SpillStore.activity`` counts, with distributed's labels, and units.
ACTIVITIES = ("disk-read", "disk-write")
UNITS = ("count", "bytes", "seconds")


def no_activity() -> dict[tuple[str, str], float]:
    """Spill activity totals before any: every (activity, unit) at 0."""
    return {(a, unit): 0.0 for a in ACTIVITIES for unit in UNITS}


class SpillStore:
    """Spilled values in a fresh directory under ``parent``, removed by ``close``.
    ``activity`` totals the reads and writes since the worker started, as
    ``{(activity, unit): total}`` with units ``count``, ``bytes`` and ``seconds``
    (writing includes pickling, reading a value includes unpickling)."""

    def __init__(self, parent: str) -> None:
        self.directory = tempfile.mkdtemp(prefix="squall-worker-", dir=parent)
        self._file = zict.File(self.directory)
        self._names = itertools.count()
        self._closed = False
        self.activity = no_activity()
        self._activity_lock = threading.Lock()  # tasks' threads load values

    @contextlib.contextmanager
    def _metered(self, activity: str) -> Iterator[list[int]]:
        """Times the block; the block appends the bytes it moved to the list."""
        moved: list[int] = []
        start = time.perf_counter()
        yield moved
        seconds = time.perf_counter() - start
        with self._activity_lock:
            self.activity[activity, "count"] += 1
            self.activity[activity, "bytes"] += sum(moved)
            self.activity[activity, "seconds"] += seconds

    def write(self, value: Any) -> Spilled:
        """Writes ``value`` out (blocking IO: call it off the event loop)."""
        name = str(next(self._names))
        with self._metered("disk-write") as moved:
            parts = dump_parts(value)
            self._file[name] = parts
            moved.append(sum(len(p) for p in parts))
        return Spilled(self, name, moved[0])

    def load(self, name: str) -> Any:
        with (
            self._metered("disk-read") as moved,
            open(os.path.join(self.directory, self._file.filenames[name]), "rb") as f,
        ):
            value = pickle.load(f)
            moved.append(f.tell())
        return value

    def raw(self, name: str) -> bytearray | memoryview:
        with self._metered("disk-read") as moved:
            blob: bytearray | memoryview = self._file[name]
            moved.append(len(blob))
        return blob

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
