"""How a worker gets the results it does not hold: its tasks' dependencies, and the
copies ``acquire-replicas`` asks for (docs/runtime.md#retiring-workers).

Dependencies are fetched with ``get-data``, batched per holder, over the cached peer
connections of :mod:`squall.protocol.peers`, the next holder on failure. Fetched copies
are kept while a local task needs them, then dropped; both are told to the scheduler by
key (``add-replicas``, ``drop-replicas``), so it counts the copies as holders
meanwhile. If no holder can provide a dependency, the dependents are given back with
``reschedule`` after ``squall.worker.missing-data-retry``, unless the scheduler has
freed or re-sent them meanwhile (a re-sent task fetches from the holders named then);
if the last holder tried could not be reached for longer than
``squall.comm.timeouts.connect``, they err instead with a CommError naming it: a peer
that stays unreachable is an error, not an endless retry (docs/deploy.md#across-hosts).

Transfers measure the worker's bandwidth: an average over transfers of at least 1 MB
(smaller ones measure latency), weighted 0.95/0.05 like Dask's; None until one happened.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING

from squall import config
from squall._core import encode_keys
from squall.errors import TimeoutError
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.peers import Loaded, Peers, Pickled
from squall.protocol.remote_errors import pack_error
from squall.worker.memory import sizeof_value

if TYPE_CHECKING:
    from squall.worker.worker import Worker

logger = logging.getLogger("squall.worker")

Key = Hashable

# Transfers smaller than this measure latency more than bandwidth.
BANDWIDTH_MIN_BYTES = 1_000_000


class Fetcher:
    """A worker's transfers from its peers."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._missing_retry = config.seconds("worker.missing-data-retry")
        self._unreachable_bound = config.seconds("comm.timeouts.connect")
        #: Peers whose requests failed one after another: since when, the last time,
        #: and the error. A failure longer after the last than two connect timeouts and
        #: a retry's delay (and a second) starts a new count.
        self._unreachable: dict[str, tuple[float, float, Exception]] = {}
        self._unreachable_gap = 2 * self._unreachable_bound + self._missing_retry + 1.0
        #: Keys whose last fetch failed so, and from whom (until fetched or missing).
        self._failed_from: dict[Key, str] = {}
        self.peers = Peers(
            reply_timeout=config.seconds("worker.get-data-timeout"), security=worker.security
        )

    def fetch_missing(self) -> None:
        """Start the transfers the core asks for, one request per holder, and give
        back (after ``missing-data-retry``) tasks whose dependency nobody has."""
        w = self._worker
        if w.status != "running":
            return
        fetches, missing = w._core.take_fetches(self.peers.addresses())
        loop = asyncio.get_running_loop()
        for key, waiters in missing:
            lost = self._lost(key)
            if lost is not None:
                self._err(waiters, lost)
                continue
            logger.info(
                "worker %s: no holder has %r; rescheduling %d tasks",
                w.address,
                key,
                len(waiters),
            )
            loop.call_later(self._missing_retry, self._give_back, waiters)
        for holder, keys, ids in fetches:
            w._spawn(self._gather_from(holder, keys, ids))

    async def get_data(
        self, holder: str, keys: list[Key]
    ) -> list[Pickled | Loaded | tuple[str, bytes] | None]:
        """``get-data`` from ``holder``, measuring the bandwidth: each key's pickle, its
        error where its value cannot be pickled, or None where the holder lacks it or
        the request failed (logged, and the connection dropped)."""
        w = self._worker
        try:
            start = time.monotonic()
            with w.transfers.incoming():
                reply = await self.peers.get_data(holder, keys)
            w.transfers.received(len(reply.payload))
            self._measured(len(reply.payload), time.monotonic() - start)
        except (comm.CommError, TimeoutError, OSError) as e:
            logger.info(
                "worker %s: fetching %d keys from %s failed: %s", w.address, len(keys), holder, e
            )
            w._spawn(self.peers.drop(holder))
            now = time.monotonic()
            since, last, _ = self._unreachable.get(holder, (now, now, e))
            if now - last > self._unreachable_gap:
                since = now
            self._unreachable[holder] = (since, now, e)
            self._failed_from.update((k, holder) for k in keys)
            return [None] * len(keys)
        self._unreachable.pop(holder, None)
        for k in keys:
            self._failed_from.pop(k, None)
        return reply.values()

    async def _gather_from(self, holder: str, keys: list[Key], ids: list[int]) -> None:
        w = self._worker
        for kid, blob in zip(ids, await self.get_data(holder, keys), strict=True):
            if blob is None:
                w._core.not_fetched(holder, kid)
                continue
            if isinstance(blob, tuple):  # the holder cannot pickle it: their error
                exc_text, exc_blob = blob
                err = (exc_text, "", exc_blob, pickle.dumps(None))
                for tid, run_id in w._core.fetch_failed(holder, kid):
                    w._send_erred(tid, run_id, err)
                continue
            try:
                value = blob.load()
            except Exception as e:
                err = pack_error(e)
                for tid, run_id in w._core.fetch_failed(holder, kid):
                    w._send_erred(tid, run_id, err)
                continue
            w._core.fetched(holder, kid, value, blob.nbytes)
        self.fetch_missing()
        w._flush_buffered()  # announce the copies

    async def acquire_replicas(self, holder: str, tasks: list[int], keys: list[Key]) -> None:
        """``acquire-replicas``: copy results from a retiring worker and hold them as
        those tasks' results; the copies are announced with ``add-replicas``. A copy
        that fails is left to the scheduler's bounded wait."""
        w = self._worker
        got = []
        blobs = await self.get_data(holder, keys)
        for tid, key, blob in zip(tasks, keys, blobs, strict=True):
            if not isinstance(blob, Pickled | Loaded):  # not there, or cannot be pickled
                continue
            try:
                value = blob.load()
            except Exception as e:
                logger.warning("worker %s: cannot load a copy of %r: %r", w.address, key, e)
                continue
            w._core.put_scattered(tid, key, value, sizeof_value(value))
            got.append(key)
        if got:
            w._send(m.AddReplicas(), encode_keys(got))

    def _measured(self, nbytes: int, seconds: float) -> None:
        if nbytes >= BANDWIDTH_MIN_BYTES and seconds > 0:
            sample = nbytes / seconds
            prev = self._worker.bandwidth
            self._worker.bandwidth = sample if prev is None else 0.95 * prev + 0.05 * sample

    def _lost(self, key: Key) -> comm.CommError | None:
        """The error for ``key`` if the last holder tried has been unreachable for
        longer than ``squall.comm.timeouts.connect``, else None."""
        holder = self._failed_from.pop(key, None)
        if holder is None or holder not in self._unreachable:
            return None
        since, _, e = self._unreachable[holder]
        waited = time.monotonic() - since
        if waited < self._unreachable_bound:
            return None
        return comm.CommError(
            f"worker {self._worker.address} could not reach {holder}, which holds {key!r}, "
            f"for {waited:.1f}s (squall.comm.timeouts.connect is "
            f"{self._unreachable_bound}s): {e}"
        )

    def _err(self, waiters: list[tuple[int, int]], error: comm.CommError) -> None:
        """Tasks still waiting for a dependency whose holder cannot be reached err."""
        w = self._worker
        runs = dict(waiters)
        err = pack_error(error)
        for tid in w._core.give_back(waiters):
            w._send_erred(tid, runs[tid], err)

    def _give_back(self, waiters: list[tuple[int, int]]) -> None:
        """Tasks still waiting for a dependency nobody had go back to the scheduler,
        unless it freed or re-sent them meanwhile."""
        w = self._worker
        if w.status != "running":
            return
        for tid in w._core.give_back(waiters):
            w._send(m.Reschedule(task=tid))
