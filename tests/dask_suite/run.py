"""Run dask's own test suite (from the installed dask wheel) with its computes routed
through a squall or a distributed cluster, and compare the outcomes (docs/dask-suite.md).

    python tests/dask_suite/run.py run --route squall --full --report squall.json
    python tests/dask_suite/run.py run --route distributed --full --report distributed.json
    python tests/dask_suite/run.py run --route none --full --report baseline.json
    python tests/dask_suite/run.py compare baseline.json distributed.json squall.json

``--only bag/tests/test_bag.py ...`` runs some files or tests, ``--slice`` the fixed
part CI runs. Tests marked ``network`` (they dial public addresses) are never run.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import dask

HERE = Path(__file__).resolve().parent
DASK = Path(dask.__file__).resolve().parent

#: The suite the yardstick covers.
FULL = ("tests", "array/tests", "dataframe/tests", "bag/tests")

#: What CI runs (about 700 tests, two minutes on two cores): the tests that found each
#: cause squall differed by (released keys: delayed, base, bag; redefined keys and
#: reused names: linalg; numpy keys: vindex; the default client: base) and a spread
#: of collections.
SLICE = (
    "tests/test_delayed.py",
    "tests/test_base.py",
    "array/tests/test_linalg.py::test_tsqr",
    "array/tests/test_linalg.py::test_tsqr_uncertain",
    "array/tests/test_linalg.py::test_sfqr",
    "array/tests/test_linalg.py::test_qr",
    "array/tests/test_linalg.py::test_dask_svd_self_consistent",
    "array/tests/test_linalg.py::test_svd_compressed_compute",
    "array/tests/test_array_core.py::test_vindex_basic",
    "array/tests/test_array_core.py::test_vindex_nd",
    "array/tests/test_array_core.py::test_vindex_negative",
    "array/tests/test_array_core.py::test_vindex_merge",
    "array/tests/test_array_core.py::test_vindex_identity",
    "array/tests/test_percentiles.py",
    "bag/tests/test_bag.py",
    "dataframe/tests/test_categorical.py",
)

PASSED = ("passed", "xpassed")


def pytest_command(route: str, targets: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "squall_dask_route", "--route", route]
    cmd += ["-c", str(HERE / "pytest.ini"), "--rootdir", str(DASK.parent)]
    cmd += ["--confcutdir", str(DASK.parent), "-m", "not network"]
    return cmd + [str(DASK / t) for t in targets]


def run(route: str, targets: list[str], report: str | None, extra: list[str]) -> int:
    """Run pytest on ``targets``; if the pytest process dies (a test crashed it), note
    that test as ``crashed`` and go on with the tests not run yet. The report merges
    every attempt."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as tmp:
        journal, skip = Path(tmp, "journal.jsonl"), Path(tmp, "skip.txt")
        merged: dict[str, Any] = {"route": route, "graphs": 0, "bypasses": [], "crashed": []}
        merged |= {"graphs_per_test": {}, "outcomes": {}, "seconds": {}, "errors": {}}
        for attempt in itertools.count():
            part = Path(tmp, f"report-{attempt}.json")
            cmd = pytest_command(route, targets) + extra
            cmd += ["--route-journal", str(journal), "--route-report", str(part)]
            if attempt:
                cmd += ["--route-skip", str(skip)]
            rc = subprocess.call(cmd, env=env, cwd=HERE)
            if part.exists():
                journal.unlink(missing_ok=True)
                done = json.loads(part.read_text())
                merged["graphs"] += done["graphs"]
                merged["bypasses"] += done["bypasses"]
                for name in ("graphs_per_test", "outcomes", "seconds", "errors"):
                    merged[name] |= done[name]
                break
            started, ended = _journal(journal, merged)
            journal.unlink()
            crashed = [k for k in started if k not in ended]
            if not crashed:
                break  # died outside a test: nothing to resume from
            print(f"run.py: pytest died (exit {rc}) in {crashed[-1]}; going on without it")
            merged["crashed"].append(crashed[-1])
            merged["outcomes"][crashed[-1]] = "failed"
            skip.write_text("\n".join([*ended, *merged["crashed"]]))
        if report:
            Path(report).write_text(json.dumps(merged, indent=1, sort_keys=True))
    return rc if not merged["crashed"] else 1


def _journal(path: Path, merged: dict[str, Any]) -> tuple[list[str], set[str]]:
    """The tests a crashed attempt started and ended (their outcomes go into
    ``merged``)."""
    started: list[str] = []
    ended: set[str] = set()
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "start" in entry:
            started.append(entry["start"])
        elif entry.get("outcome"):
            ended.add(entry["end"])
            merged["outcomes"][entry["end"]] = entry["outcome"]
            merged["seconds"][entry["end"]] = entry["seconds"]
            merged["graphs"] += entry["graphs"]
            if entry.get("error"):
                merged["errors"][entry["end"]] = entry["error"]
    return started, ended


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def compare(baseline: str, distributed: str, squall: str) -> str:
    """The per-file table (baseline / distributed / squall passes) and every test that
    passes on dask's schedulers and on distributed but not on squall."""
    runs = [json.loads(Path(p).read_text())["outcomes"] for p in (baseline, distributed, squall)]
    base, dist, sq = runs
    rows: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0, 0])
    squall_only: list[str] = []
    for nodeid, outcome in base.items():
        if outcome not in PASSED:
            continue
        row = rows[_file_of(nodeid)]
        row[0] += 1
        d_ok = dist.get(nodeid) in PASSED
        s_ok = sq.get(nodeid) in PASSED
        row[1] += d_ok
        row[2] += s_ok
        row[3] += d_ok and not s_ok
        row[4] += s_ok and not d_ok
        if d_ok and not s_ok:
            squall_only.append(f"{nodeid}  ({sq.get(nodeid, 'not run')})")
    head = ("file", "baseline", "distributed", "squall", "squall-only fail", "squall-only pass")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total = [0, 0, 0, 0, 0]
    for f in sorted(rows):
        lines.append(f"| {f} | " + " | ".join(map(str, rows[f])) + " |")
        total = [a + b for a, b in zip(total, rows[f], strict=True)]
    lines.append("| **total** | " + " | ".join(map(str, total)) + " |")
    if squall_only:
        lines += ["", "squall-only failures:"] + [f"  {x}" for x in sorted(squall_only)]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the suite (or --slice) on one route")
    r.add_argument("--route", choices=("squall", "distributed", "none"), default="squall")
    which = r.add_mutually_exclusive_group()
    which.add_argument("--full", action="store_true", help="the whole suite (default)")
    which.add_argument("--slice", action="store_true", help="the part CI runs")
    which.add_argument(
        "--only", nargs="+", metavar="TARGET", help="these files or node ids, from dask/ on"
    )
    r.add_argument("--report", help="write outcomes as JSON")
    r.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    c = sub.add_parser("compare", help="per-file table of three reports")
    c.add_argument("baseline")
    c.add_argument("distributed")
    c.add_argument("squall")
    args = p.parse_args()
    if args.cmd == "compare":
        print(compare(args.baseline, args.distributed, args.squall))
        return 0
    targets = args.only or list(SLICE if args.slice else FULL)
    return run(args.route, targets, args.report, args.pytest_args)


if __name__ == "__main__":
    sys.exit(main())
