"""The simulator's Python face."""

from __future__ import annotations

import pytest

import squall
from squall.cli import main


def test_builtin_workload_completes_deterministically() -> None:
    a = squall.sim.simulate("wide", n=300, workers=3, threads=2)
    b = squall.sim.simulate("wide", n=300, workers=3, threads=2)
    assert a["completed"] and a == b
    assert sum(w["tasks_executed"] for w in a["workers"]) == len(a["timeline"])


def test_custom_graph_with_a_worker_death_still_completes() -> None:
    keys = [f"x-{i}" for i in range(40)] + ["total"]
    deps = [[] for _ in range(40)] + [list(range(40))]
    r = squall.sim.simulate(
        keys=keys, deps=deps, durations=[1.0] * 41, workers=2, threads=1, deaths=[(0, 5.5)]
    )
    assert r["completed"]
    assert dict(r["completion"])["total"] > 0
    assert any(outcome == "lost" for *_, outcome in r["timeline"])


def test_queuing_keeps_peak_memory_lower() -> None:
    on = squall.sim.simulate("wide", n=600, workers=2, threads=2)
    off = squall.sim.simulate(
        "wide", n=600, workers=2, threads=2, config={"worker-saturation": "inf"}
    )
    peak = lambda r: max(w["peak_memory"] for w in r["workers"])  # noqa: E731
    assert peak(on) < peak(off)


def test_bad_graph_is_rejected() -> None:
    with pytest.raises(ValueError, match="earlier"):
        squall.sim.simulate(keys=["a", "b"], deps=[[1], []])


def test_cli_sim(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--workload", "map", "--tasks", "200"]) == 0
    assert "makespan" in capsys.readouterr().out
