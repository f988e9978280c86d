"""What the cluster holds and did, as distributed's client reports it: ``has_what``,
``processing``, ``nbytes``, ``story``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from typing import Any

from dask.utils import key_split

from squall._core import decode_keys, encode_keys
from squall.client.connection import ClientConnection
from squall.client.futures import futures_of
from squall.protocol import ops

Key = Hashable


class Diagnostics(ClientConnection):
    """The methods of :class:`~squall.client.client.Client` that inspect the cluster."""

    def has_what(self, workers: Any = None, **kwargs: Any) -> Any:
        """``{worker address: (keys it holds, …)}`` (of ``workers``, default all)."""
        return self.sync(self._keys_by_worker, "has_what", workers, **kwargs)

    def processing(self, workers: Any = None, **kwargs: Any) -> Any:
        """``{worker address: (keys it runs or has queued, …)}``."""
        return self.sync(self._keys_by_worker, "processing", workers, **kwargs)

    def nbytes(self, keys: Any = None, summary: bool = True, **kwargs: Any) -> Any:
        """Bytes of each result held on the cluster, ``{key: bytes}``, or with
        ``summary`` summed per key prefix (``{"inc": bytes}``), as distributed's."""

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

        return self.sync(run, **kwargs)

    def story(self, *keys_or_futures: Any, **kwargs: Any) -> Any:
        """The scheduler's retained transitions of these keys (or futures' keys), oldest
        first: ``[(key, start state, finish state, stimulus id, time), …]``."""

        async def run() -> list[tuple[Any, str, str, int, float]]:
            keys = [f.key for f in futures_of(list(keys_or_futures))] + [
                k for k in keys_or_futures if not hasattr(k, "key")
            ]
            h, _ = await self._request({"op": ops.STORY}, encode_keys(keys))
            events = [
                (key, str(start), str(finish), int(stimulus), float(time))
                for key, story in zip(keys, h["stories"], strict=True)
                for start, finish, stimulus, time in story
            ]
            return sorted(events, key=lambda e: e[4])

        return self.sync(run, **kwargs)

    async def _keys_by_worker(self, which: str, workers: Any) -> dict[str, tuple[Key, ...]]:
        held = await self._sized_keys(which, workers)
        return {address: tuple(k for k, _ in keys) for address, keys in held.items()}

    async def _sized_keys(self, which: str, workers: Any) -> dict[str, list[tuple[Key, int]]]:
        if isinstance(workers, str):
            workers = [workers]
        header = {"op": ops.WORKER_KEYS, "which": which, "workers": workers}
        h, payload = await self._request(header)
        keys, sizes = decode_keys(bytes(payload)), h["nbytes"]
        out: dict[str, list[tuple[Key, int]]] = {}
        i = 0
        for address, n in h["workers"]:
            out[address] = list(zip(keys[i : i + n], sizes[i : i + n], strict=True))
            i += n
        return out
