"""``Client.get_versions`` on a real cluster: distributed's shape, and ``check=True``
naming the packages whose versions differ (the client pretends other versions)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from squall import Client, LocalCluster, versions


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
    real = client._versions

    def fake(packages: list[str]) -> dict[str, Any]:
        mine = copy.deepcopy(real(packages))
        mine["packages"].update(changed)
        return mine

    monkeypatch.setattr(client, "_versions", fake)


def test_check_raises_naming_a_required_package_that_differs(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(cluster) as client:
        real = client.get_versions()["scheduler"]["packages"]["cloudpickle"]
        pretend(client, monkeypatch, cloudpickle="0.0.1")
        client.get_versions()  # without check: no complaint
        with pytest.raises(ValueError, match=r"required packages \(cloudpickle\)") as e:
            client.get_versions(check=True)
        [row] = [r.split() for r in str(e.value).splitlines() if r.startswith("cloudpickle")]
        assert row == ["cloudpickle", "0.0.1", real, real]


def test_check_warns_when_only_an_optional_package_differs(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(cluster) as client:
        pretend(client, monkeypatch, numpy="0.1")
        with pytest.warns(versions.VersionMismatchWarning, match="numpy"):
            client.get_versions(check=True)


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
