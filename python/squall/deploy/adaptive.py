"""Adaptive scaling of a cluster (docs/runtime.md#adaptive-scaling), with Dask's
semantics: a loop asks the scheduler how many workers the work needs (its adaptive
target, bounded by ``minimum`` and ``maximum``), starts the missing ones at once, and
retires a worker only once ``wait_count`` targets in a row left it out."""

from __future__ import annotations

import logging
import math
import threading
from typing import Protocol

from squall import config
from squall.client.loop import timeout_seconds
from squall.deploy.requests import ask, run_sync
from squall.protocol import messages as m
from squall.security import Security

logger = logging.getLogger("squall.deploy")


class Reachable(Protocol):
    """A cluster's scheduler, as the loop reaches it."""

    @property
    def scheduler_address(self) -> str: ...

    @property
    def security(self) -> Security | None: ...


class Scalable(Protocol):
    """What the loop drives: a cluster's scaling state (``LocalCluster``'s ``Scaling``,
    a job-queue cluster). ``lock`` is held around each change."""

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def cluster(self) -> Reachable: ...

    def alive(self) -> list[str]: ...

    def scale(self, n: int) -> None: ...

    def retire(self, *, workers: list[str]) -> object: ...


class Adaptive:
    """Runs on a thread of its own until ``stop()`` (the cluster's ``close`` stops it).
    Arguments left None come from ``squall.adaptive.*``."""

    def __init__(
        self,
        scaling: Scalable,
        *,
        minimum: int | None = None,
        maximum: int | float | None = None,
        interval: float | str | None = None,
        wait_count: int | None = None,
        target_duration: float | str | None = None,
    ) -> None:
        self.scaling = scaling
        self.minimum = config.integer("adaptive.minimum") if minimum is None else minimum
        if maximum is None:
            maximum = config.get("adaptive.maximum")
        self.maximum = math.inf if maximum is None else float(maximum)
        if self.minimum < 0 or self.maximum < self.minimum:
            raise ValueError(f"need 0 <= minimum <= maximum, got {minimum} and {maximum}")
        self.interval = _seconds(interval, "adaptive.interval")
        self.target_duration = _seconds(target_duration, "adaptive.target-duration")
        self.wait_count = (
            config.integer("adaptive.wait-count", minimum=1) if wait_count is None else wait_count
        )
        #: Consecutive targets that left each worker (address) out.
        self.close_counts: dict[str, int] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="squall-adaptive", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                self.step()
            except Exception as e:  # the scheduler may be gone: try again next time
                logger.warning("adaptive scaling step failed: %s", e)

    def step(self) -> None:
        """Ask for the target once and act on it."""
        request = m.AdaptiveTarget(
            target_duration=self.target_duration,
            minimum=self.minimum,
            maximum=None if math.isinf(self.maximum) else int(self.maximum),
        )
        cluster = self.scaling.cluster
        reply = run_sync(
            ask(cluster.scheduler_address, request, m.AdaptiveTargetReply, cluster.security)
        )
        target, planned = reply.target, len(self.scaling.alive())
        if target >= planned:
            self.close_counts.clear()
            if target > planned:
                logger.info("adaptive: scaling up to %d workers", target)
                self.scaling.scale(target)
            return
        to_close = set(reply.to_close)
        self.close_counts = {w: self.close_counts.get(w, 0) + 1 for w in to_close}
        firm = [w for w, n in self.close_counts.items() if n >= self.wait_count]
        if firm:
            logger.info("adaptive: retiring %s", firm)
            with self.scaling.lock:
                self.scaling.retire(workers=firm)
            for w in firm:
                self.close_counts.pop(w, None)


def _seconds(value: float | str | None, key: str) -> float:
    seconds = timeout_seconds(value)
    return config.seconds(key) if seconds is None else seconds
