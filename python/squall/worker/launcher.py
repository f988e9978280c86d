"""The ``squall worker`` program around a ``Worker``.

By default it is a nanny (:mod:`squall.worker.nanny`) running the worker in a process of
its own; with ``--no-nanny`` it is the worker, and a restart from the scheduler
re-executes it in place. ``--nworkers`` starts several such processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import random
import signal
import subprocess
import sys
from typing import Any, NamedTuple

from squall import config, security
from squall.deploy.lifeline import log_levels, parse_duration, parse_process_args
from squall.deploy.shape import default_shape
from squall.http import options as http_options
from squall.preload import PreloadError
from squall.protocol import comm, liveness
from squall.worker.memory import default_memory_limit, parse_memory_limit
from squall.worker.nanny import PRELOAD_FAILED, run_nanny
from squall.worker.worker import Worker

logger = logging.getLogger("squall.worker")


async def run_worker(
    scheduler_address: str,
    *,
    lifetime: float | None = None,
    lifetime_restart: bool = False,
    **kwargs: Any,
) -> bool:
    """Run a worker until it closes (lost scheduler, SIGINT, SIGTERM or a restart);
    returns whether the scheduler asked it to restart. After ``lifetime`` seconds it
    retires itself (``lifetime_restart``: to be replaced by a fresh process)."""
    worker = Worker(scheduler_address, **kwargs)
    await worker.start()
    loop = asyncio.get_running_loop()
    if lifetime is not None:
        loop.call_later(lifetime, functools.partial(worker.retire, restart=lifetime_restart))
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


def lifetime_seconds(lifetime: float | None, stagger: float) -> float | None:
    """``--lifetime`` ± a uniform draw within ``--lifetime-stagger`` (as Dask's), so
    that workers started together do not all leave together."""
    if lifetime is None:
        return None
    return max(0.0, lifetime + random.uniform(-stagger, stagger))


class Lifetime(NamedTuple):
    """When a worker retires itself: after ``duration`` s (None: never) ± ``stagger``,
    then restarting (``restart``) or leaving."""

    duration: float | None
    stagger: float
    restart: bool


def configured_lifetime(
    duration: float | None, stagger: float | None, restart: bool | None
) -> Lifetime:
    """The ``--lifetime*`` flags given, else ``squall.worker.lifetime.*`` (or Dask's
    ``distributed.worker.lifetime.*``)."""
    if duration is None and config.get("worker.lifetime.duration") is not None:
        duration = config.seconds("worker.lifetime.duration")
    return Lifetime(
        duration,
        config.seconds("worker.lifetime.stagger") if stagger is None else stagger,
        config.flag("worker.lifetime.restart") if restart is None else restart,
    )


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


def _parse_nworkers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', not {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    """``squall worker``. On a restart from the scheduler the program re-executes
    itself with the same arguments."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="squall worker", description="a squall worker")
    p.add_argument("scheduler", help="scheduler address, tcp://HOST:PORT")
    p.add_argument("--nthreads", type=int, help="default: squall.worker.nthreads")
    p.add_argument(
        "--nworkers",
        type=_parse_nworkers,
        default=1,
        help="worker processes to start; negative: CPU count + 1 + N; 'auto': processes "
        "and threads sized to the CPUs as LocalCluster does",
    )
    p.add_argument("--name", default=None)
    p.add_argument(
        "--listen", help="address to serve peers on (default: squall.worker.host and .port)"
    )
    p.add_argument("--interface", help="network interface to serve peers on, e.g. eth0")
    p.add_argument(
        "--contact-address",
        help="the host (or tcp://host:port) others reach this worker at, if not the bound one",
    )
    p.add_argument(
        "--resources",
        type=_parse_resources,
        help='e.g. "GPU=1 MEM=4e9" (default: squall.worker.resources)',
    )
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
    p.add_argument(
        "--lifetime",
        type=parse_duration,
        help='retire gracefully after this long, e.g. "1 hour" '
        "(default: squall.worker.lifetime.duration, none: never)",
    )
    p.add_argument(
        "--lifetime-stagger",
        type=parse_duration,
        help="a random amount within ± this is added to --lifetime "
        "(default: squall.worker.lifetime.stagger)",
    )
    p.add_argument(
        "--lifetime-restart",
        action=argparse.BooleanOptionalAction,
        help="after --lifetime, start a fresh worker instead of leaving "
        "(default: squall.worker.lifetime.restart)",
    )
    p.add_argument(
        "--death-timeout",
        default=None,
        help="seconds (or a duration) to keep trying to reach a lost scheduler before "
        "exiting (default: squall.worker.death-timeout, none: forever)",
    )
    # Given by the nanny to the worker it starts: the nanny's address, for the scheduler.
    p.add_argument("--nanny-address", help=argparse.SUPPRESS)
    # ... and the file where the worker keeps the tasks it is running, for the nanny.
    p.add_argument("--executing-record", help=argparse.SUPPRESS)
    security.add_cli_options(p)
    http_options.add_cli_options(p, "worker.dashboard.address")
    args = parse_process_args(p, argv, nanny=True)
    try:
        security.apply_cli_options(args, "worker")
        levels = log_levels(args)
    except (config.ConfigError, OSError) as e:
        print(f"squall worker: {e}", file=sys.stderr)
        return 1
    if args.nworkers == "auto":
        args.nworkers, threads = default_shape(os.cpu_count() or 1)
        if args.nthreads is None:
            args.nthreads = threads
    elif args.nworkers < 0:
        args.nworkers += (os.cpu_count() or 1) + 1
    if args.nworkers < 1:
        p.error("--nworkers must come to at least 1")
    try:
        liveness.death_timeout(args.death_timeout)
    except ValueError as e:
        p.error(f"--death-timeout: {e}")
    try:
        lifetime = configured_lifetime(args.lifetime, args.lifetime_stagger, args.lifetime_restart)
    except config.ConfigError as e:
        p.error(str(e))
    if args.nworkers > 1:
        if args.listen is not None and comm.parse_address(args.listen)[1] != 0:
            p.error("--listen with a fixed port needs --nworkers 1")
        return _run_workers(args)
    config.setup_logging(*levels)
    try:
        memory_limit = worker_memory_limit(args)
    except (config.ConfigError, ValueError) as e:
        print(f"squall worker: {e}", file=sys.stderr)
        return 1
    if args.nanny:
        command = worker_command(args, args.name)
        try:
            return run_nanny(
                args.scheduler, command, args.death_timeout, memory_limit, args.preload_nanny
            )
        except PreloadError as e:
            print(f"squall worker: {e}", file=sys.stderr)
            return 1
    try:
        restart = asyncio.run(
            run_worker(
                args.scheduler,
                nthreads=args.nthreads,
                name=args.name,
                address=listen_address(args),
                contact_address=args.contact_address,
                resources=args.resources,
                memory_limit=memory_limit,
                nanny=args.nanny_address,
                executing_record=args.executing_record,
                lifetime=lifetime_seconds(lifetime.duration, lifetime.stagger),
                lifetime_restart=lifetime.restart,
                death_timeout=args.death_timeout,
                local_directory=args.local_directory,
                dashboard_address=http_options.address_from(args, "worker.dashboard.address"),
                preload=args.preload,
                preload_argv=args.preload_argv,
            )
        )
    except PreloadError as e:
        logger.error("worker failed: %s", e)
        return PRELOAD_FAILED  # its nanny, if any, gives up too: a new process would fail
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
            cmd = worker_command(args, name, "--nanny" if args.nanny else "--no-nanny")
            procs.append(subprocess.Popen(cmd))
        codes = [proc.wait() for proc in procs]
    except BaseException:
        forward(signal.SIGTERM, None)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if all(code == 0 for code in codes) else 1


def listen_address(args: argparse.Namespace) -> str | None:
    """``--listen``, or ``--interface``'s address on the configured port."""
    if args.interface is None:
        return args.listen  # type: ignore[no-any-return]
    port = config.port("worker.port")
    return comm.format_address(comm.interface_ip(args.interface), port)


def worker_command(args: argparse.Namespace, name: str | None, *flags: str) -> list[str]:
    """The command running one ``squall worker`` process of these arguments, named
    ``name``, with ``flags``; options left unset stay unset, so it reads the same config
    defaults. It ends with the preload argv (``--preload-argv`` takes the rest)."""
    cmd = [sys.executable, "-m", "squall.worker", args.scheduler]
    for flag, value in (
        ("--memory-limit", args.memory_limit),
        ("--local-directory", args.local_directory),
        ("--nthreads", args.nthreads),
        ("--listen", args.listen),
        ("--interface", args.interface),
        ("--contact-address", args.contact_address),
        ("--log-level", args.log_level),
        ("--print-level", args.print_level),
        ("--name", name),
        ("--death-timeout", args.death_timeout),
        ("--dashboard-address", args.dashboard_address),
        ("--lifetime", args.lifetime),
        ("--lifetime-stagger", args.lifetime_stagger),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    if args.no_dashboard:
        cmd.append("--no-dashboard")
    if args.resources is not None:
        cmd += ["--resources", " ".join(f"{k}={v}" for k, v in args.resources.items())]
    if args.lifetime_restart is not None:
        cmd.append("--lifetime-restart" if args.lifetime_restart else "--no-lifetime-restart")
    for flag, values in (("--preload", args.preload), ("--preload-nanny", args.preload_nanny)):
        for value in values:
            cmd += [flag, value]
    cmd += [*flags, *security.cli_arguments(args)]
    return cmd + (["--preload-argv", *args.preload_argv] if args.preload_argv else [])


def worker_memory_limit(args: argparse.Namespace) -> int:
    """The worker's memory limit in bytes (0: none), from ``--memory-limit`` or config."""
    limit = args.memory_limit if args.memory_limit is not None else default_memory_limit()
    nthreads = args.nthreads or config.integer("worker.nthreads", minimum=1)
    return parse_memory_limit(limit, nthreads)
