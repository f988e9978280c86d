"""``squall bench hosts``: squall and ``distributed`` across hosts, in one run, on the
same hosts — network namespaces on one private bridge (:mod:`squall.tools.netns`): the
scheduler on one, a worker process on each of two more, the client on a fourth.

Rows: ``transfer``, a 1 GiB array (64 MiB chunks) made on one worker host and moved
to the other by tasks that need it (GiB/s from the first task sent to the last result
home); ``map``, a no-op ``client.map`` of N tasks sent from the client host (tasks/s;
sizes differ per system as in ``squall bench e2e``, throughput is compared). Needs
root and iproute2 (the namespaces), and distributed for its rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from squall.tools import netns
from squall.tools.bench_e2e import run_map

SYSTEMS = ("squall", "dask")
#: Each system's scheduler and worker programs (``python -m``), run as a user types them.
PROGRAMS = {
    "squall": (("squall.cli", "scheduler"), ("squall.cli", "worker")),
    "dask": (("distributed.cli.dask_scheduler",), ("distributed.cli.dask_worker",)),
}
PORT = 8786
CHUNK = 64 * 2**20
#: How long a cluster may take to start, and a client run to finish (seconds).
START_TIMEOUT, RUN_TIMEOUT = 60.0, 1800.0


@dataclass
class Row:
    workload: str
    system: str
    size: int
    seconds: float
    rate: float
    unit: str
    ratio: float | None = None


# ----- the client host's side: one workload, its figures as JSON on stdout -----------


def _client(system: str, address: str) -> Any:
    """A client of ``system``'s scheduler at ``address``; both systems' clients wait
    for a scheduler still starting."""
    if system == "squall":
        from squall import Client

        return Client(address, timeout=START_TIMEOUT)
    from distributed import Client as DaskClient  # the bench extra

    return DaskClient(address, timeout=START_TIMEOUT)  # type: ignore[no-untyped-call]


def _ones(nbytes: int, i: int) -> np.ndarray[Any, Any]:
    return np.full(nbytes, i % 256, dtype=np.uint8)


def _nbytes(x: np.ndarray[Any, Any]) -> int:
    return int(x.nbytes)


def _wait(client: Any, futures: list[Any]) -> None:
    for f in futures:
        f.result(timeout=RUN_TIMEOUT)


def transfer(client: Any, total: int, source: str, target: str) -> float:
    """Seconds to move ``total`` bytes in ``CHUNK``-byte chunks made on ``source`` to
    tasks on ``target``; the chunks are made, and held, before the clock starts."""
    n = max(1, total // CHUNK)
    chunks = [client.submit(_ones, CHUNK, i, workers=[source], pure=False) for i in range(n)]
    _wait(client, chunks)
    t0 = time.perf_counter()
    sizes = [client.submit(_nbytes, c, workers=[target], pure=False) for c in chunks]
    got = client.gather(sizes)
    dt = time.perf_counter() - t0
    assert got == [CHUNK] * n, got
    return dt


def client_main(system: str, address: str, workload: str, size: int) -> None:
    with _client(system, address) as client:
        client.wait_for_workers(2, timeout=START_TIMEOUT)
        if workload == "transfer":
            source, target = sorted(client.scheduler_info()["workers"])
            transfer(client, CHUNK, source, target)  # warm up: the peers' connection
            seconds = transfer(client, size, source, target)
        else:
            run_map(client, max(size // 100, 10))  # warm up: imports, connections
            t0 = time.perf_counter()
            run_map(client, size)
            seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds}), flush=True)


# ----- the orchestrator: hosts, clusters, rows ---------------------------------------


def _python(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


@contextmanager
def cluster(net: netns.Network, system: str) -> Iterator[str]:
    """``system``'s scheduler on host 0 and a one-thread worker (no nanny) on each of
    hosts 1 and 2, started with the programs' default addresses; yields the scheduler
    address."""
    sched, *workers = net.hosts[:3]
    address = f"tcp://{sched.ip}:{PORT}"
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler, worker = PROGRAMS[system]
    sched.popen(_python(*scheduler, "--port", str(PORT), "--no-dashboard"), **quiet)
    flags = ("--nthreads", "1", "--no-nanny", "--no-dashboard", "--memory-limit", "0")
    for host in workers:
        host.popen(_python(*worker, address, *flags), **quiet)
    try:
        yield address
    finally:
        for host in net.hosts[:3]:
            host.kill_all()
            host.procs.clear()


def measure(net: netns.Network, system: str, workload: str, size: int) -> Row:
    with cluster(net, system) as address:
        cmd = _python("squall.tools.bench_hosts", system, address, workload, str(size))
        done = net.hosts[3].run(cmd, timeout=RUN_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{system} {workload} failed on the client host:\n{done.stderr}")
    seconds = float(json.loads(done.stdout.splitlines()[-1])["seconds"])
    if workload == "transfer":
        return Row(workload, system, size, seconds, size / seconds / 2**30, "GiB/s")
    return Row(workload, system, size, seconds, size / seconds, "tasks/s")


def main(
    systems: tuple[str, ...], map_sizes: dict[str, int], transfer_bytes: int, as_json: bool
) -> list[Row]:
    why = netns.unavailable()
    if why is not None:
        raise SystemExit(f"squall bench hosts: {why}")
    netns.remove_stale()
    rows: list[Row] = []
    with netns.Network(4) as net:
        for workload in ("transfer", "map"):
            got = {}
            for s in systems:
                size = transfer_bytes if workload == "transfer" else map_sizes[s]
                got[s] = measure(net, s, workload, size)
            if "squall" in got and "dask" in got:
                got["squall"].ratio = got["squall"].rate / got["dask"].rate
            for row in got.values():
                _show(row, as_json)
            rows.extend(got.values())
    return rows


def _show(r: Row, as_json: bool) -> None:
    if as_json:
        print(json.dumps(asdict(r)), flush=True)
        return
    ratio = f"{r.ratio:8.2f}x" if r.ratio is not None else ""
    print(
        f"{r.workload:10} {r.system:7} {r.size:>13,} {r.seconds:9.2f} s "
        f"{r.rate:12,.2f} {r.unit:8} {ratio}",
        flush=True,
    )


if __name__ == "__main__":  # the client host's side
    client_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
