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
