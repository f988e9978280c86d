"""A worker's (and a nanny's) peer listener, without a scheduler: ``get-data``,
``update-data`` and ``run`` over a real loopback connection, and what a request that
does not validate does."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Awaitable, Callable
from typing import Any

import cloudpickle
import msgpack
import numpy as np
import pytest

from squall._core import encode_keys
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.peers import MISSING, UNPICKLABLE, DataReply, Peers, Pickled
from squall.worker.nanny import Nanny
from squall.worker.worker import Worker


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


async def serving(
    serve: Callable[[comm.Comm], Awaitable[None]],
) -> tuple[comm.Listener, Peers]:
    listener = await comm.listen("tcp://127.0.0.1:0", serve, roles=frozenset({"peer"}))
    return listener, Peers(reply_timeout=10)


def worker() -> Worker:
    return Worker("tcp://127.0.0.1:1", nthreads=1, memory_limit=0, dashboard_address=None)


class Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("not this one")


def test_update_data_stages_values_and_get_data_serves_results() -> None:
    async def main() -> None:
        w = worker()
        listener, peers = await serving(w._peer_service.serve)
        addr = listener.address
        keys = encode_keys(["a", "b"])
        blobs = [pickle.dumps(1), pickle.dumps([1, 2, 3])]
        msg = m.UpdateData(keys_bytes=len(keys), sizes=[len(b) for b in blobs])
        reply, _ = await peers.request(addr, msg, keys + b"".join(blobs), reply=m.DataUpdated)
        assert reply.error is None and len(reply.nbytes) == 2
        assert set(w._staged) == {"a", "b"}
        # Staged values are not served until the scheduler's ``scattered`` names them.
        assert (await peers.get_data(addr, ["a"])).sizes == [MISSING]
        w._scattered(m.Scattered(tasks=[3, -1]), memoryview(encode_keys(["a", "b"])))
        w._core.put_scattered(4, "u", Unpicklable(), 10)
        got = await peers.get_data(addr, ["a", "b", "u"])
        assert got.sizes[1:] == [MISSING, UNPICKLABLE] and "not this one" in got.failed[2][0]
        first = got.values()[0]
        assert isinstance(first, Pickled) and first.load() == 1
        assert w.transfers.outgoing_total == 2  # each data reply counts
        bad = m.UpdateData(keys_bytes=len(keys), sizes=[1, 1])
        reply, _ = await peers.request(addr, bad, keys + b"xy", reply=m.DataUpdated)
        assert reply.error is not None and not w._staged
        await peers.close()
        await listener.close()
        await w.close()

    run(main())


def test_get_data_sends_arrays_out_of_band_and_they_arrive_writeable() -> None:
    """numpy's buffers travel beside their pickles, are not copied on arrival (the
    arrays are views of the received memory) and stay writeable."""

    async def main() -> None:
        w = worker()
        listener, peers = await serving(w._peer_service.serve)
        arrays = {"x": np.arange(2**18, dtype=np.int64), "y": np.ones((64, 64)), "z": 7}
        w._core.put_scattered(1, "x", arrays["x"], arrays["x"].nbytes)
        w._core.put_scattered(2, "y", arrays["y"], arrays["y"].nbytes)
        w._core.put_scattered(3, "z", 7, 28)
        got = await peers.get_data(listener.address, ["x", "y", "z"])
        assert sorted(got.buffers) == [0, 1] and got.buffers[0] == [arrays["x"].nbytes]
        values = got.values()
        assert all(isinstance(v, Pickled) for v in values)
        x, y, z = (v.load() for v in values if isinstance(v, Pickled))
        assert (x == arrays["x"]).all() and (y == arrays["y"]).all() and z == 7
        assert x.flags.writeable and not x.flags.owndata
        x[0] = 5
        assert arrays["x"][0] == 0  # received, not the worker's own array
        await peers.close()
        await listener.close()

    run(main())


def test_get_data_reply_sizes_must_add_up() -> None:
    payload = memoryview(b"x" * 10)
    assert DataReply([4], payload, {0: [6]}, {}).consistent()
    assert DataReply([-1, 4, -2], payload, {1: [1, 5]}, {}).consistent()
    bad = [([4], {0: [5]}), ([4], {1: [6]}), ([-1, 4], {0: [6]}), ([4], {0: [7, -1]})]
    for sizes, buffers in bad:
        assert not DataReply(sizes, payload, buffers, {}).consistent()


def test_get_data_of_plain_values_held_answers_one_pickle_of_them_all() -> None:
    """The small results of a map go out as one pickle of the list (``whole``): as many
    values as keys, in key order; anything else (a key not held, an array) goes value
    by value."""

    async def main() -> None:
        w = worker()
        listener, peers = await serving(w._peer_service.serve)
        values = {"a": 1, "b": "two", "c": None, "d": 4.5, "e": b"\x00" * 10}
        for i, (k, v) in enumerate(values.items()):
            w._core.put_scattered(i + 1, k, v, 28)
        keys = list(reversed(values))
        got = await peers.get_data(listener.address, keys)
        assert got.whole and got.sizes == [] and got.loaded() == [values[k] for k in keys]
        assert [v.load() for v in got.values() if v is not None] == got.loaded()
        partial = await peers.get_data(listener.address, ["a", "nope"])
        assert not partial.whole and partial.sizes[1] == MISSING
        await peers.close()
        await listener.close()
        await w.close()

    run(main())


def test_a_whole_reply_must_hold_one_value_per_key() -> None:
    payload = memoryview(pickle.dumps([1, 2]))
    assert DataReply([], payload, {}, {}, True, 2).loaded() == [1, 2]
    with pytest.raises(comm.ProtocolError, match="3 values"):
        DataReply([], payload, {}, {}, True, 3).loaded()
    with pytest.raises(comm.ProtocolError):
        DataReply([], memoryview(pickle.dumps((1, 2))), {}, {}, True, 2).loaded()
    assert not DataReply([2], payload, {}, {}, True, 2).consistent()
    assert not DataReply([], payload, {0: [1]}, {}, True, 2).consistent()


def test_run_calls_the_function_with_the_worker() -> None:
    async def main() -> None:
        w = worker()
        listener, peers = await serving(w._peer_service.serve)

        def where(dask_worker: Worker, plus: int) -> str:
            return f"{dask_worker.address}+{plus}"

        blob = cloudpickle.dumps((where, (), {"plus": 1}))
        assert await peers.run(listener.address, blob) == f"{w.address}+1"
        with pytest.raises(ZeroDivisionError):
            await peers.run(listener.address, cloudpickle.dumps((divmod, (1, 0), {})))
        await peers.close()
        await listener.close()
        await w.close()

    run(main())


def test_a_malformed_request_is_refused_and_closes_that_connection() -> None:
    async def main() -> None:
        w = worker()
        listener, peers = await serving(w._peer_service.serve)
        c = await comm.connect(listener.address, role="peer")
        head = msgpack.packb(
            {"op": "batch", "msgs": [{"op": "get-data", "n": "x"}], "spans": [[0, 0]]}
        )
        c._stream.write(len(head).to_bytes(4, "little") + (0).to_bytes(4, "little") + head)
        reply, _ = await c.read()
        assert isinstance(reply, m.Error) and "get-data" in reply.message
        with pytest.raises(comm.CommClosedError):
            await c.read()
        await c.close()
        # Other connections are served.
        assert (await peers.get_data(listener.address, ["k"])).sizes == [MISSING]
        await peers.close()
        await listener.close()
        await w.close()

    run(main())


def test_a_nanny_serves_run_and_refuses_data_requests() -> None:
    async def main() -> None:
        nanny = Nanny("tcp://127.0.0.1:1", ["true"])
        listener, peers = await serving(nanny._serve_peer)
        blob = cloudpickle.dumps((lambda dask_worker: type(dask_worker).__name__, (), {}))
        assert await peers.run(listener.address, blob) == "Nanny"
        with pytest.raises(comm.CommError, match="holds no data"):
            await peers.get_data(listener.address, ["k"])
        await peers.close()
        await listener.close()
        nanny._record.unlink()

    run(main())
