"""What the cluster holds and did, as distributed's client reports it: ``has_what``,
``processing``, ``nbytes``, ``story``, the logs and the versions."""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from dask.utils import key_split

from squall import versions
from squall._core import decode_keys, encode_keys
from squall.client.connection import ClientConnection
from squall.client.data import DataMovement
from squall.client.futures import Key, futures_of
from squall.client.workers import select_workers
from squall.protocol import messages as m

logger = logging.getLogger("squall.client")


class Diagnostics:
    """The methods of :class:`~squall.client.client.Client` that inspect the cluster,
    over its connection (``data`` asks who holds keys); those named as ``Client``'s
    are documented there."""

    def __init__(self, connection: ClientConnection, data: DataMovement) -> None:
        self.connection = connection
        self.data = data

    def who_has(self, futures: Any = None, **kwargs: Any) -> Any:
        async def run() -> dict[Key, list[str]]:
            if futures is None:
                holders: defaultdict[Key, list[str]] = defaultdict(list)
                for address, held in (await self._sized_keys("has_what", None)).items():
                    for key, _ in held:
                        holders[key].append(address)
                return dict(holders)
            keys: list[Key] = list(dict.fromkeys(f.key for f in futures_of(futures)))
            if not keys:
                return {}
            answer = await self.data.holders(keys)
            return dict(zip(answer.keys, answer.holders, strict=False))

        return self.connection.sync(run, **kwargs)

    def has_what(self, workers: Any = None, **kwargs: Any) -> Any:
        return self.connection.sync(self._keys_by_worker, "has_what", workers, **kwargs)

    def processing(self, workers: Any = None, **kwargs: Any) -> Any:
        return self.connection.sync(self._keys_by_worker, "processing", workers, **kwargs)

    def nbytes(self, keys: Any = None, summary: bool = True, **kwargs: Any) -> Any:
        async def run() -> dict[Any, int]:
            wanted = None if keys is None else {getattr(k, "key", k) for k in keys}
            sizes: dict[Any, int] = {}
            for held in (await self._sized_keys("has_what", None)).values():
                for key, n in held:
                    if wanted is None or key in wanted:
                        sizes[key] = n
            if not summary:
                return sizes
            total: defaultdict[str, int] = defaultdict(int)
            for key, n in sizes.items():
                total[key_split(key)] += n
            return dict(total)

        return self.connection.sync(run, **kwargs)

    def story(self, *keys_or_futures: Any, on_error: str = "raise", **kwargs: Any) -> Any:
        if on_error not in ("raise", "ignore"):
            raise ValueError(f"on_error must be 'raise' or 'ignore', not {on_error!r}")

        async def run() -> list[tuple[Any, ...]]:
            keys = [f.key for f in futures_of(list(keys_or_futures))] + [
                k for k in keys_or_futures if not hasattr(k, "key")
            ]
            try:
                reply, _ = await self.connection.request(
                    m.Story(), m.StoryReply, encode_keys(keys)
                )
            except Exception:
                if on_error == "raise":
                    raise
                return []
            events: list[tuple[Any, ...]] = [
                ("scheduler", key, str(start), str(finish), {}, f"stimulus-{stimulus}", at)
                for key, story in zip(keys, reply.stories, strict=True)
                for start, finish, stimulus, at in story
            ]
            return sorted(events, key=lambda e: float(e[6]))

        return self.connection.sync(run, **kwargs)

    def get_scheduler_logs(self, n: int | None = None, **kwargs: Any) -> Any:
        async def run() -> list[tuple[str, str]]:
            reply, _ = await self.connection.request(
                m.GetLogs(which="scheduler", n=n), m.GetLogsReply
            )
            return reply.logs

        return self.connection.sync(run, **kwargs)

    def get_worker_logs(
        self, n: int | None = None, workers: Any = None, nanny: bool = False, **kwargs: Any
    ) -> Any:
        async def run() -> dict[str, list[tuple[str, str]]]:
            wanted = None if workers is None else await self._worker_addresses(workers)
            request = m.GetLogs(which="workers", n=n, nanny=nanny, workers=wanted)
            reply, _ = await self.connection.request(request, m.GetLogsReply)
            out = dict(reply.workers)
            for address, why in reply.errors.items():
                out[address] = [("ERROR", f"no logs from {address}: {why}")]
            return out

        return self.connection.sync(run, **kwargs)

    def get_versions(
        self, check: bool = False, packages: Sequence[str] | None = None, **kwargs: Any
    ) -> Any:
        async def run() -> dict[str, Any]:
            names = list(packages or [])
            reply, _ = await self.connection.request(m.Versions(packages=names), m.VersionsReply)
            for address, why in reply.errors.items():
                logger.warning("no versions from worker %s: %s", address, why)
            mine = self.client_versions(names)
            found = {"scheduler": reply.scheduler, "workers": reply.workers, "client": mine}
            if check:
                _check_versions(found)
            return found

        return self.connection.sync(run, **kwargs)

    def client_versions(self, packages: list[str]) -> dict[str, Any]:
        """This client's versions (a method, so that tests can pretend others)."""
        return versions.get_versions(packages)

    async def _worker_addresses(self, workers: Any) -> list[str]:
        """The addresses of the workers named by ``workers`` (addresses, names or
        hosts), as ``Client.run`` selects them."""
        info, _ = await self.connection.request(m.SchedulerInfo(), m.SchedulerInfoReply)
        return [w["address"] for w in select_workers(info.workers, workers)]

    async def _keys_by_worker(self, which: str, workers: Any) -> dict[str, tuple[Key, ...]]:
        if workers is not None:
            if isinstance(workers, str):
                workers = [workers]
            # Names become addresses, as distributed's scheduler resolves its aliases.
            info, _ = await self.connection.request(m.SchedulerInfo(), m.SchedulerInfoReply)
            address_of = {w["name"]: w["address"] for w in info.workers}
            address_of |= {w["address"]: w["address"] for w in info.workers}
            workers = [address_of.get(w, w) for w in workers]
        held = await self._sized_keys(which, workers)
        out = {address: tuple(k for k, _ in keys) for address, keys in held.items()}
        return out | {w: () for w in workers or () if w not in out}

    async def _sized_keys(
        self, which: str, workers: list[str] | None
    ) -> dict[str, list[tuple[Key, int]]]:
        request = m.WorkerKeys(which=which, workers=workers)
        reply, payload = await self.connection.request(request, m.WorkerKeysReply)
        keys, sizes = decode_keys(bytes(payload)), reply.nbytes
        out: dict[str, list[tuple[Key, int]]] = {}
        i = 0
        for address, n in reply.workers:
            out[address] = list(zip(keys[i : i + n], sizes[i : i + n], strict=True))
            i += n
        return out


def _check_versions(found: dict[str, Any]) -> None:
    """Warn if versions differ, the required packages' rows first."""
    rows = versions.mismatches(found["client"], found["scheduler"], found["workers"])
    if rows:
        rows.sort(key=lambda r: r[0] not in versions.REQUIRED)
        warnings.warn(
            f"Mismatched versions found:\n\n{versions.mismatch_table(rows)}",
            versions.VersionMismatchWarning,
            stacklevel=3,
        )
