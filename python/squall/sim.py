"""``squall.sim``: a deterministic simulated cluster driving squall's real core.

The simulator (Rust, ``rust/squall-sim``) plays the workers — thread pools, ready
queues, dependency transfers over a network with bandwidth and latency, steal
requests, deaths — and the scheduler is the same core the runtime uses.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Hashable, Sequence
from typing import Any

from squall._core import simulate as _simulate

WORKLOADS = ("map", "tree", "wide", "array")


def simulate(
    workload: str | None = None,
    *,
    n: int = 1000,
    keys: Sequence[Hashable] | None = None,
    deps: Sequence[Sequence[int]] | None = None,
    durations: Sequence[float] | None = None,
    nbytes: Sequence[int] | None = None,
    workers: int = 4,
    threads: int = 2,
    config: dict[str, Any] | None = None,
    deaths: Sequence[tuple[int, float]] = (),
    bandwidth: float = 100e6,
    latency: float = 0.001,
    timing: bool = False,
) -> dict[str, Any]:
    """Run a built-in ``workload`` (one of WORKLOADS, about ``n`` tasks) or the graph
    given as parallel lists (dependencies are indices of earlier tasks) on ``workers``
    simulated workers, and return the report: makespan, bytes transferred, steals,
    peak memory per worker, re-executions and a per-worker timeline. With ``timing``
    it also has ``seconds`` (they vary from run to run): ``run`` and ``run_cpu``, the
    simulation's wall and CPU time, and ``scheduler``, the wall time spent inside the
    scheduler core."""
    return _simulate(
        workload_name=workload,
        n=n,
        keys=list(keys) if keys is not None else None,
        deps=[list(d) for d in deps] if deps is not None else None,
        durations=list(durations) if durations is not None else None,
        nbytes=list(nbytes) if nbytes is not None else None,
        workers=workers,
        threads=threads,
        config=config,
        deaths=list(deaths),
        bandwidth=bandwidth,
        latency=latency,
        timing=timing,
    )


# Workers listed in the summary; thousands of lines would bury it.
_LISTED = 16


def _summary(r: dict[str, Any]) -> str:
    runs = max(len(r["timeline"]), 1)
    sec = r["seconds"]
    # The core's share of the run's wall time, applied to its CPU time: other
    # processes on the machine delay both alike.
    scheduler_cpu = sec["run_cpu"] * sec["scheduler"] / max(sec["run"], 1e-9)
    lines = [
        f"completed          {r['completed']}",
        f"makespan           {r['makespan']:.3f} s (simulated)",
        f"tasks run          {len(r['timeline'])} ({r['n_reexecuted']} re-executed)",
        f"bytes transferred  {r['bytes_transferred']:,} in {r['n_transfers']} transfers",
        f"steals             {r['n_steals']} moved / {r['n_steal_requests']} requested",
        f"scheduler          {scheduler_cpu / runs * 1e6:.2f} µs CPU per run "
        f"({scheduler_cpu:.2f} s of the simulation's {sec['run_cpu']:.2f} s CPU)",
        "worker             tasks   peak memory",
    ]
    for w in r["workers"][:_LISTED]:
        lines.append(f"  {w['name']:16} {w['tasks_executed']:>6}   {w['peak_memory']:,} B")
    if len(r["workers"]) > _LISTED:
        lines.append(f"  … and {len(r['workers']) - _LISTED} more (--json lists all)")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    config: dict[str, Any] = {}
    if args.no_queuing:
        config["worker-saturation"] = "inf"
    if args.no_stealing:
        config["work-stealing"] = False
    r = simulate(
        args.workload,
        n=args.tasks,
        workers=args.workers,
        threads=args.threads,
        config=config,
        timing=True,
    )
    if args.json:
        print(json.dumps({k: v for k, v in r.items() if k != "timeline"}))
    else:
        print(f"squall sim: {args.workload} workload, {args.workers} workers x {args.threads}")
        print(_summary(r))
    return 0 if r["completed"] else 1
