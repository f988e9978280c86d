"""``Client.get_versions`` on a real cluster: distributed's shape, and ``check=True``
warning, as distributed's, with the packages whose versions differ (the client
pretends other versions)."""

from __future__ import annotations

import copy
import importlib.metadata
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import squall
from squall import Client, LocalCluster, _core, versions


def test_versions_of_client_scheduler_and_workers(cluster: LocalCluster) -> None:
    with Client(cluster) as client:
        found = client.get_versions(check=True, packages=["zict", "no-such-package"])
        assert set(found) == {"scheduler", "workers", "client"}
        assert set(found["workers"]) == set(client.nthreads())
        for side in [found["scheduler"], found["client"], *found["workers"].values()]:
            assert set(side) == {"host", "packages"}
            assert {"python", "OS", "machine", "LANG"} <= set(side["host"])
            packages = side["packages"]
            assert {*versions.REQUIRED, *versions.OPTIONAL, "zict"} <= set(packages)
            assert packages["no-such-package"] is None
            assert packages["squall"] == found["client"]["packages"]["squall"]


def pretend(client: Client, monkeypatch: pytest.MonkeyPatch, **changed: str) -> None:
    """The client reports these package versions instead of its own."""
    real = client.diagnostics.client_versions

    def fake(packages: list[str]) -> dict[str, Any]:
        mine = copy.deepcopy(real(packages))
        mine["packages"].update(changed)
        return mine

    monkeypatch.setattr(client.diagnostics, "client_versions", fake)


def test_check_warns_with_the_packages_that_differ_required_first(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(cluster) as client:
        real = client.get_versions()["scheduler"]["packages"]["cloudpickle"]
        pretend(client, monkeypatch, cloudpickle="0.0.1", numpy="0.1")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            client.get_versions()  # without check: no complaint
        with pytest.warns(versions.VersionMismatchWarning) as caught:
            found = client.get_versions(check=True)
        assert found["client"]["packages"]["cloudpickle"] == "0.0.1"
        rows = [r.split() for r in str(caught[0].message).splitlines()]
        names = [r[0] for r in rows if r and r[0] in ("cloudpickle", "numpy")]
        assert names == ["cloudpickle", "numpy"], "required packages first"
        assert ["cloudpickle", "0.0.1", real, real] in rows


def test_mismatch_table() -> None:
    client = {"packages": {"dask": "1", "numpy": "2"}}
    scheduler = {"packages": {"dask": "1", "numpy": "2"}}
    workers = {
        "tcp://a": {"packages": {"dask": "1", "numpy": "3"}},
        "tcp://b": {"packages": {"dask": "2", "numpy": "3"}},
    }
    rows = versions.mismatches(client, scheduler, workers)
    assert rows == [
        ("dask", "1", "1", {"tcp://a": "1", "tcp://b": "2"}),
        ("numpy", "2", "2", "3"),
    ]
    assert versions.mismatch_table(rows).splitlines()[-1].split() == ["numpy", "2", "2", "3"]


def test_one_version_from_the_package_to_the_core() -> None:
    """``squall --version``, ``squall.__version__``, the compiled core's and, where this
    squall is an installed distribution (the wheel's test run), its metadata agree; and
    ``get_versions`` names the core's build."""
    out = subprocess.run(
        [sys.executable, "-m", "squall.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == f"squall, version {squall.__version__}"
    assert _core.BUILD["version"] == squall.__version__
    assert versions.get_versions()["packages"]["squall"] == squall.__version__
    try:
        dist = importlib.metadata.distribution("squall")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    here = Path(squall.__file__).resolve()
    if dist is not None and Path(str(dist.locate_file("squall/__init__.py"))).resolve() == here:
        assert dist.version == squall.__version__
    core = versions.get_versions()["host"]["squall-core"]
    assert core.startswith(f"{squall.__version__} (")
    assert _core.BUILD["abi"] in core and _core.BUILD["rustc"] in core
    assert _core.BUILD["abi"] in {"abi3-py310", "version-specific"}
