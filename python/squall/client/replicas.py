"""Replicas on demand (docs/runtime.md#replicas-and-rebalancing): ``replicate``,
``rebalance`` and the active memory manager's switch, ``Client.amm``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from squall._core import encode_keys
from squall.client.connection import ClientConnection
from squall.client.futures import Future
from squall.client.waiting import ALL_COMPLETED, _wait
from squall.errors import TimeoutError
from squall.protocol import messages as m

if TYPE_CHECKING:
    from squall.client.client import Client

_ERRORS: dict[str, type[Exception]] = {
    "ValueError": ValueError,
    "KeyError": KeyError,
    "TimeoutError": TimeoutError,
}


def _workers(workers: Any) -> list[str] | None:
    if workers is None:
        return None
    return [str(w) for w in ([workers] if isinstance(workers, str) else workers)]


def _keys(futures: list[Future]) -> bytes:
    return encode_keys(list(dict.fromkeys(f.key for f in futures)))


class ReplicaOps:
    """The replica methods of :class:`~squall.client.client.Client` (documented there)."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection

    async def _ask(self, msg: m.Request, payload: bytes = b"") -> m.ReplicasReply:
        reply, _ = await self.connection.request(msg, m.ReplicasReply, payload)
        if reply.error is not None:
            raise _ERRORS.get(reply.error_type, RuntimeError)(reply.error)
        return reply

    async def replicate(
        self, futures: list[Future], n: int | None, workers: Any, branching_factor: int
    ) -> None:
        await _wait(futures, ALL_COMPLETED)
        if not futures:
            return
        msg = m.Replicate(n=n, workers=_workers(workers), branching_factor=branching_factor)
        await self._ask(msg, _keys(futures))

    async def rebalance(self, futures: list[Future] | None, workers: Any) -> None:
        if futures is not None:
            await _wait(futures, ALL_COMPLETED)
            if not futures:
                return
        msg = m.Rebalance(some_keys=futures is not None, workers=_workers(workers))
        await self._ask(msg, b"" if futures is None else _keys(futures))

    async def amm(self, method: str) -> Any:
        reply = await self._ask(m.Amm(method=method))
        return reply.running if method == "running" else None


class AMMClientProxy:
    """``Client.amm``: the scheduler's active memory manager, whose periodic pass drops
    surplus copies (docs/runtime.md#replicas-and-rebalancing). Each method blocks on a
    synchronous client and returns an awaitable on an asynchronous one."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def _run(self, method: str) -> Any:
        return self._client.sync(self._client.replica_ops.amm, method)

    def start(self) -> Any:
        """Start the periodic pass (every ``active-memory-manager.interval``)."""
        return self._run("start")

    def stop(self) -> Any:
        """Stop the periodic pass."""
        return self._run("stop")

    def run_once(self) -> Any:
        """Run the ReduceReplicas pass once now."""
        return self._run("run_once")

    def running(self) -> Any:
        """Whether the periodic pass is started."""
        return self._run("running")
