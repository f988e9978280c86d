"""The dashboard's data: the core's counters through the bindings, the snapshot and
the JSON routes' dicts on a live cluster, the scheduler's health figures."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from test_bindings import finish_all

import squall
from squall import Client, LocalCluster
from squall.protocol import comm
from squall.protocol import messages as m
from squall.scheduler.health import Health
from squall.scheduler.server import SchedulerServer
from squall.scheduler.snapshot import counts_json, dashboard_snapshot, identity_json


def inc(x: int) -> int:
    return x + 1


def fail(x: int) -> int:
    raise ValueError(x)


def test_counters_prefixes_groups_and_workers_in_one_call_each(
    sched: squall.core.Scheduler,
) -> None:
    c = sched.client("c")
    w = sched.add_worker("tcp://127.0.0.1:1", 2, now=0.0)
    sched.submit(c, ["a-1", "a-2", "b-1"], [[], [], [0, 1]], now=0.0, wanted=[2])
    assert sched.n_tasks_with_waiters() == 2  # b-1 waits on a-1 and a-2
    now = 0.0
    for _ in range(2):
        now += 0.1
        finish_all(sched, sched.take_commands(), now)
    counters = sched.counters()
    assert counters["states"]["memory"] == 1 and counters["states"]["released"] == 2
    assert counters["tasks_computed"] == 3 and counters["tasks_forgotten"] == 0
    assert counters["workers_added"] == 1 and counters["workers"]["idle"] == 1
    assert sched.state_counts() == {"memory": 1, "released": 2}
    a = next(p for p in sched.prefix_states() if p["name"] == "a")
    assert a["states"]["released"] == 2 and a["totals"]["memory"] == 2
    assert a["nbytes_total"] == 16 and a["duration_average"] is not None
    groups = sched.group_states()
    assert [g["name"] for g in groups] == ["b", "a"], "newest first"
    assert groups[0]["dependencies"] == ["a"] and groups[0]["len"] == 1
    assert len(sched.group_states(1)) == 1

    sched.heartbeat(w, now=now, load={"cpu": 12.5, "executing": 2, "read_bps": 10})
    [info] = sched.workers_info()
    assert info["load"] == {
        "cpu": 12.5,
        "read_bps": 10.0,
        "write_bps": 0.0,
        "executing": 2,
        "ready": 0,
        "in_flight": 0,
        "in_memory": 0,
    }
    assert info == sched.worker_info(w)
    sched.heartbeat(w, now=now, load=(1.0, 2.0, 3.0, 4, 5, 6, 7))
    assert sched.workers_info()[0]["load"]["in_memory"] == 7
    with pytest.raises(ValueError, match="7-tuple"):
        sched.heartbeat(w, now=now, load=(1.0, 2.0))

    sched.client_releases_keys(c, ["b-1"], now=now)
    assert sched.counters()["tasks_forgotten"] == 3
    assert sched.group_states() == [] and sched.state_counts() == {}


def test_the_snapshot_of_an_embedded_cluster() -> None:
    with (
        LocalCluster(processes=False, n_workers=2, threads_per_worker=2) as cluster,
        Client(cluster) as client,
    ):
        futures = client.map(inc, range(100))
        client.gather(futures)
        bad = client.submit(fail, 1)
        with pytest.raises(ValueError):
            bad.result(timeout=10)
        embedded = cluster._embedded
        assert embedded is not None

        async def read() -> tuple[dict[str, Any], ...]:
            s = embedded.scheduler
            return dashboard_snapshot(s), counts_json(s), identity_json(s)

        snap, counts, identity = embedded.call(read(), timeout=10)
    json.dumps([snap, counts, identity])  # JSON-able as it is
    assert snap["scheduler"]["workers"] == 2 and snap["scheduler"]["threads"] == 4
    assert snap["scheduler"]["clients"] == 1
    assert snap["counts"]["memory"] == 100 and snap["counts"]["erred"] == 1
    # The pages draw the core's states, which it sends; counts cover the live ones.
    assert snap["states"] == squall._core.TASK_STATES == (*snap["counts"], "forgotten")
    assert snap["totals"]["tasks_computed"] == 100 and snap["totals"]["tasks_erred"] == 1
    [p] = [p for p in snap["prefixes"] if p["name"] == "inc"]
    assert p["memory"] == p["total"] == 100 and p["compute_total"] > 0
    assert {g["prefix"] for g in snap["groups"]} == {"inc", "fail"}
    rows = snap["workers"]
    assert sum(r["in_memory"] for r in rows) == 100
    assert all(r["nthreads"] == 2 and r["status"] == "running" for r in rows)
    assert snap["scheduler"]["nbytes"] == sum(r["nbytes"] for r in rows) > 0
    assert snap["scheduler"]["memory"]["process"] == sum(r["memory"]["process"] for r in rows)
    assert snap["health"]["messages"] > 0
    assert counts["memory"] == 100 and counts["erred"] == 1 and counts["cores"] == 4
    assert counts["tasks"] == 101 and counts["workers"] == 2 and counts["hosts"] == 1
    assert counts["waiting_data"] == 0
    assert identity["type"] == "Scheduler" and identity["n_workers"] == 2
    assert set(identity["workers"]) == {r["address"] for r in rows}


def test_a_heartbeats_load_reaches_the_core() -> None:
    async def main() -> None:
        server = SchedulerServer("tcp://127.0.0.1:0", {"validate": True})
        await server.start()
        try:
            info = {"address": "tcp://127.0.0.1:9201", "nthreads": 1}
            worker = await comm.connect(server.address, role="worker", info=info)
            assert isinstance((await worker.read())[0], m.WorkerRegistered)
            load = {"cpu": 50.0, "executing": 1, "ready": 3}
            await worker.write(m.Heartbeat(executing=[], load=load))
            seen: list[type[m.Message] | None] = []
            while m.HeartbeatInterval not in seen:  # the answer: handled
                batch = await asyncio.wait_for(worker.read_messages(), 10)
                seen += [type(msg) if isinstance(msg, m.Message) else None for msg, _ in batch]
            [row] = dashboard_snapshot(server)["workers"]
            assert (row["cpu"], row["executing"], row["ready"], row["in_flight"]) == (50, 1, 3, 0)
            await worker.close()
        finally:
            await server.close()

    asyncio.run(main())


def test_health_measures_latency_and_rates() -> None:
    computed = [0]

    async def main() -> dict[str, Any]:
        health = Health(lambda: computed[0], interval=0.05)
        health.start()
        for _ in range(10):
            health.batch(3, 0.001)
            computed[0] += 5
            await asyncio.sleep(0.02)
        health.tick(0.002)
        await asyncio.sleep(0.12)
        await health.stop()
        return health.figures()

    f = asyncio.run(main())
    assert f["messages"] == 30 and f["batches"] == 10 and f["ticks"] == 1
    assert f["messages_per_second"] > 0 and f["tasks_per_second"] > 0
    assert f["core_seconds"] == pytest.approx(0.012)
    assert f["tick_seconds"] == pytest.approx(0.002)
    assert f["latency_history"] and f["latency"] >= 0
