"""``squall bench e2e --scale N``: one ``map`` of N no-ops on one worker thread, its
futures held, waited for and then gathered, phase by phase, with each process's CPU
per task and peak resident memory (the kernel's high-water mark, ``VmHWM``).

It answers the questions a large map raises that a throughput ratio does not: how long
``map()`` itself blocks, how fast results come back, and how many bytes each task costs
in the client, the scheduler and the worker while all N are held. squall alone:
distributed cannot hold millions of tasks on this machine.
"""

from __future__ import annotations

import gc
import json
import os
import time
from dataclasses import asdict, dataclass

import psutil  # type: ignore[import-untyped]

from squall.client.client import Client
from squall.client.waiting import wait
from squall.deploy.local import LocalCluster
from squall.tools.bench_e2e import noop


@dataclass
class ScaleReport:
    tasks: int
    map_s: float  # the map() call alone
    wait_s: float  # from map() returning until every task finished
    gather_s: float
    release_s: float  # from dropping the results and futures until the scheduler forgot them
    cpu_us: dict[str, float]  # per task, map() to gathered, per process
    release_cpu_us: dict[str, float]  # per task, the release, per process
    peak_rss_mb: dict[str, float]  # high-water mark over the whole run, per process
    peak_rss_b_per_task: dict[str, float]  # peak minus the idle cluster's, per task
    # resident once every task finished, the futures held and no result fetched yet,
    # minus the idle cluster's, per task: what holding N futures costs
    held_rss_b_per_task: dict[str, float]

    @property
    def map_wait_per_s(self) -> float:
        return self.tasks / (self.map_s + self.wait_s)

    @property
    def end_to_end_per_s(self) -> float:
        return self.tasks / (self.map_s + self.wait_s + self.gather_s)


def _hwm(pid: int) -> int:
    """Peak resident bytes of process ``pid`` so far."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def _reset_hwm(pid: int) -> None:
    # Writing 5 to clear_refs resets the high-water mark to the current RSS, so the
    # peak measured is this run's, not the cluster start's.
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def run(n: int) -> ScaleReport:
    with LocalCluster(n_workers=1, threads_per_worker=1, nanny=False) as cluster:
        assert cluster.scheduler_process is not None
        procs = {
            "client": psutil.Process(os.getpid()),
            "scheduler": psutil.Process(cluster.scheduler_process.pid),
            "worker": psutil.Process(cluster.worker_processes[0].pid),
        }
        with Client(cluster) as client:
            wait(client.map(noop, range(1000)))  # warm up: imports, connections
            gc.collect()
            time.sleep(0.5)
            for p in procs.values():
                _reset_hwm(p.pid)
            base = {k: p.memory_info().rss for k, p in procs.items()}
            cpu0 = {k: _cpu(p) for k, p in procs.items()}
            t0 = time.perf_counter()
            futures = client.map(noop, range(n))
            t1 = time.perf_counter()
            wait(futures, timeout=max(600.0, n / 5_000))
            t2 = time.perf_counter()
            held = {k: p.memory_info().rss for k, p in procs.items()}
            results = client.gather(futures)
            t3 = time.perf_counter()
            assert len(results) == n and results[-1] == n - 1, len(results)
            cpu = {k: (_cpu(p) - cpu0[k]) / n * 1e6 for k, p in procs.items()}
            peak = {k: _hwm(p.pid) for k, p in procs.items()}
            cpu0 = {k: _cpu(p) for k, p in procs.items()}
            del results, futures
            while client.scheduler_info()["n_tasks"]:  # until the cluster forgot them all
                time.sleep(0.05)
            t4 = time.perf_counter()
            release_cpu = {k: (_cpu(p) - cpu0[k]) / n * 1e6 for k, p in procs.items()}
    return ScaleReport(
        tasks=n,
        map_s=t1 - t0,
        wait_s=t2 - t1,
        gather_s=t3 - t2,
        release_s=t4 - t3,
        cpu_us=cpu,
        release_cpu_us=release_cpu,
        peak_rss_mb={k: v / 2**20 for k, v in peak.items()},
        peak_rss_b_per_task={k: (v - base[k]) / n for k, v in peak.items()},
        held_rss_b_per_task={k: (v - base[k]) / n for k, v in held.items()},
    )


def main(n: int, as_json: bool = False) -> ScaleReport:
    r = run(n)
    if as_json:
        print(json.dumps({**asdict(r), "map_wait_per_s": r.map_wait_per_s}), flush=True)
        return r
    total = sum(r.peak_rss_mb.values())
    print(f"map of {n:,} no-ops, one worker thread, futures held, then gathered")
    print(f"  map() call        {r.map_s:8.2f} s   {r.map_s / n * 1e6:6.2f} us/task")
    print(f"  map + wait        {r.map_s + r.wait_s:8.2f} s   {r.map_wait_per_s:10,.0f} tasks/s")
    print(f"  gather            {r.gather_s:8.2f} s   {n / r.gather_s:10,.0f} results/s")
    print(
        f"  map+wait+gather   {r.map_s + r.wait_s + r.gather_s:8.2f} s   "
        f"{r.end_to_end_per_s:10,.0f} tasks/s"
    )
    print(f"  release           {r.release_s:8.2f} s   (futures dropped until all forgotten)")
    for k in r.cpu_us:
        print(
            f"  {k:10} CPU {r.cpu_us[k]:6.2f} us/task (+{r.release_cpu_us[k]:.2f} release)"
            f"   peak RSS {r.peak_rss_mb[k]:8,.0f} MiB"
            f"   {r.peak_rss_b_per_task[k]:7,.0f} B/task over idle"
            f"   (held {r.held_rss_b_per_task[k]:,.0f})"
        )
    print(f"  peak RSS, all three: {total:,.0f} MiB ({total * 2**20 / n:,.0f} B/task)")
    return r
