"""dask's own tests, routed through a squall cluster (tests/dask_suite, docs/dask-suite.md).

The default run checks the fixed slice CI runs; ``pytest -m slow tests/test_dask_suite.py``
runs the whole suite on squall and on distributed and fails on any test that passes on
distributed but not on squall."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dask_suite import run  # type: ignore[import-not-found]

NOT_PASSED = ("failed", "error")


def _route(
    route: str, targets: list[str], report: Path, extra: tuple[str, ...] = ()
) -> dict[str, object]:
    rc = run.run(route, targets, str(report), ["-p", "no:randomly", *extra])
    data: dict[str, object] = json.loads(report.read_text())
    data["rc"] = rc
    return data


def test_dask_suite_slice_passes_on_squall(tmp_path: Path) -> None:
    data = _route("squall", list(run.SLICE), tmp_path / "squall.json")
    outcomes = data["outcomes"]
    assert isinstance(outcomes, dict)
    failed = sorted(k for k, v in outcomes.items() if v in NOT_PASSED)
    assert not failed, failed
    assert not data["bypasses"]
    # The probe saw the tests' computes reach the cluster.
    assert isinstance(data["graphs"], int) and data["graphs"] > len(outcomes) // 2
    assert data["rc"] == 0


@pytest.mark.slow
def test_dask_suite_has_no_squall_only_failures(tmp_path: Path) -> None:
    # Some tests hang on distributed (e.g. test_graph_manipulation's): a shorter
    # timeout keeps each such hang to a minute.
    dist = _route(
        "distributed", list(run.FULL), tmp_path / "distributed.json", ("--timeout", "60")
    )
    squall = _route("squall", list(run.FULL), tmp_path / "squall.json")
    assert not squall["bypasses"] and not dist["bypasses"]
    d_out, s_out = dist["outcomes"], squall["outcomes"]
    assert isinstance(d_out, dict) and isinstance(s_out, dict)
    squall_only = sorted(
        k for k, v in s_out.items() if v in NOT_PASSED and d_out.get(k) not in NOT_PASSED
    )
    assert not squall_only, squall_only
