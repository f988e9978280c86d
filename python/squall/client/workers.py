"""The client's view of the cluster: its workers, ``run``, ``restart`` and the
lifecycle requests (retire, restart some, wait for, shut down)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import numbers
from collections.abc import Callable
from typing import Any, Literal

import cloudpickle  # type: ignore[import-untyped]

from squall.client.connection import ClientConnection
from squall.client.loop import timeout_seconds
from squall.errors import TimeoutError
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.identity import worker_identity

logger = logging.getLogger("squall.client")


class ClusterOps:
    """The methods of :class:`~squall.client.client.Client` about the cluster, over
    its connection; those named as ``Client``'s are documented there."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection

    async def identity(self) -> m.SchedulerInfoReply:
        """The scheduler's ``scheduler-info`` reply: itself and its workers."""
        info, _ = await self.connection.request(m.SchedulerInfo(), m.SchedulerInfoReply)
        return info

    async def running_workers(self, workers: Any, timeout: float | None) -> list[str]:
        """Addresses of the running workers among ``workers`` (default all), sorted;
        waits up to ``timeout`` for one."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            info = await self.identity()
            found = [w["address"] for w in select_workers(info.workers, workers, running=True)]
            if found:
                return sorted(found)
            if deadline is not None and loop.time() > deadline:
                raise TimeoutError("No valid workers found")
            await asyncio.sleep(0.1)

    def scheduler_info(self, n_workers: int = -1, **kwargs: Any) -> Any:
        async def run() -> dict[str, Any]:
            info = await self.identity()
            listed = info.workers if n_workers < 0 else info.workers[:n_workers]
            return {
                "type": "Scheduler",
                "id": info.scheduler_id,
                "address": info.address,
                "services": info.services,
                "started": info.started,
                "n_workers": len(info.workers),
                "total_threads": info.total_threads,
                "total_memory": info.total_memory,
                "n_tasks": info.n_tasks,  # squall's addition: tasks the scheduler holds
                "workers": {w["address"]: worker_identity(w) for w in listed},
            }

        return self.connection.sync(run, **kwargs)

    def nthreads(self, workers: Any = None, **kwargs: Any) -> Any:
        async def run() -> dict[str, int]:
            info = await self.identity()
            return {
                w["address"]: int(w["nthreads"]) for w in select_workers(info.workers, workers)
            }

        return self.connection.sync(run, **kwargs)

    def run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: bool = True,
        nanny: bool = False,
        on_error: Literal["raise", "return", "ignore"] = "raise",
        **kwargs: Any,
    ) -> Any:
        if on_error not in ("raise", "return", "ignore"):
            raise ValueError(f"on_error must be 'raise', 'return', or 'ignore'; got {on_error!r}")
        call = (function, args, kwargs)
        return self.connection.sync(self.run_on, call, workers, wait, nanny, on_error)

    async def run_on(
        self,
        call: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]],
        workers: Any = None,
        wait: bool = True,
        nanny: bool = False,
        on_error: Literal["raise", "return", "ignore"] = "raise",
    ) -> dict[str, Any] | None:
        """``run``'s work: ``call`` (function, args, kwargs) on the selected workers."""
        blob = cloudpickle.dumps(call)

        async def one(address: str) -> Any:
            return await self.connection.peers.run(address, blob, wait=wait)

        info = await self.identity()
        selected = select_workers(info.workers, workers)
        addresses = [w["address"] for w in selected]
        targets = addresses
        if nanny:
            targets = [w["nanny"] for w in selected]
            if None in targets:
                raise ValueError("nanny=True, but some of these workers have no nanny")
        replies = await asyncio.gather(*map(one, targets), return_exceptions=True)
        results: dict[str, Any] = {}
        for address, r in zip(addresses, replies, strict=True):
            if isinstance(r, BaseException):
                if on_error == "raise":
                    raise r
                if on_error == "return":
                    results[address] = r
            else:
                results[address] = r
        return results if wait else None

    def restart(self, timeout: float | str | None = None, wait_for_workers: bool = True) -> Any:
        seconds = timeout_seconds(timeout) or 4 * self.connection.timeout

        async def run() -> None:
            request = m.RestartCluster(timeout=seconds, wait_for_workers=wait_for_workers)
            reply, _ = await self.connection.request(request, m.Restarted)
            if reply.error:
                raise TimeoutError(reply.error)

        return self.connection.sync(run)

    # ----- lifecycle (docs/runtime.md#cluster-lifecycle) ------------------------------------

    def retire_workers(
        self,
        workers: list[str] | str | None = None,
        close_workers: bool = True,
        remove: bool = True,
        **kwargs: Any,
    ) -> Any:
        async def run() -> dict[str, Any]:
            request = m.RetireWorkers(
                workers=[workers] if isinstance(workers, str) else workers,
                close_workers=close_workers,
                remove=remove,
                n=kwargs.get("n"),
            )
            reply, _ = await self.connection.request(request, m.RetireWorkersReply)
            if reply.kept:
                logger.warning("workers not retired: %s", reply.kept)
            return {a: worker_identity(w) for a, w in reply.retired.items()}

        return self.connection.sync(run)

    def restart_workers(
        self,
        workers: list[str],
        timeout: float | str | None = None,
        raise_for_error: bool = True,
    ) -> Any:
        seconds = timeout_seconds(timeout) or 4 * self.connection.timeout
        given = [workers] if isinstance(workers, str) else list(workers)

        async def run() -> dict[str, str]:
            addresses = await self._addresses(given)
            request = m.RestartWorkers(workers=addresses, timeout=seconds)
            try:
                reply, _ = await self.connection.request(request, m.RestartWorkersReply)
            except RuntimeError as e:
                raise ValueError(str(e)) from None
            out = {w: reply.results[a] for w, a in zip(given, addresses, strict=True)}
            if raise_for_error and any(v != "OK" for v in out.values()):
                raise TimeoutError(f"workers did not restart within {seconds}s: {out}")
            return out

        return self.connection.sync(run)

    async def _addresses(self, workers: list[str]) -> list[str]:
        """The addresses of workers given by address or name."""
        by_name = {w["name"]: w["address"] for w in (await self.identity()).workers}
        return [by_name.get(w, w) for w in workers]

    def wait_for_workers(self, n_workers: int, timeout: float | str | None = None) -> Any:
        if not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"n_workers must be a positive integer, not {n_workers!r}")
        seconds = timeout_seconds(timeout) or None

        async def run() -> None:
            request = m.WaitForWorkers(n_workers=n_workers, timeout=seconds)
            reply, _ = await self.connection.request(request, m.WaitForWorkersReply)
            if reply.error:
                raise TimeoutError(reply.error)

        return self.connection.sync(run)

    def shutdown(self) -> Any:
        async def run() -> None:
            with contextlib.suppress(comm.CommError):  # it may be gone already
                await self.connection.request(m.Shutdown(), m.ShutdownReply)

        if self.connection.asynchronous:

            async def both() -> None:
                await run()
                await self.connection.close()

            return both()
        self.connection.sync(run)
        return self.connection.close()


def select_workers(
    infos: list[dict[str, Any]], workers: Any, *, running: bool = False
) -> list[dict[str, Any]]:
    """The workers named by ``workers``: addresses (``host:port`` too, or ``(host,
    port)``), names or hosts; None means all. As distributed, ``run`` and the queries
    reach paused and retiring workers too; with ``running`` (where data is placed, as
    ``scatter``) only running ones."""
    live = [
        w for w in infos if w["status"] == "running" or (not running and w["status"] != "closed")
    ]
    if workers is None:
        return live
    if isinstance(workers, str | numbers.Number) or (
        isinstance(workers, tuple) and len(workers) == 2 and isinstance(workers[1], int)
    ):
        workers = [workers]
    wanted: set[Any] = set()
    for w in workers:
        if isinstance(w, tuple):
            w = comm.format_address(str(w[0]), int(w[1]))
        wanted.update((w, f"tcp://{w}") if isinstance(w, str) and "://" not in w else (w,))
    return [w for w in live if wanted & {w["address"], w.get("name"), w.get("host")}]
