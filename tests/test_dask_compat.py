"""Regressions found by running dask's own test suite on squall (docs/dask-suite.md):
each cause that made a dask test fail on squall but pass on distributed, reduced and
checked on a real cluster."""

from __future__ import annotations

import operator
import sys
from collections.abc import Iterator
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import dask.array as da
import numpy as np
import pytest
from dask.array.utils import assert_eq
from dask.utils import key_split

import squall
from squall import Client
from squall.deploy.local import LocalCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, set_as_default=False) as c:
        yield c


def _getitem_a(d: dict[str, int]) -> int:
    return d["a"]


def test_a_graph_on_keys_whose_last_future_was_just_dropped(client: Client) -> None:
    """The futures of a compute are dropped as it returns; a second graph naming the
    same keys right after must not be refused (their release was still queued)."""
    for i in range(100):
        a = dask.delayed({"a": dask.delayed(i)})
        assert dask.compute(a, scheduler=client)[0] == {"a": i}
        b = dask.delayed(_getitem_a)(a)
        assert dask.compute(b, scheduler=client)[0] == i


def test_persist_compute_then_compute_again(client: Client) -> None:
    """``assert_eq(x, y, scheduler=client)`` persists ``y``, computes the persisted
    collection and drops it; computing ``y`` again reuses the same keys."""
    for _ in range(20):
        x = np.arange(60).reshape(6, 10)
        y = da.from_array(x, chunks=(3, 5)) + 1
        assert_eq(x + 1, y, scheduler=client)
        np.testing.assert_array_equal(y.compute(scheduler=client), x + 1)


def test_no_task_outlives_its_use_when_keys_are_reused(cluster: LocalCluster) -> None:
    """dask.array.linalg with a fixed name: later graphs of one computation give some
    keys other (fused) dependencies. The tasks those new dependencies make are not
    run, and every task is forgotten once released, so the next computation reusing
    the name gets its own data (a lingering ("A", 0, 0) gave it the previous one)."""
    rng = np.random.default_rng(1)
    with Client(cluster, set_as_default=False) as client:
        for m, chunks in [(20, 10), (20, (5, 10)), (40, (10, 10)), (20, 10)]:
            mat = rng.random((m, 10))
            data = da.from_array(mat, chunks=chunks, name="A")
            q, r = da.linalg.tsqr(data)
            assert_eq(mat, da.dot(q, r), scheduler=client)
            assert_eq(np.eye(10), da.dot(q.T, q), scheduler=client)
            assert client.scheduler_info()["n_tasks"] == 0


def _double(dsk: Any, keys: Any) -> dict[Any, Any]:
    return {
        k: (operator.mul, 2, v) if not key_split(k).startswith("finalize") else v
        for k, v in dsk.items()
    }


def test_a_dropped_key_is_defined_again_by_the_next_graph(client: Client) -> None:
    """Dropping the last future releases its key at once, as in distributed: a next
    graph giving the key another body (here through an optimisation) computes that
    body, even while the release is still on its way to the scheduler."""
    x = da.ones(10, chunks=(5,))
    for _ in range(10):
        with dask.config.set(array_optimize=_double):
            assert_eq(x + 1, (np.ones(10) * 2 + 1) * 2, check_chunks=False, scheduler=client)
        assert_eq(x + 1, np.ones(10) + 1, scheduler=client)


def test_a_known_key_keeps_its_first_definition(cluster: LocalCluster, client: Client) -> None:
    """A graph that gives a key already on the cluster another body (dask's optimiser
    fuses keys differently from one graph to the next) is accepted; the task already
    there is kept, as distributed keeps it."""
    held = client.get({"x": (operator.add, 1, 1)}, "x", sync=False)
    assert held.result(timeout=10) == 2
    with Client(cluster, set_as_default=False) as other:
        redefined = {"x": (operator.add, 10, 10), "y": (operator.neg, "x")}
        assert other.get(redefined, "y") == -2
        with_other_deps = {"z": 5, "x": (operator.add, "z", 10), "w": (operator.neg, "x")}
        assert other.get(with_other_deps, "w") == -2


def test_dask_linalg_after_an_earlier_graph(client: Client) -> None:
    rng = np.random.default_rng(0)
    a = rng.random((20, 10))
    x = da.from_array(a, chunks=(5, 10))
    q, r = da.linalg.qr(x)
    assert_eq(q @ r, a, scheduler=client)
    assert_eq(x, a, scheduler=client)
    u, s, v = da.linalg.svd(x)
    assert_eq(u @ np.diag(s) @ v, a, scheduler=client)
    r = da.linalg.tsqr(x)[1]
    assert_eq(abs(r), abs(np.linalg.qr(a)[1]), scheduler=client)  # unique up to signs


def test_keys_holding_numpy_integers(client: Client) -> None:
    a = np.arange(6 * 8).reshape(6, 8)
    x = da.from_array(a, chunks=(3, 4))
    assert_eq(x.vindex[[0, 1], ::-1], a[[0, 1], ::-1], scheduler=client)
    key = ("k", np.int64(3))
    f = client.submit(operator.add, 1, 2, key=key)
    assert f.result(timeout=10) == 3
    assert client.gather({key: f})[key] == 3


def _where() -> Any:
    try:
        return squall.get_worker().address
    except ValueError:
        return "local"


def test_client_becomes_dask_default_until_closed(cluster: LocalCluster) -> None:
    job = dask.delayed(_where)()
    before = dask.config.get("scheduler", None)
    assert job.compute() == "local"
    with Client(cluster) as c:
        assert dask.config.get("scheduler") == "squall"
        assert job.compute().startswith("tcp://")
        y = dask.persist(da.ones(10, chunks=5) + 1)[0]
        # Persisted on the cluster: the collection's graph holds the client's futures.
        assert len(c.futures) >= 2
        assert y.sum().compute() == 20
        with Client(cluster, set_as_default=False):
            assert job.compute().startswith("tcp://")  # still the first client
    assert dask.config.get("scheduler", None) == before
    assert job.compute() == "local"
    with dask.config.set(scheduler="threads"):
        with Client(cluster):
            assert job.compute().startswith("tcp://")
        assert dask.config.get("scheduler") == "threads"
    assert dask.config.get("scheduler", None) == before


def test_set_as_default_false_leaves_dask_alone(cluster: LocalCluster) -> None:
    job = dask.delayed(_where)()
    with Client(cluster, set_as_default=False):
        assert job.compute() == "local"
        with pytest.raises(ValueError, match="no squall Client"):
            squall.client.default.default_client()


def test_the_core_reports_redefinitions_with_other_dependencies() -> None:
    s = squall.core.Scheduler()
    c = s.client("me")
    s.submit(c, ["a", "b"], [[], []], now=0.0, specs=[b"a", b"b"])
    s.submit(c, ["a", "c"], [["b"], [0]], now=0.1, specs=[b"a2", b"c"])
    assert s.take_redefined() == ["a"]
    assert s.take_redefined() == []
    s.submit(c, ["a"], [[]], now=0.2, specs=[b"a3"])  # another body alone: silent
    assert s.take_redefined() == []


def _length(b: bytes) -> int:
    return len(b)


def test_messages_larger_than_a_frame_go_in_parts() -> None:
    """dask's tensordot test sends a graph of over 1 GiB (a frame's limit): it travels
    in parts, and so does the task it holds. A message over the message limit fails
    its own call with a clear error; the connection and other futures live on.
    Messages that fit are batched into frames that fit."""
    with (
        dask.config.set(
            {"squall.comm.max-frame-bytes": 32 * 2**20, "squall.comm.max-message-bytes": "64MiB"}
        ),
        LocalCluster(n_workers=1, threads_per_worker=1) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        before = client.submit(operator.add, 1, 2)
        parts = client.submit(_length, b"p" * (40 * 2**20))
        assert parts.result(timeout=30) == 40 * 2**20
        big = client.submit(_length, b"x" * (70 * 2**20))
        with pytest.raises(RuntimeError, match=r"not sent.*exceeds.*max-message-bytes"):
            big.result(timeout=30)
        assert before.result(timeout=30) == 3
        # A large result comes back in parts too.
        assert len(client.submit(bytes, 48 * 2**20).result(timeout=30)) == 48 * 2**20
        # Two messages that fit alone but not together: two frames, both arrive.
        halves = [client.submit(_length, bytes([i]) * (12 * 2**20)) for i in range(2)]
        assert client.gather(halves) == [12 * 2**20] * 2
