"""Shipping code to the workers on a multi-process cluster
(docs/runtime.md#uploading-code, #installing-packages): ``upload_file`` of a module that
changes between two uploads, of a ``.zip``; ``PipInstall`` of a wheel built here, with
``--no-index`` (never the network); ``CondaInstall`` without conda."""

from __future__ import annotations

import importlib
import sys
import uuid
import zipfile
from pathlib import Path

import cloudpickle  # type: ignore[import-untyped]
import pytest

import squall
from squall import Client, LocalCluster
from squall.diagnostics.environment import _CondaInstaller

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_upload_file_runs_the_new_version_of_a_module(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("uploaded")
    source = tmp_path / f"{name}.py"
    source.write_text("def version():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    try:
        with Client(cluster) as c:
            statuses = c.upload_file(str(source))
            assert list(statuses.values()) == [{"status": "OK"}] * 2
            # Pickled by reference: each worker imports the uploaded module.
            assert c.submit(module.version, pure=False).result(timeout=20) == 1
            source.write_text("def version():\n    return 2\n")
            c.upload_file(str(source))
            importlib.reload(module)
            # The same pickled reference now finds the reloaded module's function.
            results = c.gather([c.submit(module.version, pure=False) for _ in range(4)])
            assert results == [2] * 4
            # A worker that joins later has the newest upload before it runs a task.
            before = set(c.scheduler_info()["workers"])
            cluster.scale(3)
            c.wait_for_workers(3, timeout=30)
            [new] = set(c.scheduler_info()["workers"]) - before
            on_new = c.submit(module.version, workers=[new], pure=False)
            assert on_new.result(timeout=20) == 2
            cluster.scale(2)
    finally:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("suffix", [".zip", ".egg"])
def test_upload_a_zip_or_an_egg(cluster: LocalCluster, tmp_path: Path, suffix: str) -> None:
    package = unique("zipped")
    archive = tmp_path / f"{package}{suffix}"

    def write(value: str) -> None:
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr(f"{package}/__init__.py", "from .inner import VALUE\n")
            z.writestr(f"{package}/inner.py", f"VALUE = {value!r}\n")

    def value() -> str:
        return str(importlib.import_module(package).VALUE)

    with Client(cluster) as c:
        write("first")
        c.upload_file(str(archive))
        assert set(c.run(value).values()) == {"first"}
        write("second")
        c.upload_file(str(archive))
        assert set(c.run(value).values()) == {"second"}
        assert c.submit(value, pure=False).result(timeout=20) == "second"


def build_wheel(directory: Path, name: str) -> Path:
    """A pure-Python wheel of package ``name`` (``VALUE = "installed"``), built by hand:
    pip installs it with no build step and no index."""
    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": 'VALUE = "installed"\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: squall-tests\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    wheel = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{dist}/RECORD", record)
    return wheel


def test_pip_install_a_local_wheel(cluster: LocalCluster, tmp_path: Path) -> None:
    name = unique("squall_pip_test")
    wheel = build_wheel(tmp_path, name)
    target = tmp_path / "site"
    options = ["--no-index", "--no-deps", "--disable-pip-version-check", "--upgrade"]
    plugin = squall.PipInstall([str(wheel)], pip_options=[*options, "--target", str(target)])

    def installed() -> str:
        if str(target) not in sys.path:
            sys.path.insert(0, str(target))
        return str(importlib.import_module(name).VALUE)

    with Client(cluster) as c:
        c.register_plugin(plugin)  # a scheduler plugin, registering the worker plugin
        assert plugin.name in c.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.worker_plugins
        )
        assert c.submit(installed, pure=False).result(timeout=30) == "installed"
        c.unregister_worker_plugin(plugin.name)

        failing = squall.PipInstall([str(tmp_path / "missing.whl")], pip_options=options)
        with pytest.raises(RuntimeError, match="pip install failed"):
            c.register_plugin(failing)


def test_conda_install_without_conda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="conda could not be found"):
        _CondaInstaller(["numpy"])()
