"""The ``squall`` command."""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="squall", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("scheduler", help="run a scheduler", add_help=False)
    sub.add_parser("worker", help="run a worker", add_help=False)

    sim = sub.add_parser("sim", help="simulate a cluster running a workload on squall's core")
    sim.add_argument("--workload", default="tree", choices=["map", "tree", "wide", "array"])
    sim.add_argument("--tasks", type=int, default=10_000, help="approximate number of tasks")
    sim.add_argument("--workers", type=int, default=4)
    sim.add_argument("--threads", type=int, default=2, help="threads per worker")
    sim.add_argument("--no-queuing", action="store_true", help="worker-saturation = inf")
    sim.add_argument("--no-stealing", action="store_true")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--json", action="store_true", help="print the report as JSON")

    bench = sub.add_parser("bench", help="benchmarks")
    bsub = bench.add_subparsers(dest="suite", required=True)
    core = bsub.add_parser("core", help="microbenchmarks of the core and its bindings")
    core.add_argument("--tasks", type=int, default=1_000_000)
    core.add_argument("--repeat", type=int, default=3, help="runs per row (median reported)")
    core.add_argument("--json", action="store_true", help="one JSON object per line")
    core.add_argument("--no-dask", action="store_true", help="skip the dask.order comparison")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "scheduler":
        from squall import scheduler

        return scheduler.main(argv[1:])
    if argv and argv[0] == "worker":
        from squall import worker

        return worker.main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "sim":
        from squall import sim

        return sim.main(args)
    if args.command == "bench" and args.suite == "core":
        from squall import bench

        bench.main(args.tasks, args.repeat, args.json, not args.no_dask)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
