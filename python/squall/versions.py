"""The versions of Python and the packages a cluster depends on, for
``Client.get_versions`` (docs/runtime.md#versions), in distributed's shape:
``{"host": {...}, "packages": {name: version or None}}``."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import struct
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from squall._core import BUILD, __version__

#: Packages that should be the same everywhere: task specs, results and messages are
#: pickled or packed by them on one machine and read on another (listed first when
#: versions differ).
REQUIRED = ("python", "squall", "dask", "cloudpickle", "msgpack", "toolz")
#: Reported too: they matter to some results only.
OPTIONAL = ("numpy", "pandas", "pyarrow", "tornado", "lz4")


class VersionMismatchWarning(Warning):
    """Package versions differ between the client, the scheduler and the workers."""


def get_versions(packages: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """This process's host and the versions of the required and optional packages, and
    of ``packages``."""
    uname = platform.uname()
    python = ".".join(map(str, sys.version_info))
    host = {
        "python": python,
        "python-bits": struct.calcsize("P") * 8,
        "OS": uname.system,
        "OS-release": uname.release,
        "machine": uname.machine,
        "processor": uname.processor,
        "byteorder": sys.byteorder,
        "LC_ALL": os.environ.get("LC_ALL", "None"),
        "LANG": os.environ.get("LANG", "None"),
        "squall-core": core_build(),
    }
    names = dict.fromkeys([*REQUIRED[1:], *OPTIONAL, *(packages or [])])
    versions: dict[str, str | None] = {"python": python}
    versions |= {name: _version(name) for name in names}
    # The squall imported here, not whichever distribution's metadata is installed (a
    # checkout run from source may have none, or an older one).
    versions["squall"] = __version__
    return {"host": host, "packages": versions}


def core_build() -> str:
    """How squall's compiled core was built, in one line: its version, the Python ABI it
    targets, its profile and compiler (docs/install.md#versions)."""
    b = BUILD
    bench = ", bench" if b["bench"] else ""
    return f"{b['version']} ({b['abi']}, {b['profile']}{bench}; {b['rustc']}, {b['target']})"


@functools.cache
def _version(name: str) -> str | None:
    """The installed distribution's version (metadata: nothing is imported), or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def mismatches(
    client: Mapping[str, Any], scheduler: Mapping[str, Any], workers: Mapping[str, Any]
) -> list[tuple[str, Any, Any, Any]]:
    """``(package, client's, scheduler's, workers')`` for each package whose versions
    differ; the workers' is one version when they agree, else ``{worker: version}``."""
    sides = [client["packages"], scheduler["packages"]]
    per_worker = {w: v["packages"] for w, v in workers.items()}
    names = sorted({name for s in [*sides, *per_worker.values()] for name in s})
    out = []
    for name in names:
        at_workers = {w: p.get(name, "MISSING") for w, p in per_worker.items()}
        seen = {s.get(name, "MISSING") for s in sides} | set(at_workers.values())
        if len(seen) > 1:
            shown: Any = at_workers
            if len(set(at_workers.values())) == 1:
                shown = next(iter(at_workers.values()))
            out.append((name, sides[0].get(name, "MISSING"), sides[1].get(name, "MISSING"), shown))
    return out


def mismatch_table(rows: list[tuple[str, Any, Any, Any]]) -> str:
    """The rows of :func:`mismatches` as a text table."""
    header = ("package", "client", "scheduler", "workers")
    cells = [header, *((str(c) for c in row) for row in rows)]
    table = [list(r) for r in cells]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table
    )
