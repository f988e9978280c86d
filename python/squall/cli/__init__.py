"""The ``squall`` command."""

from __future__ import annotations

import argparse
import sys

from dask.utils import parse_bytes

from squall import sim
from squall.deploy.lifeline import VERSION
from squall.scheduler import launcher as scheduler
from squall.tools import bench, bench_e2e, bench_hosts, bench_scale, demo
from squall.worker import launcher as worker


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="squall", description=__doc__)
    p.add_argument("--version", action="version", version=VERSION)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("scheduler", help="run a scheduler", add_help=False)
    sub.add_parser("worker", help="run a worker", add_help=False)

    demo = sub.add_parser("demo", help="run futures and dask collections on a local cluster")
    demo.add_argument("--tasks", type=int, default=100_000, help="size of the map")

    sim = sub.add_parser("sim", help="simulate a cluster running a workload on squall's core")
    sim.add_argument("--workload", default="tree", choices=["map", "tree", "wide", "array"])
    sim.add_argument("--tasks", type=int, default=10_000, help="approximate number of tasks")
    sim.add_argument("--workers", type=int, default=4)
    sim.add_argument("--threads", type=int, default=2, help="threads per worker")
    sim.add_argument("--no-queuing", action="store_true", help="worker-saturation = inf")
    sim.add_argument("--no-stealing", action="store_true")
    sim.add_argument("--json", action="store_true", help="print the report as JSON")

    bench = sub.add_parser("bench", help="benchmarks")
    bsub = bench.add_subparsers(dest="suite", required=True)
    core = bsub.add_parser("core", help="microbenchmarks of the core and its bindings")
    core.add_argument("--tasks", type=int, default=1_000_000)
    core.add_argument("--repeat", type=int, default=3, help="runs per row (median reported)")
    core.add_argument("--json", action="store_true", help="one JSON object per line")
    core.add_argument("--no-dask", action="store_true", help="skip the dask.order comparison")
    e2e = bsub.add_parser("e2e", help="squall against distributed end to end, same machine")
    e2e.add_argument("--repeat", type=int, default=3, help="runs per row (median reported)")
    e2e.add_argument("--workers", type=int, default=1, help="worker processes")
    e2e.add_argument("--threads", type=int, default=1, help="threads per worker")
    e2e.add_argument("--systems", default="squall,dask", help="comma-separated")
    e2e.add_argument(
        "--workloads",
        default=",".join(bench_e2e.DEFAULT_WORKLOADS),
        help=f"comma-separated, of: {', '.join(bench_e2e.WORKLOADS)}",
    )
    e2e.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    e2e.add_argument("--full", action="store_true", help="the 1,000,000-task squall map")
    e2e.add_argument("--nanny", action="store_true", help="workers under nannies (both systems)")
    e2e.add_argument("--tls", action="store_true", help="squall over mutual TLS (squall only)")
    e2e.add_argument(
        "--dashboard",
        action="store_true",
        help="runs alternating without and with the scheduler's status page open in "
        "headless Chromium (needs chromium, playwright, and bokeh for distributed's)",
    )
    e2e.add_argument(
        "--scale",
        type=int,
        metavar="N",
        help="instead: one map of N no-ops held, waited for and gathered (squall only), "
        "with its phases, CPU per task and peak RSS per process",
    )
    e2e.add_argument("--json", action="store_true", help="one JSON object per line")
    hosts = bsub.add_parser(
        "hosts",
        help="squall against distributed across hosts made of network namespaces (root)",
    )
    hosts.add_argument("--systems", default="squall,dask", help="comma-separated")
    hosts.add_argument("--map-tasks", type=int, default=1_000_000, help="squall's map size")
    hosts.add_argument("--dask-map-tasks", type=int, default=50_000, help="distributed's")
    hosts.add_argument("--transfer", default="1GiB", help="bytes moved between worker hosts")
    hosts.add_argument("--json", action="store_true", help="one JSON object per line")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "scheduler":
        return scheduler.main(argv[1:])
    if argv and argv[0] == "worker":
        return worker.main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return demo.main(args.tasks)
    if args.command == "sim":
        return sim.main(args)
    if args.command == "bench" and args.suite == "core":
        bench.main(args.tasks, args.repeat, args.json, not args.no_dask)
        return 0
    if args.command == "bench" and args.suite == "e2e" and args.scale:
        bench_scale.main(args.scale, args.json)
        return 0
    if args.command == "bench" and args.suite == "e2e":
        bench_e2e.main(
            systems=tuple(args.systems.split(",")),
            workloads=tuple(args.workloads.split(",")),
            repeat=args.repeat,
            workers=args.workers,
            threads=args.threads,
            quick=args.quick,
            full=args.full,
            nanny=args.nanny,
            tls=args.tls,
            dashboard=args.dashboard,
            as_json=args.json,
        )
        return 0
    if args.command == "bench" and args.suite == "hosts":
        bench_hosts.main(
            systems=tuple(args.systems.split(",")),
            map_sizes={"squall": args.map_tasks, "dask": args.dask_map_tasks},
            transfer_bytes=parse_bytes(args.transfer),
            as_json=args.json,
        )
        return 0
    return 2
