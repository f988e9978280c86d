"""The rest of Client and LocalCluster a user script calls: call stacks, profiles,
hardware benchmarks, cluster dumps, scheduler files and LocalCluster's scaling
methods (ported from the behaviour of distributed's test_client.py, test_profile.py,
test_cluster_dump.py and test_local.py)."""

from __future__ import annotations

import gzip
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle  # type: ignore[import-untyped]
import msgspec
import pytest
import yaml  # type: ignore[import-untyped]
from conftest import eventually

import squall
from squall import Client, LocalCluster
from squall.worker import profile

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def slowinc(x: int, delay: float = 1.5) -> int:
    time.sleep(delay)
    return x + 1


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        yield c


def test_call_stack_of_a_sleeping_task(client: Client) -> None:
    future = client.submit(slowinc, 1, delay=3, pure=False)
    eventually(lambda: bool(client.call_stack(future)), timeout=20)
    stacks = client.call_stack(future)
    [(worker, by_key)] = stacks.items()
    assert worker in client.scheduler_info()["workers"]
    [lines] = by_key.values()
    assert future.key in by_key
    assert any("slowinc" in line for line in lines)
    assert lines[0].startswith('  File "') and "\n\t" in lines[0]
    assert all("_run_tasks" not in line for line in lines)  # the worker's frames are cut
    assert client.call_stack(keys=["no-such-key"]) == {}
    assert future.result(timeout=30) == 2
    assert client.call_stack() == {}  # nothing runs


def test_profile_shows_the_sleeping_function(client: Client) -> None:
    start = time.time()
    futures = client.map(slowinc, range(2), delay=1.5, pure=False)
    client.gather(futures)
    tree = client.profile(start=start)
    assert tree["identifier"] == "root" and tree["count"] > 10

    def names(node: dict[str, object]) -> set[str]:
        children = node["children"]
        assert isinstance(children, dict)
        found = {c["description"]["name"] for c in children.values()}
        return found.union(*(names(c) for c in children.values()))

    assert "slowinc" in names(tree)
    per_worker = client.profile(start=start, merge_workers=False)
    assert set(per_worker) == set(client.scheduler_info()["workers"])
    assert profile.merge(*per_worker.values())["count"] == tree["count"]
    assert "slowinc" in names(client.profile(key="slowinc", start=start))
    assert client.profile(key="no-such-prefix")["count"] == 0
    assert client.profile(start=time.time() + 3600)["count"] == 0
    with pytest.raises(ValueError, match="plot"):
        client.profile(plot=True)
    with pytest.raises(ValueError, match="scheduler"):
        client.profile(scheduler=True)


def test_profile_tree_merges_by_function() -> None:
    a, b = profile.create(), profile.create()
    frame = sys._getframe()
    profile.add(a, [frame])
    profile.add(b, [frame])
    profile.add(b, [frame])
    merged = profile.merge(a, b)
    assert merged["count"] == 3
    [child] = merged["children"].values()
    assert child["count"] == 3 and child["description"]["name"] == frame.f_code.co_name


def test_dump_cluster_state(client: Client, tmp_path: Path) -> None:
    futures = client.map(slowinc, range(3), delay=0, pure=False)
    client.gather(futures)
    client.dump_cluster_state(str(tmp_path / "dump"))
    state = msgspec.msgpack.decode(gzip.decompress((tmp_path / "dump.msgpack.gz").read_bytes()))
    assert set(state) >= {"scheduler", "workers", "versions"}
    assert set(state["workers"]) == set(client.scheduler_info()["workers"])
    held = {k for w in state["workers"].values() for k in w["data"]}
    assert {str(f.key) for f in futures} <= held
    assert set(state["scheduler"]["who_has"]) >= {str(f.key) for f in futures}
    client.dump_cluster_state(str(tmp_path / "dump"), format="yaml", exclude=["log"])
    loaded = yaml.safe_load((tmp_path / "dump.yaml").read_text())
    assert "log" not in loaded["scheduler"] and "workers" in loaded
    with pytest.raises(ValueError, match="write_from_scheduler"):
        client.dump_cluster_state(str(tmp_path / "x"), write_from_scheduler=True)


def test_scheduler_file_round_trip(client: Client, tmp_path: Path) -> None:
    path = tmp_path / "scheduler.json"
    client.write_scheduler_file(str(path))
    with Client(scheduler_file=str(path), set_as_default=False) as other:
        assert other.address == client.address
        assert other.submit(slowinc, 1, delay=0).result(timeout=30) == 2


def test_client_options_accepted_or_refused(client: Client) -> None:
    seen = []

    def extension(c: Client) -> str:
        seen.append(c)
        return "ext"

    options = {"heartbeat_interval": "1s", "connection_limit": 10, "serializers": ["pickle"]}
    with Client(client.address, set_as_default=False, extensions={"e": extension}, **options) as c:
        assert c.extensions == {"e": "ext"} and seen == [c]
    with pytest.raises(ValueError, match="serializes with pickle"):
        Client(client.address, serializers=["msgpack"])
    with pytest.raises(ValueError, match="connection_limit"):
        Client(client.address, connection_limit=0)


@pytest.mark.slow
def test_benchmark_hardware(client: Client) -> None:
    result = client.benchmark_hardware()
    assert set(result) == {"disk", "memory", "network"}
    for mode in ("disk", "memory", "network"):
        assert result[mode] and all(rate > 0 for rate in result[mode].values())


def test_local_cluster_methods() -> None:
    with LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        memory_limit="1 GiB",
        processes=False,
        dashboard_address=None,
        name="mine",
    ) as cluster:
        assert cluster.name == "mine" and cluster.scheduler_address.startswith("tcp://")
        client = cluster.get_client()
        assert client.address == cluster.scheduler_address
        assert cluster.get_client() is client  # the default client is this cluster's
        cluster.scale(cores=5)  # three workers of two threads
        cluster.wait_for_workers(n_workers=3, timeout=30)
        cluster.scale(memory="1.5 GiB")  # two workers of 1 GiB
        eventually(lambda: len(client.scheduler_info()["workers"]) == 2, timeout=30)
        cluster.scale_up(3)
        cluster.wait_for_workers(3, timeout=30)
        cluster.scale_up(1)  # never fewer
        victim = sorted(client.scheduler_info()["workers"])[0]
        cluster.scale_down([victim])
        eventually(lambda: victim not in client.scheduler_info()["workers"], timeout=30)
        logs = cluster.get_logs()
        assert set(logs) >= {"Cluster mine", "Scheduler"}
        assert set(logs) - {"Cluster mine", "Scheduler"} == set(client.scheduler_info()["workers"])
        adaptive = cluster.adapt(minimum_cores=4, maximum_memory="3 GiB")
        assert (adaptive.minimum, adaptive.maximum) == (2, 3)
        with pytest.raises(squall.TimeoutError):
            cluster.wait_for_workers(10, timeout=0.5)
        assert threading.active_count() > 0
