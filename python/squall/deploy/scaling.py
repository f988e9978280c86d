"""Growing and shrinking a LocalCluster (docs/runtime.md#cluster-lifecycle): more worker
processes at once, fewer by graceful retirement first (their results move to the
workers that stay), then stopping the processes."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Any

from squall.deploy.adaptive import Adaptive
from squall.deploy.requests import ask, run_sync
from squall.protocol import messages as m

if TYPE_CHECKING:
    from squall.deploy.local import LocalCluster

logger = logging.getLogger("squall.deploy")

#: How long retired workers' processes may take to exit before they are stopped.
EXIT_GRACE = 10.0


def worker_name(proc: subprocess.Popen[str]) -> str:
    """The ``--name`` a worker process was started with: its command line is the one
    record of it."""
    args = list(proc.args)  # type: ignore[arg-type]
    return str(args[args.index("--name") + 1])


class Scaling:
    """The scaling state of one LocalCluster: one change at a time, and its
    adaptive loop, if any. Workers are known by name: worker processes, or the
    workers of an embedded cluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        self.adaptive: Adaptive | None = None

    def alive(self) -> list[str]:
        embedded = self.cluster._embedded
        if embedded is not None:
            return [str(w.name) for w in embedded.workers]
        return [worker_name(p) for p in self.cluster._procs if p.poll() is None]

    def scale(self, n: int) -> None:
        """Have ``n`` workers: start the missing ones (not waiting for them to join),
        or retire the extra ones."""
        if n < 0:
            raise ValueError(f"cannot scale to {n} workers")
        with self.lock:
            alive = self.alive()
            if n > len(alive):
                self._start(n - len(alive))
            elif n < len(alive):
                self._shrink(alive, len(alive) - n)

    def _start(self, count: int) -> None:
        used = set(self.alive()) | {worker_name(p) for p in self.cluster._procs}
        i = 0
        for _ in range(count):
            while f"local-{i}" in used:
                i += 1
            used.add(f"local-{i}")
            self.cluster._add_worker(f"local-{i}")

    def _shrink(self, alive: list[str], count: int) -> None:
        """Stop ``count`` workers: those still starting first, then those the
        scheduler would close first (idle, least data), retired gracefully."""
        joined = {w["name"] for w in self.cluster.scheduler_info()["workers"]}
        starting = [name for name in alive if name not in joined][:count]
        self.stop(starting)
        if count > len(starting):
            self.retire(n=count - len(starting))

    def retire(self, *, n: int | None = None, workers: list[str] | None = None) -> list[str]:
        """Retire ``n`` workers of the scheduler's choice, or these (addresses),
        closing them; then stop what is left of them. Returns the addresses retired."""
        request = m.RetireWorkers(workers=workers, n=n, close_workers=True)
        reply = run_sync(
            ask(
                self.cluster.scheduler_address,
                request,
                m.RetireWorkersReply,
                self.cluster.security,
            )
        )
        if reply.kept:
            logger.warning("workers not retired: %s", reply.kept)
        self.stop([str(w["name"]) for w in reply.retired.values()])
        return list(reply.retired)

    def stop(self, names: list[str]) -> None:
        """Wait (bounded) for these workers to leave, stop those that do not, and
        forget them."""
        embedded = self.cluster._embedded
        if embedded is not None:
            embedded.remove_workers(set(names), EXIT_GRACE)
            return
        procs = [p for p in self.cluster._procs if worker_name(p) in names]
        deadline = time.monotonic() + EXIT_GRACE
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("worker %s did not exit; stopping it", worker_name(p))
        stop_processes(procs, EXIT_GRACE)
        gone = set(map(id, procs))
        self.cluster._procs[:] = [p for p in self.cluster._procs if id(p) not in gone]

    def adapt(self, **kwargs: Any) -> Adaptive:
        self.stop_adapting()
        self.adaptive = Adaptive(self, **kwargs)
        return self.adaptive

    def stop_adapting(self) -> None:
        if self.adaptive is not None:
            self.adaptive.stop()
            self.adaptive = None


def stop_processes(procs: list[subprocess.Popen[str]], grace: float) -> None:
    """SIGTERM, then SIGKILL whatever is still running ``grace`` seconds later."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
