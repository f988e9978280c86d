"""Where the CPU goes while a 1,000,000-task no-op ``map`` runs with the status page
closed and open (docs/measurements.md#the-dashboard): ``python bench/page_cpu.py
[RUNS]``.

One squall cluster (one worker process, one thread), the page in headless Chromium
(needs chromium and playwright); RUNS pairs (default 2) of a closed and an open run,
each after the machine is idle. Prints per run the throughput and the CPU seconds of
this process (the client, and Playwright's side), the worker, the scheduler and the
browser's processes."""

from __future__ import annotations

import sys
import time

import psutil  # type: ignore[import-untyped]

from squall.tools.bench_e2e import Shape, _settle, cluster, run_map
from squall.tools.browser import chromium, open_page

BROWSER_NAMES = ("chrom", "headless")


def cpu(processes: list[psutil.Process]) -> float:
    total = 0.0
    for p in processes:
        try:
            t = p.cpu_times()
        except psutil.Error:  # a browser helper process that ended
            continue
        total += t.user + t.system
    return total


def main(runs: int) -> None:
    me = psutil.Process()
    with (
        cluster("squall", Shape(1, 1, False, False), dashboard=True) as (client, sched),
        chromium() as browser,
    ):
        run_map(client, 10_000)  # warm up
        for page_open in [False, True] * runs:
            page = open_page(browser, client.dashboard_link, updates=2) if page_open else None
            _settle()
            children = me.children(recursive=True)
            groups = {
                "client": [me],
                "worker": [c for c in children if "squall.worker" in " ".join(c.cmdline())],
                "scheduler": [sched],
                "browser": [c for c in children if any(n in c.name() for n in BROWSER_NAMES)],
            }
            before, t0 = {k: cpu(v) for k, v in groups.items()}, time.perf_counter()
            n = run_map(client, 1_000_000)
            seconds = time.perf_counter() - t0
            used = {k: cpu(v) - before[k] for k, v in groups.items()}
            print(
                f"page {'open  ' if page_open else 'closed'} {n / seconds:>9,.0f} tasks/s "
                f"{seconds:5.2f} s  CPU s: " + "  ".join(f"{k} {v:.2f}" for k, v in used.items())
            )
            if page is not None:
                page.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
