"""Workers' memory: the limit, the thresholds and the monitor that spills and pauses
(docs/runtime.md#memory).

The limit and thresholds are resolved here once, for the worker and its nanny alike.
The monitor runs on the worker's event loop every ``monitor-interval``, and only when
the worker has a limit: it measures the process (RSS), pauses or resumes the compiled
machine, and starts a spill job in a thread when managed bytes pass ``target`` or the
process passes ``spill``. Besides, a task thread whose result takes managed bytes over
``target`` spills before it takes its next task (the machine tells it so), as Dask's
workers check ``target`` on every store: tasks cannot outrun the monitor's period.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import pathlib
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import dask.config
import psutil  # type: ignore[import-untyped]
from dask.sizeof import register_pandas, sizeof
from dask.utils import format_bytes, parse_bytes, parse_timedelta

from squall import config
from squall._core import WorkerCore
from squall.worker.spill import SpillStore, no_activity

logger = logging.getLogger("squall.worker")

# dask's sizeof answers sys.getsizeof for these; skip its dispatch on the hot path.
_SCALARS = frozenset({int, float, bool, type(None)})


def sizeof_value(value: Any) -> int:
    """A result's managed bytes: dask's ``sizeof``, ``sys.getsizeof`` where it fails."""
    if type(value) in _SCALARS:
        return sys.getsizeof(value)
    try:
        return int(sizeof(value))
    except Exception:
        return sys.getsizeof(value)


# Numpy dtype kinds whose column bytes are the whole story: bool, integers, floats,
# complex, timedelta, datetime.
_FLAT_KINDS = frozenset("biufcmM")
#: Sizes of column label indexes measured, by identity (frames cut from one frame
#: share their labels' index); each index is held, so that its id stays its own.
_LABELS: dict[int, tuple[Any, int]] = {}
_MAX_LABELS = 256


def _labels_size(labels: Any) -> int:
    held = _LABELS.get(id(labels))
    if held is not None and held[0] is labels:
        return held[1]
    size = int(sizeof(labels))
    if len(_LABELS) >= _MAX_LABELS:
        _LABELS.clear()
    _LABELS[id(labels)] = (labels, size)
    return size


def _frame_size(dask_size: Callable[[Any], int], df: Any) -> int:
    """dask's figure for a DataFrame, read from its blocks: the index's and the column
    labels' sizes, 1200 per run of adjacent columns of one dtype, the columns' bytes.
    dask builds a Series per column to read the same numbers (over 100 µs a frame with
    pandas 3: most of a task shuffle's worker time). Frames with other than numpy
    columns of flat dtypes, or repeated labels, are left to dask (docs/runtime.md#memory)."""
    import numpy as np  # imported with pandas

    mgr = df._mgr
    labels = df.columns
    if not labels.is_unique:
        return dask_size(df)
    runs, last = 0, None
    for dtype in mgr.get_dtypes().tolist():
        if not isinstance(dtype, np.dtype) or dtype.kind not in _FLAT_KINDS:
            return dask_size(df)
        if dtype != last:
            runs, last = runs + 1, dtype
    columns = sum(int(block.values.nbytes) for block in mgr.blocks)
    return max(1200, int(sizeof(df.index)) + _labels_size(labels) + 1200 * runs + columns)


def _register_frame_size() -> None:
    import pandas as pd  # type: ignore[import-untyped]

    dask_size = sizeof.dispatch(pd.DataFrame)  # type: ignore[no-untyped-call]  # dask's, registered first if not yet
    if getattr(dask_size, "func", None) is not _frame_size:
        sizeof.register(pd.DataFrame, functools.partial(_frame_size, dask_size))  # type: ignore[no-untyped-call]


def _register_pandas() -> None:
    register_pandas()  # dask's handlers, which this stands in for
    _register_frame_size()


def install_frame_size() -> None:
    """Measure DataFrames as dask does, faster (:func:`_frame_size`): now if pandas is
    imported, else when it is (without importing it)."""
    if "pandas" in sys.modules:
        _register_frame_size()
    else:
        sizeof.register_lazy("pandas", _register_pandas)  # type: ignore[no-untyped-call]


#: How the core measures memory for each of Dask's rebalance measures
#: (docs/runtime.md#replicas-and-rebalancing).
REBALANCE_MEASURES = {
    "optimistic": "process",
    "process": "process",
    "managed": "managed",
    "managed_total": "managed",
    "managed_in_memory": "managed",
}


def system_memory() -> int:
    """Bytes this process may use: the machine's memory, less if a cgroup limits it."""
    total = int(psutil.virtual_memory().total)
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(pathlib.Path(path).read_text().strip()))
    return total


def parse_memory_limit(
    limit: str | float | None, nthreads: int, *, cores: int | None = None
) -> int:
    """A worker's memory limit in bytes, 0 for none, as Dask reads ``memory_limit``:
    bytes (int, or a float above 1), a size string ("4GB", "4 GiB"), a fraction of the
    system memory (0 < x <= 1), "auto" (the system memory * min(1, nthreads / cores)),
    0 / "0" / None (no limit). A limit above the system memory is capped at it."""
    if limit is None or isinstance(limit, bool):
        if limit is True:
            raise ValueError("memory_limit: expected bytes, a size, a fraction or 'auto'")
        return 0
    system = system_memory()
    value: float
    if isinstance(limit, str) and limit.strip().lower() == "auto":
        value = system * min(1.0, nthreads / (cores or os.cpu_count() or 1))
    else:
        try:
            value = float(limit)
        except (TypeError, ValueError):
            try:
                value = float(parse_bytes(limit))
            except (TypeError, ValueError) as e:
                raise ValueError(f"memory_limit: cannot read {limit!r} ({e})") from None
        else:
            if 0 < value <= 1:
                value *= system
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"memory_limit must be >= 0, got {limit!r}")
    if value > system:
        logger.warning(
            "memory_limit %r is above the system memory; using %s",
            limit,
            format_bytes(system),
        )
        return system
    return int(value)


def default_memory_limit() -> str | float | None:
    """``squall.worker.memory.limit`` (default "auto", as Dask's workers)."""
    value: str | float | None = config.get("worker.memory.limit")
    return value


class Thresholds(NamedTuple):
    """Fractions of the memory limit (None: disabled) and the monitor's period (s)."""

    target: float | None
    spill: float | None
    pause: float | None
    terminate: float | None
    interval: float


def thresholds() -> Thresholds:
    """The thresholds in effect: ``squall.worker.memory.<name>``, or Dask's
    ``distributed.worker.memory.<name>`` where only that is set (``config.get``).
    ``False`` disables a threshold."""
    target, spill, pause, terminate = (
        _fraction(name) for name in ("target", "spill", "pause", "terminate")
    )
    interval, where = _setting("monitor-interval")
    try:
        seconds = float(parse_timedelta(interval))
    except (KeyError, TypeError, ValueError, AttributeError):
        seconds = -1.0
    if not seconds > 0:
        raise config.ConfigError(f"{where}: expected a duration > 0, got {interval!r}")
    return Thresholds(target, spill, pause, terminate, seconds)


def rebalance_settings() -> dict[str, Any]:
    """``rebalance``'s measure and tolerances (keyword arguments of the core's
    ``rebalance``): ``squall.worker.memory.rebalance.<name>`` when set, else Dask's
    ``distributed.worker.memory.rebalance.<name>``, else Dask's default."""
    measure, where = _setting("rebalance.measure")
    if measure not in REBALANCE_MEASURES:
        known = ", ".join(REBALANCE_MEASURES)
        raise config.ConfigError(f"{where}: expected one of {known}, got {measure!r}")
    out: dict[str, Any] = {"measure": REBALANCE_MEASURES[measure]}
    for name in ("sender-min", "recipient-max", "sender-recipient-gap"):
        value, where = _setting(f"rebalance.{name}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise config.ConfigError(f"{where}: expected a fraction >= 0, got {value!r}")
        out[name.replace("-", "_")] = float(value)
    return out


def _setting(name: str) -> tuple[Any, str]:
    """The value for ``name`` and the key it came from."""
    return config.lookup(f"worker.memory.{name}")


def _fraction(name: str) -> float | None:
    value, where = _setting(name)
    if value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise config.ConfigError(f"{where}: expected a fraction > 0 or false, got {value!r}")
    return float(value)


def local_directory(directory: str | None) -> str:
    """Where a worker makes its scratch directory: ``directory``, else
    ``squall.worker.local-directory``, else Dask's ``temporary-directory``, else the
    system's temporary directory."""
    chosen = directory or config.get("worker.local-directory")
    chosen = chosen or dask.config.get("temporary-directory", default=None)
    return str(chosen) if chosen else tempfile.gettempdir()


class MemoryMonitor:
    """Watches a worker's memory (see the module docstring). ``on_pause(paused)`` is
    called on the event loop when the worker pauses or resumes."""

    def __init__(
        self,
        core: WorkerCore,
        limit: int,
        limits: Thresholds,
        store: Callable[[], SpillStore],
        on_pause: Callable[[bool], None],
    ) -> None:
        self._core = core
        self.limit = limit
        self.thresholds = limits
        self._make_store = store
        self.store: SpillStore | None = None
        self._on_pause = on_pause
        self._process = psutil.Process()
        self.paused = False
        self._spilling: asyncio.Future[None] | None = None
        self._lock = threading.Lock()  # one spill at a time
        self._closed = False
        target = self._bytes(limits.target)
        core.set_spill_target(None if target is None else int(target))

    def rss(self) -> int:
        return int(self._process.memory_info().rss)

    def spill_activity(self) -> dict[tuple[str, str], float]:
        """The spill store's reads and writes so far (zeros before the first spill)."""
        return no_activity() if self.store is None else dict(self.store.activity)

    def _bytes(self, fraction: float | None) -> float | None:
        return None if fraction is None else fraction * self.limit

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.thresholds.interval)
            self.check()

    def check(self) -> None:
        """One look: pause or resume, and start spilling if over a threshold."""
        rss = self.rss()
        pause = self._bytes(self.thresholds.pause)
        paused = pause is not None and rss > pause
        if paused != self.paused:
            self.paused = paused
            self._core.set_paused(paused)
            if paused:
                logger.warning(
                    "worker paused: process memory %s is above %.0f%% of the limit %s",
                    format_bytes(rss),
                    100 * (self.thresholds.pause or 0),
                    format_bytes(self.limit),
                )
            else:
                logger.info(
                    "worker resumed: process memory %s is below the pause threshold",
                    format_bytes(rss),
                )
            self._on_pause(paused)
        if self._spilling is not None and not self._spilling.done():
            return
        if self._over(rss):
            loop = asyncio.get_running_loop()
            self._spilling = loop.run_in_executor(None, self.spill)

    def _over(self, rss: int) -> bool:
        target, spill = self._bytes(self.thresholds.target), self._bytes(self.thresholds.spill)
        managed = self._core.memory()[0]
        return (target is not None and managed > target) or (spill is not None and rss > spill)

    async def close(self) -> None:
        """Stop spilling (a spill in progress ends after its current value) and remove
        the spilled files."""
        self._closed = True
        if self._spilling is not None:
            with contextlib.suppress(Exception):
                await self._spilling
        await asyncio.get_running_loop().run_in_executor(None, self._close_store)

    def _close_store(self) -> None:
        with self._lock:
            if self.store is not None:
                self.store.close()

    def spill(self) -> None:
        """Spill (blocking: a thread's call) the least recently used values until
        managed bytes are under ``target`` and, if the process is above ``spill``, until
        the process is back under ``target`` too (or nothing is left to spill)."""
        try:
            with self._lock:
                self._spill_locked()
        except Exception:  # e.g. a full disk: keep running tasks, in memory
            logger.exception("spilling failed")

    def _spill_locked(self) -> None:
        target, spill = self._bytes(self.thresholds.target), self._bytes(self.thresholds.spill)
        goal = target if target is not None else spill
        assert goal is not None
        rss_driven = spill is not None and self.rss() > spill
        while not self._closed:
            need = self._core.memory()[0] - (target if target is not None else math.inf)
            if rss_driven:
                need = max(need, self.rss() - goal)
            if need <= 0:
                return
            picked = self._core.spill_candidates(int(need))
            if not picked:
                return
            if self.store is None:
                self.store = self._make_store()
            picked.reverse()
            while picked and not self._closed:
                key_id, key, value = picked.pop()
                handle = self.store.write(value)
                self._core.spilled(key_id, key, value, handle, handle.nbytes)
                del value, handle  # the value's memory goes with the machine's reference
