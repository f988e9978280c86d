"""Plugins that ship code to the cluster (docs/runtime.md#uploading-code): ``UploadFile``
(a ``.py``, ``.zip`` or ``.egg`` into each worker, imported) and ``UploadDirectory``
(a directory into each nanny's, and optionally the scheduler's, scratch directory)."""

from __future__ import annotations

import io
import os
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from squall.diagnostics.plugin import NannyPlugin, SchedulerPlugin, WorkerPlugin

__all__ = ["UploadDirectory", "UploadFile"]


class UploadFile(WorkerPlugin):
    """Writes a local ``.py``, ``.zip`` or ``.egg`` file into each worker's
    ``local_directory`` (which is on its ``sys.path``) and, with ``load``, imports it
    there: again, with changed content, the module is reloaded and new tasks run the
    new code."""

    name = "upload_file"

    def __init__(self, filepath: str, load: bool = True) -> None:
        self.filename = os.path.basename(filepath)
        self.load = load
        self.data = Path(filepath).read_bytes()

    async def setup(self, worker: Any) -> None:
        response = await worker.upload_file(filename=self.filename, data=self.data, load=self.load)
        assert len(self.data) == response["nbytes"]


#: Where ``UploadDirectory`` puts the directory (distributed's modes).
UPLOAD_DIRECTORY_MODES = ("all", "scheduler", "workers")


def _is_pyc(filename: str) -> bool:
    return os.path.splitext(filename)[1] == ".pyc"


class UploadDirectory(SchedulerPlugin):
    """Copies a local directory into each nanny's scratch directory (``mode``
    "workers", the default), the scheduler's ("scheduler"), or both ("all"); files
    under a directory named in ``skip_words`` and those a ``skip`` predicate accepts
    are left out. ``update_path`` puts the copy on ``sys.path`` (for a worker: on its
    ``PYTHONPATH``, so that workers started from then on import from it);
    ``restart_workers`` restarts the workers once it is there. A scheduler plugin, as
    distributed's: the scheduler registers a nanny plugin that does the copying."""

    def __init__(
        self,
        path: str,
        restart_workers: bool = False,
        update_path: bool = False,
        skip_words: Iterable[str] = (".git", ".github", ".pytest_cache", "tests", "docs"),
        skip: Iterable[Callable[[str], bool]] = (_is_pyc,),
        mode: str = "workers",
    ) -> None:
        if mode not in UPLOAD_DIRECTORY_MODES:
            raise ValueError(f"{mode=} not supported, expected one of {UPLOAD_DIRECTORY_MODES}")
        path = os.path.expanduser(path)
        self.path = os.path.basename(os.path.normpath(path))
        self.restart_workers = restart_workers
        self.update_path = update_path
        self.mode = mode
        self.name = f"upload-directory-{self.path}"
        self.data = _zip_directory(path, set(skip_words), list(skip))

    async def start(self, scheduler: Any) -> None:
        if self.mode in ("all", "scheduler"):
            _extract(scheduler.local_directory, self.path, self.data, self.update_path)
        if self.mode in ("all", "workers"):
            plugin = _UploadDirectoryNannyPlugin(
                self.path, self.data, self.restart_workers, self.update_path, self.name
            )
            responses = await scheduler.register_nanny_plugin(
                plugin=cloudpickle.dumps(plugin), name=self.name, idempotent=False
            )
            raise_first_error(responses)


def raise_first_error(responses: dict[str, dict[str, Any]]) -> None:
    """Raise the first error of a registration's per-worker (or nanny) responses."""
    for response in responses.values():
        if response["status"] == "error":
            raise response["exception"].with_traceback(response["traceback"])


class _UploadDirectoryNannyPlugin(NannyPlugin):
    def __init__(self, path: str, data: bytes, restart: bool, update_path: bool, name: str):
        self.path = path
        self.data = data
        self.name = name
        # Per instance here (the base class declares it per class): the user chooses.
        self.restart = restart  # type: ignore[misc]
        self.update_path = update_path

    def setup(self, nanny: Any) -> None:
        target = _extract(nanny.local_directory, self.path, self.data, self.update_path)
        if self.update_path:
            _prepend_path(nanny.env, target)


def _zip_directory(path: str, skip_words: set[str], skip: list[Callable[[str], bool]]) -> bytes:
    """``path`` zipped, its top directory named as it is."""
    out = io.BytesIO()
    parent = os.path.dirname(os.path.normpath(path))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for root, _, files in os.walk(path):
            for file in files:
                filename = os.path.join(root, file)
                if any(predicate(filename) for predicate in skip):
                    continue
                if skip_words & set(Path(filename).parts):
                    continue
                z.write(filename, os.path.relpath(filename, parent))
    return out.getvalue()


def _extract(base: str, path: str, data: bytes, update_path: bool) -> str:
    """Unzip ``data`` under ``base``; returns where ``path`` landed (on sys.path with
    ``update_path``)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        z.extractall(base)
    target = os.path.join(base, path)
    if update_path and target not in sys.path:
        sys.path.insert(0, target)
    return target


def _prepend_path(env: dict[str, str], directory: str) -> None:
    """``directory`` first on the ``PYTHONPATH`` of the workers a nanny starts."""
    current = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    parts = [p for p in current.split(os.pathsep) if p and p != directory]
    env["PYTHONPATH"] = os.pathsep.join([directory, *parts])
