"""Mutated and hostile messages sent to a live scheduler and worker: each one fails alone
(an error reply, or that connection closed) and the processes keep serving."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import random
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import msgpack
import msgspec
import psutil
import pytest
from conftest import eventually, start_scheduler, start_worker

import squall
from squall import Client
from squall._core import WorkerCore, encode_keys
from squall.protocol import comm, update_graph
from squall.protocol import messages as m
from squall.protocol.specs import call_prefix, fill_call
from squall.protocol.stream import Stream, open_stream
from squall.worker.memory import sizeof_value

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
    [[0, -1]], ["tcp://127.0.0.1:1"], [2**33], "sequential", [["GPU", -1.0]],
    [[{"retries": -1}, [2**31]]], [["tcp://127.0.0.1:1"], []], {"0": ["x", b"\x80"]},
    [[0.0, float("nan"), -1, True, 2**40, ""]],
    {"process": 2**63 - 1, "managed": -1, "spilled_memory": 0, "spilled_disk": 0,
     "spilled_count": -(2**63)},
)  # fmt: skip
LOG = Path(tempfile.gettempdir()) / f"squall-hostile-{os.getpid()}.log"
# Requests any client may legitimately make that stop or shrink the cluster are left
# out: refusing them to strangers is the work of security, not of message checks.
DESTRUCTIVE = {c.op() for c in (m.RestartCluster, m.Shutdown, m.RetireWorkers, m.RestartWorkers)}
# Every message of every route: now and then sent where it does not belong.
ALL_MESSAGES = sorted(
    {c for r in m.Route for c in m.messages(r) if c.op() not in DESTRUCTIVE},
    key=lambda c: (c.op(), c.__name__),
)
# What each role may send (the route its listener reads); mostly these are fuzzed.
ROLE_MESSAGES = {
    role: [c for c in m.messages(routes[1]) if c.op() not in DESTRUCTIVE]
    for role, routes in comm.ROLE_ROUTES.items()
}
# Ops no route carries, and op values of the wrong type.
UNKNOWN_OPS: tuple[Any, ...] = ("no-such-op", "", "batch", "part", None, 7, ["finished"])


def _typed(t: Any) -> list[Any]:
    """The VALUES a field of type ``t`` accepts on the wire."""
    ok = []
    for v in VALUES:
        with contextlib.suppress(msgspec.ValidationError):
            msgspec.msgpack.decode(comm.ENCODER.encode(v), type=t)
            ok.append(v)
    return ok


# Per message: its fields and, for each, the values of its type (to reach the handlers'
# own checks of values, past the decoder's of types).
TYPED = {
    c: [(f.encode_name, _typed(f.type)) for f in msgspec.structs.fields(c)] for c in ALL_MESSAGES
}


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


def mutated(rng: random.Random, role: str) -> tuple[dict[str, Any], bytes]:
    """One message header as a plain dict (its fields well typed with values out of
    range, of the wrong type, or missing; now and then of an op the route does not
    carry), and a payload."""
    pool = ROLE_MESSAGES[role] if rng.random() < 0.9 else ALL_MESSAGES
    cls = rng.choice(pool)
    header: dict[str, Any] = {"op": cls.op() if rng.random() < 0.97 else rng.choice(UNKNOWN_OPS)}
    for name, typed in TYPED[cls]:
        roll = rng.random()
        if roll < 0.7 and typed:
            header[name] = rng.choice(typed)
        elif roll < 0.85:
            header[name] = rng.choice(VALUES)
    for field in rng.sample(FIELDS, rng.randrange(0, 3)):
        header[field] = rng.choice(VALUES)
    if rng.random() < 0.02:
        del header["op"]
    # Worker peers unpickle `run` and `update-data` payloads by design: send those no
    # random bytes that could happen to be a pickle.
    payload = b"" if cls in (m.Run, m.UpdateData) else payloads(rng)
    return header, payload


def batch_frame(rng: random.Random, role: str) -> bytes:
    """A frame of 1-3 mutated messages, built by hand as a hostile peer may (see
    comm._frame): now and then its batch header is broken too (spans that do not match
    the messages or lie outside the payload, a stray ``parts``, a ``part`` frame)."""
    msgs, spans, payload = [], [], b""
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        header, data = mutated(rng, role)
        msgs.append(header)
        spans.append([len(payload), len(data)])
        payload += data
    batch: dict[str, Any] = {"op": "batch", "msgs": msgs, "spans": spans}
    kind = rng.randrange(40)
    if kind == 0:
        batch["spans"] = spans[:-1]
    elif kind == 1:
        batch["spans"] = [*spans, [0, 0]]
    elif kind == 2:
        batch["spans"] = [[rng.choice(VALUES), rng.choice(VALUES)] for _ in spans]
    elif kind == 3:
        batch["spans"][0] = [len(payload), 1]
    elif kind == 4:
        batch["parts"] = rng.choice(VALUES)
    elif kind == 5:
        batch = {"op": "part", "total": rng.choice(VALUES)}
    elif kind == 6:
        batch["msgs"] = rng.choice(VALUES)
    elif kind == 7:
        del batch[rng.choice(("op", "msgs", "spans"))]
    head = msgpack.packb(batch)
    return struct.pack("<II", len(head), len(payload)) + head + payload


async def handshaken(address: str, role: str, hello: dict[str, Any]) -> tuple[comm.Comm, Stream]:
    """A connection that completed the handshake as ``role``, and its stream to write
    frames by hand."""
    host, port = comm.parse_address(address)
    writer = await asyncio.wait_for(open_stream(host, port), 10)
    c = comm.Comm(writer, address)
    await c.write_handshake(m.Hello(protocol=m.PROTOCOL, role=role, **hello))
    welcome = await asyncio.wait_for(c.read_handshake(), 10)
    assert isinstance(welcome, m.Welcome), welcome
    c.expect(comm.ROLE_ROUTES[role][0])
    return c, writer


async def barrage(address: str, role: str, hello: dict[str, Any], seed: int, n: int) -> None:
    """``n`` frames of mutated messages over connections as ``role``: whenever the peer
    closes one (as it may, for a malformed message), the next goes over a new one."""
    rng = random.Random(seed)
    c: comm.Comm | None = None
    for _ in range(n):
        data = batch_frame(rng, role)
        try:
            if c is None or c.closed:
                c, writer = await handshaken(address, role, hello)
            writer.write(data)
            await writer.drain()
            await asyncio.sleep(0.001)  # let the peer act on it (or close) first
        except (comm.CommError, ConnectionError, OSError):
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
        with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
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


def one_frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """A batch frame of one message whose header is any dict."""
    head = msgpack.packb({"op": "batch", "msgs": [header], "spans": [[0, len(payload)]]})
    return struct.pack("<II", len(head), len(payload)) + head + payload


async def ask(
    address: str, messages: list[tuple[dict[str, Any], bytes]]
) -> list[m.Message | m.Malformed]:
    """Each message's reply, over one client connection."""
    c, writer = await handshaken(address, "client", {"client": "fuzz"})
    assert isinstance((await c.read())[0], m.ClientRegistered)
    replies = []
    for header, payload in messages:
        writer.write(one_frame(header, payload))
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
    graph = m.UpdateGraph.op()
    replies = asyncio.run(
        ask(
            address,
            [
                ({"op": graph, "id": 1, "n": 2**40, "keys_bytes": 0}, b""),
                ({"op": graph, "id": 2, "n": 1, "keys_bytes": len(keys)}, keys + offsets),
            ],
        )
    )
    assert all(isinstance(r, m.RequestFailed) for r in replies), replies
    assert [r.id for r in replies] == [1, 2]  # type: ignore[union-attr]
    assert all("malformed" in r.error for r in replies), replies  # type: ignore[union-attr]
    still_serving(address, [sched.pid])


def test_requests_with_malformed_headers_fail_alone_with_their_id(
    live: tuple[str, str, subprocess.Popen[str]],
) -> None:
    # Wrong types, a missing field, an op no client sends: each answered request-failed
    # with its id, over the same connection.
    address, _, sched = live
    keys = encode_keys(["a"])
    replies = asyncio.run(
        ask(
            address,
            [
                ({"op": m.UpdateGraph.op(), "id": 11, "n": "1", "keys_bytes": 0}, b""),
                ({"op": m.UpdateGraph.op(), "id": 12, "n": 1}, keys),
                ({"op": m.WhoHas.op(), "id": 13, "extra": 1}, keys),  # valid: answered
                ({"op": m.WorkerKeys.op(), "id": 14, "which": ["has_what"]}, b""),
                ({"op": m.Scatter.op(), "id": 15, "holders": [[1]], "nbytes": [1]}, keys),
                ({"op": m.Finished.op(), "id": 16, "n": 1}, b""),
                ({"op": "no-such-op", "id": 17}, b""),
                ({"op": m.Progress.op(), "id": 18, "watch": 2**40}, b""),
                ({"op": m.TaskStream.op(), "id": 19, "start": ""}, b""),
                ({"op": m.TaskStream.op(), "id": 20, "stop": "1xyz"}, b""),
            ],
        )
    )
    assert [type(r) for r in replies] == [m.RequestFailed] * 2 + [m.WhoHasReply] + [
        m.RequestFailed
    ] * 7, replies
    assert [r.id for r in replies] == list(range(11, 21))  # type: ignore[union-attr]
    for r in replies[:2] + replies[3:7] + replies[8:]:
        assert isinstance(r, m.RequestFailed) and "malformed" in r.error, r
    still_serving(address, [sched.pid])


def test_a_worker_cannot_overflow_what_clients_are_told(
    live: tuple[str, str, subprocess.Popen[str]],
) -> None:
    # Heartbeats claiming 2**63 - 1 tasks each: the worker is disconnected at the first,
    # and the task stream's total a client reads still encodes.
    address, _, sched = live

    async def beat() -> None:
        hello = {"address": "tcp://127.0.0.1:9", "nthreads": 1, "name": "fuzz", "pid": 1}
        c, writer = await handshaken(address, "worker", hello)
        assert isinstance((await c.read())[0], m.WorkerRegistered)
        writer.write(one_frame({"op": m.Heartbeat.op(), "stream_tasks": 2**63 - 1}) * 3)
        with pytest.raises(comm.CommClosedError):
            while True:
                await asyncio.wait_for(c.read_messages(), 10)

    asyncio.run(beat())
    with Client(address, timeout=20) as client:
        assert client.get_task_stream(start=0) is not None
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
            await c.write(m.WorkerDied(pid=1, exit_code=1, executing=None), b"x" * 2**21)
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
            except asyncio.TimeoutError:
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


def test_a_worker_refuses_compute_batches_naming_blobs_it_lacks() -> None:
    """A ``compute`` batch whose specs name a blob the worker does not hold, that drops
    a blob it does not hold, or whose blob section is malformed, is refused whole: the
    worker's tasks and blobs stay as they were (docs/protocol.md#compute)."""
    s = squall.core.Scheduler({"validate": True})
    c = s.client("c")
    s.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    function = cloudpickle.dumps(len)
    keys = [f"len-{i}" for i in range(3)]
    specs = [call_prefix(function) + pickle.dumps(((str(i),), {})) for i in range(3)]
    n, keys_bytes, payload, _ = update_graph.encode(keys, specs, None, [function])
    s.submit_wire(c, payload, n, keys_bytes, now=0.0)
    [(addresses, batch, count)] = s.encode_compute(s.take_commands()).values()
    # The section: no drops, one blob (id 0) of the function's bytes.
    section = struct.pack("<III", 0, 1, 0) + struct.pack("<I", len(function)) + function
    assert batch.startswith(section)
    tasks = batch[len(section) :]
    core = WorkerCore("tcp://127.0.0.1:1", 1, [], 0.0, fill_call, repr, sizeof_value, 8)
    bad = [
        (struct.pack("<II", 0, 0) + tasks, "does not hold"),  # the blob never sent
        (struct.pack("<III", 1, 7, 0) + tasks, "dropped blob 7 is not held"),
        (struct.pack("<II", 0, 0xFFFFFFFF) + tasks, "blobs"),  # a count past the bytes
        (section[:-1], "truncated"),
        (struct.pack("<IIII", 0, 1, 0, 0xFFFF) + function, "truncated"),  # an overlong blob
    ]
    for payload, error in bad:
        with pytest.raises(ValueError, match=error):
            core.compute(payload, addresses)
        assert core.blobs_held() == 0 and core.tasks() == {}
    assert core.compute(batch, addresses) == count
    assert core.blobs_held() == 1 and len(core.tasks()) == count
    # Blob 0 is held now: tasks naming it without sending it are taken.
    assert core.compute(struct.pack("<II", 0, 0) + tasks, addresses) == count
    core.clear_blobs()
    assert core.blobs_held() == 0
