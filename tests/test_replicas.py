"""Client.replicate, Client.rebalance and Client.amm on a real cluster of 4 worker
processes (docs/runtime.md#replicas-and-rebalancing)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import dask
import pytest

import squall
from squall import Client
from tests.conftest import eventually

SIZE = 1_000_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[squall.LocalCluster]:
    # Managed bytes only: the processes' own memory would swamp a few MB of test data.
    settings = {
        "squall.worker.memory.rebalance.measure": "managed",
        "squall.scheduler.active-memory-manager.interval": "200ms",
    }
    with (
        dask.config.set(settings),
        squall.LocalCluster(n_workers=4, threads_per_worker=1, memory_limit=0) as cluster,
    ):
        yield cluster


@pytest.fixture
def c(cluster: squall.LocalCluster) -> Iterator[Client]:
    with Client(cluster) as client:
        eventually(lambda: not any(client.has_what().values()))  # the last test's data
        yield client


def holders(c: Client, f: squall.Future) -> list[str]:
    return sorted(c.who_has([f])[f.key])


def held_bytes(c: Client) -> dict[str, int]:
    sizes = c.nbytes(summary=False)
    return {w: sum(sizes[k] for k in keys) for w, keys in c.has_what().items()}


def blob(i: int) -> bytes:
    return bytes([i]) * SIZE


def test_replicate_to_n_and_to_all(c: Client) -> None:
    a = sorted(c.nthreads())
    [x] = c.scatter([blob(1)], workers=[a[0]])
    c.replicate([x], n=2)
    assert len(holders(c, x)) == 2 and a[0] in holders(c, x)
    c.replicate(x)
    assert holders(c, x) == a
    assert c.submit(len, x).result(timeout=20) == SIZE
    assert x.result(timeout=20) == blob(1)


def test_replicate_among_workers_drops_the_excess_there_only(c: Client) -> None:
    a = sorted(c.nthreads())
    [x] = c.scatter([blob(2)], broadcast=True)
    assert holders(c, x) == a
    c.replicate([x], n=1, workers=a[:2])
    assert len(set(holders(c, x)) & set(a[:2])) == 1
    assert set(a[2:]) <= set(holders(c, x))
    c.replicate([x], n=1)
    assert len(holders(c, x)) == 1
    assert c.submit(len, x, workers=[a[3]]).result(timeout=20) == SIZE
    with pytest.raises(ValueError, match="delete data"):
        c.replicate([x], n=0)
    with pytest.raises(ValueError, match="no such worker"):
        c.replicate([x], workers=["tcp://127.0.0.1:1"])


def test_rebalance_moves_bytes_from_a_loaded_worker_to_the_others(c: Client) -> None:
    a = sorted(c.nthreads())
    xs = c.scatter([blob(i) for i in range(8)], workers=[a[0]])
    before = held_bytes(c)
    assert before[a[0]] >= 8 * SIZE and not any(before[w] for w in a[1:])
    c.rebalance()
    after = held_bytes(c)
    mean = sum(after.values()) / 4
    assert all(abs(n - mean) <= SIZE + 1000 for n in after.values()), after
    # Moved, not copied: every result has one holder, and the values are intact.
    assert all(len(ws) == 1 for ws in c.who_has(xs).values())
    assert c.gather(xs) == [blob(i) for i in range(8)]


def test_rebalance_of_some_futures_and_some_workers(c: Client) -> None:
    a = sorted(c.nthreads())
    movable = c.scatter([blob(i) for i in range(4)], workers=[a[0]])
    pinned = c.scatter([blob(10 + i) for i in range(4)], workers=[a[0]])
    c.rebalance(movable)
    assert all(ws == [a[0]] for ws in c.who_has(pinned).values())
    assert all(a[0] not in ws for ws in c.who_has(movable).values())
    others = {w: c.has_what()[w] for w in a[2:]}
    c.rebalance(workers=a[:2])
    assert {w: c.has_what()[w] for w in a[2:]} == others
    held = held_bytes(c)
    assert abs(held[a[0]] - held[a[1]]) <= SIZE + 1000, held
    assert c.gather(movable + pinned) == [blob(i) for i in [0, 1, 2, 3, 10, 11, 12, 13]]
    with pytest.raises(KeyError, match="Could not rebalance"):
        lost = c.submit(lambda: 1 / 0)
        c.rebalance([lost])


def test_amm_run_once_reduces_replicas(c: Client) -> None:
    [x] = c.scatter([blob(3)], broadcast=True)
    assert len(holders(c, x)) == 4
    c.amm.run_once()
    assert len(holders(c, x)) == 1
    assert c.submit(len, x).result(timeout=20) == SIZE


def test_amm_start_stop_running(c: Client) -> None:
    assert c.amm.running() is False  # squall's default (docs/runtime.md)
    c.amm.start()
    assert c.amm.running() is True
    [x] = c.scatter([blob(4)], broadcast=True)
    eventually(lambda: len(holders(c, x)) == 1)
    c.amm.stop()
    assert c.amm.running() is False
    [y] = c.scatter([blob(5)], broadcast=True)
    time.sleep(0.6)  # three intervals: a started pass would have run
    assert len(holders(c, y)) == 4
    assert c.gather([x, y]) == [blob(4), blob(5)]


def test_dask_amm_keys_start_the_periodic_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # Dask's own keys, as a Dask user sets them (the scheduler process reads them).
    monkeypatch.setenv("DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__START", "True")
    monkeypatch.setenv("DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__INTERVAL", "100ms")
    with (
        squall.LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=0) as cluster,
        Client(cluster) as c,
    ):
        assert c.amm.running() is True
        [x] = c.scatter([blob(6)], broadcast=True)
        eventually(lambda: len(holders(c, x)) == 1)
        assert x.result(timeout=20) == blob(6)
