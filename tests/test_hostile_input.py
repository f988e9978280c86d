"""Mutated and hostile messages sent to a live scheduler and worker: each one fails alone
(an error reply, or that connection closed) and the processes keep serving."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import psutil
import pytest
from conftest import eventually, start_scheduler, start_worker

from squall import Client
from squall._core import encode_keys
from squall.protocol import comm, ops

SEED = 20261125
# Header fields of squall's messages, each given wrong values at random.
FIELDS = (
    "id", "n", "keys_bytes", "task", "run_id", "tasks", "keys", "sizes", "addresses",
    "executing", "bandwidth", "duration", "status", "stimulus", "priority", "workers",
    "resources", "retries", "timeout", "exception_text", "n_exception", "n_key", "parts",
    "total", "msgs", "payload", "interval", "pid", "exit_code", "order", "wanted",
    "task_options", "data_producers", "fifo_timeout", "allow_other_workers", "force",
    "nbytes", "wait", "nanny", "error",
)  # fmt: skip
VALUES: tuple[Any, ...] = (
    0, -1, 1, 2**31, 2**32 - 1, 2**40, 2**63 - 1, -(2**63), 1.5, float("nan"), float("inf"),
    "", "x" * 300, None, True, [], [1, 2], [[1, "a"]], [[0, 1.0]], {}, {"a": 1}, b"\0" * 9,
    [[0, -1]], ["tcp://127.0.0.1:1"], [2**33],
)  # fmt: skip
LOG = Path(tempfile.gettempdir()) / f"squall-hostile-{os.getpid()}.log"
# Requests any client may legitimately make that stop or shrink the cluster are left
# out: refusing them to strangers is the work of security, not of message checks.
DESTRUCTIVE = {ops.RESTART, ops.SHUTDOWN, ops.RETIRE_WORKERS, ops.RESTART_WORKERS}
MESSAGE_OPS = sorted(
    v
    for k, v in vars(ops).items()
    if k.isupper() and isinstance(v, str) and v not in DESTRUCTIVE | {ops.PART}
)
# What each role may send; mostly these are fuzzed, the rest now and then.
ROLE_OPS = {
    "client": (ops.UPDATE_GRAPH, ops.WHO_HAS, ops.RELEASE_KEYS, ops.CANCEL, ops.RETRY,
               ops.SCHEDULER_INFO, ops.SCATTER, ops.FIRE_AND_FORGET),
    "worker": (ops.FINISHED, ops.ERRED, ops.HEARTBEAT, ops.STEAL_RESPONSE, ops.ADD_REPLICAS,
               ops.DROP_REPLICAS, ops.LONG_RUNNING, ops.RESCHEDULE, ops.RELEASE_WORKER_DATA),
    "nanny": (ops.WORKER_DIED,),
    "peer": (ops.GET_DATA, ops.UPDATE_DATA, ops.RUN),
}  # fmt: skip


def payloads(rng: random.Random) -> bytes:
    """Garbage, counts that overstate what follows, or valid keys cut short."""
    kind = rng.randrange(5)
    if kind == 0:
        return b""
    if kind == 1:
        return rng.randbytes(rng.randrange(1, 64))
    if kind == 2:
        big = rng.choice((2**40, 2**63 - 1, 7))
        return struct.pack("<qIIq", big, 2**32 - 1, rng.randrange(2**31), -1)
    keys = encode_keys([f"k-{i}" for i in range(rng.randrange(1, 5))])
    return keys[: rng.randrange(len(keys) + 1)]


def mutated(rng: random.Random, op: str) -> tuple[dict[str, Any], bytes]:
    header: dict[str, Any] = {"op": op}
    for field in rng.sample(FIELDS, rng.randrange(0, 6)):
        header[field] = rng.choice(VALUES)
    # Worker peers unpickle `run` and `update-data` payloads by design: send those no
    # random bytes that could happen to be a pickle.
    payload = b"" if op in (ops.RUN, ops.UPDATE_DATA) else payloads(rng)
    return header, payload


async def barrage(address: str, role: str, hello: dict[str, Any], seed: int, n: int) -> None:
    """``n`` mutated messages over connections as ``role``: whenever the peer closes
    one (as it may, for a malformed message), the next goes over a new connection."""
    rng = random.Random(seed)
    c: comm.Comm | None = None
    for _ in range(n):
        op = rng.choice(ROLE_OPS[role] if rng.random() < 0.9 else MESSAGE_OPS)
        try:
            if c is None or c.closed:
                c = await comm.connect(address, role=role, info=hello, timeout=10)
            await c.write(*mutated(rng, op))
            await asyncio.sleep(0.001)  # let the peer act on it (or close) first
        except comm.CommError:
            c = None
    if c is not None:
        await c.close()


def frame(n_head: int, n_payload: int) -> bytes:
    return struct.pack("<II", n_head, n_payload)


async def raw_frames(address: str, frames: list[bytes]) -> None:
    """Each byte string on a fresh connection, before any handshake."""
    host, port = comm.parse_address(address)
    for data in frames:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(data)
        with contextlib.suppress(ConnectionError, TimeoutError):
            await asyncio.wait_for(reader.read(), 10)  # refused: closed by the peer
        writer.close()


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """A scheduler and one worker (no nanny) as processes: (scheduler, worker address)."""
    sched, address = start_scheduler(stderr=LOG.open("w"))
    worker = start_worker(address, "--no-nanny", stderr=LOG.open("a"))
    try:
        with Client(address, timeout=20) as client:
            eventually(lambda: len(client.nthreads()) == 1, timeout=30)
            [worker_address] = client.nthreads()
        yield address, worker_address, sched
    finally:
        for p in (worker, sched):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=20)


def still_serving(address: str, processes: list[int]) -> None:
    """Alive, computing, and no error the processes did not expect (a traceback)."""
    assert all(psutil.pid_exists(p) for p in processes)
    assert "Traceback" not in LOG.read_text(), LOG.read_text()[-3000:]
    with Client(address, timeout=20) as client:
        assert client.submit(sum, [1, 2, 3], pure=False).result(timeout=20) == 6
        assert len(client.nthreads()) == 1


@pytest.mark.parametrize("role", ["client", "worker", "nanny"])
def test_the_scheduler_survives_mutated_messages(
    live: tuple[str, str, subprocess.Popen[str]], role: str
) -> None:
    address, _, sched = live
    hello: dict[str, Any] = {
        "client": {"client": "fuzz"},
        "worker": {"address": "tcp://127.0.0.1:9", "nthreads": 1, "name": "fuzz", "pid": 1},
        "nanny": {"address": "tcp://127.0.0.1:9"},
    }[role]
    start = time.monotonic()
    asyncio.run(barrage(address, role, hello, SEED + len(role), 600))
    print(f"600 mutated {role} messages in {time.monotonic() - start:.1f} s")
    still_serving(address, [sched.pid])


async def ask(address: str, messages: list[tuple[dict[str, Any], bytes]]) -> list[dict[str, Any]]:
    """Each message's reply, over one client connection."""
    c = await comm.connect(address, role="client", info={"client": "fuzz"}, timeout=10)
    await c.read()  # registered
    replies = []
    for header, payload in messages:
        await c.write(header, payload)
        [(reply, _)] = await asyncio.wait_for(c.read_messages(), 10)
        replies.append(reply)
    await c.close()
    return replies


def test_graphs_claiming_more_than_they_hold_fail_alone(
    live: tuple[str, str, subprocess.Popen[str]],
) -> None:
    # Once: a 16 TiB allocation from the task count, or from a dependency offset.
    address, _, sched = live
    keys = encode_keys(["a"])
    offsets = struct.pack("<q", -1) + struct.pack("<II", 0, 2**32 - 1)
    replies = asyncio.run(
        ask(
            address,
            [
                ({"op": ops.UPDATE_GRAPH, "id": 1, "n": 2**40, "keys_bytes": 0}, b""),
                ({"op": ops.UPDATE_GRAPH, "id": 2, "n": 1, "keys_bytes": len(keys)},
                 keys + offsets),
            ],
        )
    )  # fmt: skip
    assert [r["op"] for r in replies] == [ops.REQUEST_FAILED] * 2
    assert all("malformed" in r["error"] for r in replies), replies
    still_serving(address, [sched.pid])


def test_a_worker_survives_mutated_peer_messages(
    live: tuple[str, str, subprocess.Popen[str]],
) -> None:
    address, worker_address, sched = live
    asyncio.run(barrage(worker_address, "peer", {}, SEED, 600))
    still_serving(address, [sched.pid])


def test_hostile_hellos_are_refused_without_holding_memory(
    live: tuple[str, str, subprocess.Popen[str]],
) -> None:
    address, _, sched = live
    rss = psutil.Process(sched.pid).memory_info().rss
    big = 600 * 2**20
    asyncio.run(
        raw_frames(
            address,
            [
                frame(big, 0) + b"\x80" * 2**20,  # a 600 MB hello, partly sent
                frame(16, big),
                frame(2**32 - 1, 2**32 - 1),
                os.urandom(64),
                frame(5, 0) + b"\xc1" * 5,  # not msgpack
            ],
        )
    )
    still_serving(address, [sched.pid])
    after = psutil.Process(sched.pid).memory_info().rss
    print(
        f"scheduler RSS {rss / 2**20:.0f} MiB before the hostile hellos, {after / 2**20:.0f} after"
    )
    assert after - rss < 64 * 2**20, f"the scheduler kept {(after - rss) / 2**20:.0f} MiB"


def test_a_nanny_connection_takes_no_large_frames(
    live: tuple[str, str, subprocess.Popen[str]],
) -> None:
    address, _, sched = live

    async def send_big() -> None:
        c = await comm.connect(address, role="nanny", info={"address": "tcp://127.0.0.1:9"})
        await c.read()  # registered
        with pytest.raises(comm.CommClosedError):  # closed while it writes, or after
            await c.write({"op": ops.WORKER_DIED, "pid": 1, "exit_code": 1}, b"x" * 2**21)
            await asyncio.wait_for(c.read(), 10)

    asyncio.run(send_big())
    still_serving(address, [sched.pid])


def test_silent_connections_are_closed_and_live_ones_kept() -> None:
    timeouts = {
        "DASK_SQUALL__COMM__TIMEOUTS__TCP": "1s",
        "DASK_SQUALL__COMM__TIMEOUTS__IDLE": "2s",
    }
    env = {**os.environ, **timeouts}
    sched, address = start_scheduler(env=env)
    worker = start_worker(address, env=env)

    async def strangers() -> list[bool]:
        """Handshaken client connections that then say nothing: closed by the scheduler?"""
        conns = [
            await comm.connect(address, role="client", info={"client": "idle"}, timeout=10)
            for _ in range(20)
        ]

        async def closed(c: comm.Comm) -> bool:
            try:
                while True:
                    await asyncio.wait_for(c.read(), 8)
            except comm.CommClosedError:
                return True
            except TimeoutError:
                return False

        return list(await asyncio.gather(*map(closed, conns)))

    try:
        with dask.config.set({"squall.comm.timeouts.tcp": "1s"}), Client(address) as client:
            eventually(lambda: len(client.nthreads()) == 1, timeout=30)
            x = client.submit(sum, [1, 2], pure=False)
            assert x.result(timeout=10) == 3  # the worker's peer connection is cached
            start = time.monotonic()
            assert all(asyncio.run(strangers()))
            assert time.monotonic() - start < 8
            # This client, the worker and its nanny kept theirs; the worker closed the
            # client's idle peer connection meanwhile, and it is reopened.
            assert len(client.nthreads()) == 1
            assert client.gather(x) == 3
            assert client.submit(sum, [x, 4]).result(timeout=10) == 7
    finally:
        for p in (worker, sched):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=20)
