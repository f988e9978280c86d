"""The client's looks inside the cluster: ``call_stack``, ``profile``,
``benchmark_hardware``, ``dump_cluster_state`` and the scheduler file
(docs/runtime.md#call-stacks-and-profiles).

Each asks the workers with ``Client.run`` (one peer request per worker, no message of
its own) and the scheduler with the requests the client already makes; the functions
shipped to the workers are this module's, so they travel by reference.
"""

from __future__ import annotations

import asyncio
import gzip
import random
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import yaml  # type: ignore[import-untyped]

from squall.client.connection import ClientConnection
from squall.client.futures import Future
from squall.client.scheduler_file import write_scheduler_file
from squall.client.workers import ClusterOps
from squall.worker import hardware, profile
from squall.worker.memory import local_directory

if TYPE_CHECKING:
    from squall.client.diagnostics import Diagnostics
    from squall.worker.worker import Worker


def _keys_of(futures: Any, keys: Iterable[Any] | None) -> list[Any] | None:
    """The keys of ``futures`` (one or several) and ``keys``; None if neither is given."""
    if futures is None and keys is None:
        return None
    if isinstance(futures, Future):
        futures = [futures]
    found = [f.key if isinstance(f, Future) else f for f in futures or ()]
    return found + list(keys or ())


def worker_call_stack(keys: list[Any] | None, *, dask_worker: Worker) -> dict[Any, list[str]]:
    return dask_worker.call_stack(keys)


def worker_profile(
    start: float | None, stop: float | None, key: str | None, *, dask_worker: Worker
) -> dict[str, Any]:
    return dask_worker.get_profile(start, stop, key)


def worker_state(exclude: set[str], *, dask_worker: Worker) -> dict[str, Any]:
    """A worker's state for ``dump_cluster_state``: squall's fields."""
    state: dict[str, Any] = {
        "address": dask_worker.address,
        "name": dask_worker.name,
        "status": dask_worker.status,
        "nthreads": dask_worker.nthreads,
        "memory_limit": dask_worker.memory_limit,
        "scheduler": dask_worker.scheduler_address,
        "nanny": dask_worker.nanny,
        "tasks": {str(t.key): t.state for t in dask_worker.tasks.values()},
        "data": sorted(map(str, dask_worker.nbytes)),
        "nbytes": {str(k): n for k, n in dask_worker.nbytes.items()},
        "task_counts": dask_worker.task_counts(),
        "call_stacks": {str(k): v for k, v in dask_worker.call_stack().items()},
    }
    return {k: v for k, v in state.items() if k not in exclude}


async def worker_network(address: str, *, dask_worker: Worker) -> dict[str, float]:
    return await hardware.benchmark_network(dask_worker, address)


def worker_disk_and_memory(*, dask_worker: Worker) -> dict[str, dict[str, float]]:
    return {
        "disk": hardware.benchmark_disk(local_directory(dask_worker.local_directory_option)),
        "memory": hardware.benchmark_memory(),
    }


def plain(value: Any) -> Any:
    """``value`` as msgpack and YAML hold it: keys as strings, tuples as lists, unknown
    objects as their repr."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


class Inspection:
    """Those methods of :class:`~squall.client.client.Client`, documented there."""

    def __init__(
        self, connection: ClientConnection, cluster_ops: ClusterOps, diagnostics: Diagnostics
    ) -> None:
        self.connection = connection
        self.cluster_ops = cluster_ops
        self.diagnostics = diagnostics

    async def _on_workers(self, function: Any, *args: Any, workers: Any = None) -> dict[str, Any]:
        """``function(*args, dask_worker=worker)`` on each worker; those that fail
        (closing meanwhile) are left out."""
        result = await self.cluster_ops.run_on((function, args, {}), workers, on_error="ignore")
        assert result is not None  # wait=True
        return result

    def call_stack(self, futures: Any = None, keys: Any = None) -> Any:
        wanted = _keys_of(futures, keys)

        async def run() -> dict[str, Any]:
            stacks = await self._on_workers(worker_call_stack, wanted)
            return {w: s for w, s in stacks.items() if s}

        return self.connection.sync(run)

    def profile(
        self,
        key: str | None,
        start: float | None,
        stop: float | None,
        workers: Any,
        merge_workers: bool,
        plot: bool | str,
        filename: str | None,
        server: bool,
        scheduler: bool,
    ) -> Any:
        if plot or filename is not None:
            raise ValueError(
                "squall's Client.profile does not plot (plot=, filename=): it returns "
                "distributed's profile tree, which dask's and distributed's viewers read"
            )
        if server or scheduler:
            raise ValueError(
                "squall samples only the workers' task threads: Client.profile(server=, "
                "scheduler=) are not supported"
            )

        async def run() -> dict[str, Any]:
            trees = await self._on_workers(worker_profile, start, stop, key, workers=workers)
            return profile.merge(*trees.values()) if merge_workers else trees

        return self.connection.sync(run)

    def benchmark_hardware(self) -> Any:
        async def run() -> dict[str, dict[str, float]]:
            local = await self._on_workers(worker_disk_and_memory)
            addresses = list(local)
            random.shuffle(addresses)  # pairs of workers of one host would all look local
            pairs = list(zip(addresses[::2], addresses[1::2], strict=False))
            network = await asyncio.gather(
                *(self._on_workers(worker_network, b, workers=[a]) for a, b in pairs)
            )
            measured = {
                "disk": [r["disk"] for r in local.values()],
                "memory": [r["memory"] for r in local.values()],
                "network": [r for answer in network for r in answer.values()],
            }
            return {mode: hardware.average(rows) for mode, rows in measured.items()}

        return self.connection.sync(run)

    def dump_cluster_state(
        self,
        filename: str,
        write_from_scheduler: bool | None,
        exclude: Iterable[str],
        format: Literal["msgpack", "yaml"],
    ) -> Any:
        if write_from_scheduler:
            raise ValueError(
                "squall writes the cluster dump from the client: "
                "write_from_scheduler=True is not supported"
            )
        if format not in ("msgpack", "yaml"):
            raise ValueError(f"format must be 'msgpack' or 'yaml', not {format!r}")
        left_out = set(exclude)

        async def run() -> None:
            state = await self.cluster_state(left_out)
            path = Path(f"{filename}.{'msgpack.gz' if format == 'msgpack' else 'yaml'}")
            if format == "msgpack":
                path.write_bytes(gzip.compress(msgspec.msgpack.encode(state)))
            else:
                path.write_text(yaml.safe_dump(state))

        return self.connection.sync(run)

    async def cluster_state(self, exclude: set[str]) -> dict[str, Any]:
        """``{"scheduler", "workers", "versions"}`` as plain data (squall's fields)."""
        d = self.diagnostics
        info = await self.cluster_ops.identity()
        scheduler = {
            "address": info.address,
            "id": info.scheduler_id,
            "started": info.started,
            "n_tasks": info.n_tasks,
            "workers": info.workers,
            "who_has": await d.who_has(None, asynchronous=True),
            "processing": await d.processing(None, asynchronous=True),
            "log": await d.get_scheduler_logs(None, asynchronous=True),
        }
        workers = await self._on_workers(worker_state, exclude)
        versions = await d.get_versions(asynchronous=True)
        state = {
            "scheduler": {k: v for k, v in scheduler.items() if k not in exclude},
            "workers": workers,
            "versions": {"scheduler": versions["scheduler"], "workers": versions["workers"]},
            "written": time.time(),
        }
        return plain(state)  # type: ignore[no-any-return]

    def write_scheduler_file(self, scheduler_file: str) -> Any:
        async def run() -> None:
            info = await self.cluster_ops.identity()
            identity = {
                "type": "Scheduler",
                "id": info.scheduler_id,
                "address": info.address,
                "services": info.services,
                "started": info.started,
                "workers": {},
            }
            write_scheduler_file(scheduler_file, identity)

        return self.connection.sync(run)
