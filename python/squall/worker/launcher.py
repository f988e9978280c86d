"""The ``squall worker`` program around a ``Worker``.

By default it is a nanny (:mod:`squall.worker.nanny`) running the worker in a process of
its own; with ``--no-nanny`` it is the worker, and a restart from the scheduler
re-executes it in place. ``--nworkers`` starts several such processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from typing import Any

from squall import config
from squall.deploy.lifeline import parse_process_args
from squall.protocol import comm
from squall.worker.memory import default_memory_limit, parse_memory_limit
from squall.worker.worker import Worker

logger = logging.getLogger("squall.worker")


async def run_worker(scheduler_address: str, **kwargs: Any) -> bool:
    """Run a worker until it closes (lost scheduler, SIGINT, SIGTERM or a restart);
    returns whether the scheduler asked it to restart."""
    worker = Worker(scheduler_address, **kwargs)
    await worker.start()
    loop = asyncio.get_running_loop()
    closing: set[asyncio.Task[None]] = set()

    def stop(sig: signal.Signals) -> None:
        logger.info("worker %s: received %s, closing", worker.address, sig.name)
        closing.add(loop.create_task(worker.close()))

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop, sig)
    try:
        await worker.finished()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        await worker.close()
    return worker.restart_requested


def _parse_resources(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in text.replace(",", " ").split():
        name, sep, amount = item.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"invalid resource {item!r}: expected NAME=AMOUNT")
        try:
            out[name] = float(amount)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid amount in {item!r}") from None
    return out


def main(argv: list[str] | None = None) -> int:
    """``squall worker``. On a restart from the scheduler the program re-executes
    itself with the same arguments."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="squall worker", description="a squall worker")
    p.add_argument("scheduler", help="scheduler address, tcp://HOST:PORT")
    p.add_argument("--nthreads", type=int, help="default: squall.worker.nthreads")
    p.add_argument("--nworkers", type=int, default=1, help="worker processes to start")
    p.add_argument("--name", default=None)
    p.add_argument(
        "--listen", help="address to serve peers on (default: squall.worker.host and .port)"
    )
    p.add_argument("--resources", type=_parse_resources, default={}, help='e.g. "GPU=1 MEM=4e9"')
    p.add_argument(
        "--memory-limit",
        help='bytes, "4GiB", a fraction of system memory, "auto" or 0 (none); '
        "default: squall.worker.memory.limit",
    )
    p.add_argument(
        "--local-directory",
        help="where to spill (default: squall.worker.local-directory or Dask's)",
    )
    p.add_argument(
        "--nanny",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the worker under a supervisor that restarts it when it dies",
    )
    # Given by the nanny to the worker it starts: the nanny's address, for the scheduler.
    p.add_argument("--nanny-address", help=argparse.SUPPRESS)
    args = parse_process_args(p, argv)
    try:
        level = config.log_level(args.log_level)
    except config.ConfigError as e:
        print(f"squall worker: {e}", file=sys.stderr)
        return 1
    if args.nworkers < 1:
        p.error("--nworkers must be at least 1")
    if args.nworkers > 1:
        if args.listen is not None and comm.parse_address(args.listen)[1] != 0:
            p.error("--listen with a fixed port needs --nworkers 1")
        return _run_workers(args)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        memory_limit = worker_memory_limit(args)
    except (config.ConfigError, ValueError) as e:
        print(f"squall worker: {e}", file=sys.stderr)
        return 1
    if args.nanny:
        from squall.worker.nanny import run_nanny

        return run_nanny(args.scheduler, worker_command(args, args.name), memory_limit)
    try:
        restart = asyncio.run(
            run_worker(
                args.scheduler,
                nthreads=args.nthreads,
                name=args.name,
                address=args.listen,
                resources=args.resources,
                memory_limit=memory_limit,
                nanny=args.nanny_address,
                local_directory=args.local_directory,
            )
        )
    except (comm.CommError, ValueError) as e:
        logger.error("worker failed: %s", e)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    if restart:
        # A fresh interpreter in this process: threads of abandoned tasks and anything
        # they leaked are gone, the pid (and whoever supervises it) stays.
        os.execv(sys.executable, [sys.executable, "-m", "squall.worker", *argv])
    # Leave without finalising the interpreter: a task still running in a thread would
    # be killed inside the compiled task loop when it next takes the GIL, which aborts
    # the process instead of exiting cleanly.
    logging.shutdown()
    os._exit(0)


def _run_workers(args: argparse.Namespace) -> int:
    """``--nworkers M``: M single-worker processes; SIGINT/SIGTERM are passed on to
    them, and this process exits once all of them have."""
    procs: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for i in range(args.nworkers):
            name = None if args.name is None else f"{args.name}-{i}"
            cmd = worker_command(args, name)
            cmd.append("--nanny" if args.nanny else "--no-nanny")
            procs.append(subprocess.Popen(cmd))
        codes = [proc.wait() for proc in procs]
    except BaseException:
        forward(signal.SIGTERM, None)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if all(code == 0 for code in codes) else 1


def worker_command(args: argparse.Namespace, name: str | None) -> list[str]:
    """The command running one ``squall worker`` process of these arguments, named
    ``name``; options left unset stay unset, so it reads the same config defaults."""
    cmd = [sys.executable, "-m", "squall.worker", args.scheduler]
    for flag, value in (
        ("--memory-limit", args.memory_limit),
        ("--local-directory", args.local_directory),
        ("--nthreads", args.nthreads),
        ("--listen", args.listen),
        ("--log-level", args.log_level),
        ("--name", name),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    if args.resources:
        cmd += ["--resources", " ".join(f"{k}={v}" for k, v in args.resources.items())]
    return cmd


def worker_memory_limit(args: argparse.Namespace) -> int:
    """The worker's memory limit in bytes (0: none), from ``--memory-limit`` or config."""
    limit = args.memory_limit if args.memory_limit is not None else default_memory_limit()
    nthreads = args.nthreads or config.integer("worker.nthreads", minimum=1)
    return parse_memory_limit(limit, nthreads)
