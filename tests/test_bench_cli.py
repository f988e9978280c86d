"""``squall bench core`` prints one JSON object per row with the documented fields."""

from __future__ import annotations

import json

import pytest

from squall.cli import main


def test_bench_core_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "core", "--tasks", "20000", "--repeat", "1", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    names = {r["name"] for r in rows}
    assert {"ingest-map", "lifecycle-map", "lifecycle-tree", "order-tree-core"} <= names
    assert {"order-tree-squall.order", "order-tree-dask.order"} <= names
    assert {"steal-bin-add-remove", "worker-choice-1000-workers"} <= names
    for r in rows:
        assert {"name", "tasks", "seconds", "tasks_per_s"} <= set(r)
        assert r["seconds"] > 0
    assert 0 < next(r for r in rows if r["name"] == "memory-per-task")["bytes_per_task"] < 1000


def test_demo_runs_on_an_embedded_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's main job: ``squall demo`` (each step checks its own result)."""
    assert main(["demo", "--tasks", "2000"]) == 0
    out = capsys.readouterr().out
    assert "squall LocalCluster at tcp://127.0.0.1:" in out
    assert "-> 2001000" in out and "-> 8390656" in out
    assert "(x + x.T).sum()" in out


@pytest.mark.slow
def test_bench_e2e_quick_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "e2e", "--quick", "--repeat", "1", "--json"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    got = {(r["workload"].split(" ")[0], r["system"]) for r in rows}
    for workload in ("map", "submit", "delayed-tree", "array-x+xT-sum", "hold-waiting"):
        assert {(workload, "squall"), (workload, "dask")} <= got
    assert all(r["tasks"] > 0 and r["seconds"] > 0 for r in rows)
