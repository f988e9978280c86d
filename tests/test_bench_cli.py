"""``squall bench`` prints one JSON object per row with the documented fields, and
``squall demo`` runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from squall.cli import main
from squall.tools import bench


def bench_core(
    capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[list[dict[str, Any]], str]:
    """``squall bench core --json`` at a smoke-test size: its rows and its stderr."""
    assert main(["bench", "core", "--tasks", "20000", "--repeat", "1", "--json", *flags]) == 0
    out = capsys.readouterr()
    rows = [json.loads(line) for line in out.out.splitlines()]
    for r in rows:
        assert {"name", "tasks", "seconds", "tasks_per_s"} <= set(r)
        assert r["seconds"] > 0
    return rows, out.err


def test_bench_core_json(capsys: pytest.CaptureFixture[str]) -> None:
    """What any build measures: the bindings through the runtime's entry points."""
    rows, _ = bench_core(capsys)
    names = {r["name"] for r in rows}
    assert {"ingest-map", "lifecycle-map", "lifecycle-tree"} <= names
    assert {"order-tree-squall.order", "order-tree-dask.order"} <= names


def test_bench_core_without_the_bench_build_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "BENCH_BUILD", False)
    rows, err = bench_core(capsys, "--no-dask")
    assert {r["name"] for r in rows} == {"ingest-map", "lifecycle-map", "lifecycle-tree"}
    assert err == (
        "squall bench core: skipping memory-per-task, ingest-map-core, order-tree-core, "
        "order-map-core, steal-bin-add-remove, worker-choice-1000-workers: they need the "
        "bench build of squall._core (cargo feature 'bench'), not installed; from a source "
        "checkout, run `maturin develop --release --features bench`\n"
    )


@pytest.mark.skipif(
    not bench.BENCH_BUILD,
    reason="needs the bench build: `maturin develop --release --features bench`",
)
def test_bench_core_rows_of_the_bench_build(capsys: pytest.CaptureFixture[str]) -> None:
    rows, err = bench_core(capsys, "--no-dask")
    assert err == ""
    assert set(bench.BENCH_ROWS) <= {r["name"] for r in rows}
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


def test_bench_e2e_scale_reports_each_phase_and_each_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--scale`` runs a held map end to end on a real cluster and reports every phase
    and, per process, CPU per task and a peak RSS (the kernel's high-water mark)."""
    assert main(["bench", "e2e", "--scale", "3000", "--json"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["tasks"] == 3000
    assert all(row[k] > 0 for k in ("map_s", "wait_s", "gather_s", "release_s"))
    for field in ("cpu_us", "release_cpu_us", "peak_rss_mb", "held_rss_b_per_task"):
        assert set(row[field]) == {"client", "scheduler", "worker"}
    assert all(v > 10 for v in row["peak_rss_mb"].values())  # MB: whole Python processes
