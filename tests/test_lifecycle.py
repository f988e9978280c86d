"""The cluster lifecycle API (docs/runtime.md#cluster-lifecycle) on real processes:
graceful retirement (nothing recomputed), restarting some workers, waiting for
workers, shutdown, LocalCluster.scale/adapt and worker lifetimes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import cloudpickle  # type: ignore[import-untyped]
import pytest
from conftest import eventually

from squall import Client
from squall.deploy.local import LocalCluster

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def produce(log: str, i: int, nbytes: int) -> bytes:
    """A result of ``nbytes``; each execution leaves a line in ``log``."""
    with open(log, "a") as f:
        f.write(f"{i}\n")
    return bytes([i % 256]) * nbytes


def executions(log: Path) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def held_on(c: Client) -> dict[str, int]:
    return {a: w["metrics"]["in_memory"] for a, w in c.scheduler_info()["workers"].items()}


@pytest.mark.parametrize("close_workers", [False, True])
def test_retire_workers_keeps_every_result_without_recomputing(
    tmp_path: Path, close_workers: bool
) -> None:
    log = tmp_path / "runs"
    with LocalCluster(n_workers=3, threads_per_worker=1) as cluster, Client(cluster) as c:
        futures = c.map(produce, [str(log)] * 30, range(30), [100_000] * 30)
        c.gather(futures)
        assert executions(log) == 30
        held = held_on(c)
        [leaving, *_] = sorted(held, key=lambda a: -held[a])
        assert held[leaving] > 0
        nanny = c.scheduler_info()["workers"][leaving]["nanny"]
        retired = c.retire_workers([leaving], close_workers=close_workers)
        assert list(retired) == [leaving]
        assert retired[leaving]["nanny"] == nanny
        info = c.scheduler_info()["workers"]
        assert leaving not in info and len(info) == 2
        assert sum(w["metrics"]["in_memory"] for w in info.values()) == 30
        results = c.gather(futures)
        assert [r[0] for r in results] == list(range(30))
        assert executions(log) == 30, "a result was recomputed"
        if close_workers:  # its nanny exited too, and did not start another worker
            eventually(lambda: sum(p.poll() is None for p in cluster.worker_processes) == 2)
            time.sleep(0.5)
            assert len(c.scheduler_info()["workers"]) == 2
