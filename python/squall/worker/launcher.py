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
import socket
import subprocess
import sys
from typing import Any, NamedTuple

import dask

from squall import config, security
from squall.client.scheduler_file import wait_for_scheduler_file
from squall.deploy.lifeline import (
    add_process_flags,
    log_levels,
    parse_duration,
    parse_process_args,
    remove_pid_file,
    server_main,
    split_host,
)
from squall.deploy.shape import default_shape
from squall.errors import TimeoutError
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
    loop = asyncio.get_running_loop()
    starting = loop.create_task(worker.start())
    closing: set[asyncio.Task[None]] = set()

    def stop(sig: signal.Signals) -> None:
        logger.info("worker %s: received %s, closing", worker.address, sig.name)
        if not starting.done():  # e.g. still waiting for its scheduler
            starting.cancel()
        closing.add(loop.create_task(worker.close()))

    # Before starting: a signal that comes as soon as the worker has joined (its starter
    # saw it join) closes it gracefully, instead of killing the process.
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop, sig)
    try:
        await asyncio.wait([starting])
        if starting.cancelled():
            return False
        starting.result()  # its error, if it failed
        if lifetime is not None:
            loop.call_later(lifetime, functools.partial(worker.retire, restart=lifetime_restart))
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


def parser() -> argparse.ArgumentParser:
    """``squall worker``'s flags: ``dask worker``'s (docs/deploy.md#command-lines)."""
    p = argparse.ArgumentParser(prog="squall worker", description="a squall worker")
    p.add_argument(
        "scheduler",
        nargs="?",
        help="scheduler address, tcp://HOST:PORT (default: --scheduler-file, else "
        "DASK_SCHEDULER_ADDRESS)",
    )
    p.add_argument(
        "--scheduler-file",
        help="read the scheduler's address from this JSON file (squall scheduler "
        "--scheduler-file), waiting for it up to --death-timeout",
    )
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
        "--listen-address",
        "--listen",
        dest="listen",
        help="address to serve peers on, tcp://HOST:PORT (default: squall.worker.host and .port)",
    )
    p.add_argument(
        "--host",
        help="host to serve peers on, and to advertise (see --listen-address, --contact-address)",
    )
    p.add_argument(
        "--worker-port",
        type=_parse_ports,
        help="port to serve peers on, or FIRST:LAST: the first free one of that range, "
        "shared out between --nworkers (default: squall.worker.port)",
    )
    p.add_argument(
        "--nanny-port",
        type=_parse_ports,
        help="the nanny's port, or FIRST:LAST as --worker-port (default: a free one)",
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
    p.add_argument(
        "--worker-class",
        default=DISTRIBUTED_WORKER,
        help=f"the worker's class: squall's, under distributed's name {DISTRIBUTED_WORKER} "
        "or squall.Worker; no other",
    )
    p.add_argument(
        "--scheduler-sni",
        help="TLS server name (SNI) to ask of the scheduler, if not its host's",
    )
    p.add_argument(
        "--dashboard-prefix",
        help="deprecated, as in distributed: no effect (a worker serves /health and /metrics)",
    )
    # Given by the nanny to the worker it starts: the nanny's address, for the scheduler.
    p.add_argument("--nanny-address", help=argparse.SUPPRESS)
    # ... and the file where the worker keeps the tasks it is running, for the nanny.
    p.add_argument("--executing-record", help=argparse.SUPPRESS)
    security.add_cli_options(p)
    http_options.add_cli_options(p, "worker.dashboard.address")
    add_process_flags(p, nanny=True)
    return p


@server_main
def main(argv: list[str] | None = None) -> int:
    """``squall worker``. On a restart from the scheduler the program re-executes
    itself with the same arguments."""
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    args = parse_process_args(p, argv)
    try:
        check_flags(args)
        security.apply_cli_options(args, "worker")
        levels = log_levels(args)
    except (config.ConfigError, OSError, ValueError) as e:
        print(f"squall worker: {e}", file=sys.stderr)
        return 1
    if args.dashboard_prefix is not None:
        print("squall worker: --dashboard-prefix is deprecated and has no effect", file=sys.stderr)
    if args.nworkers == "auto":
        args.nworkers, threads = default_shape(os.cpu_count() or 1)
        if args.nthreads is None:
            args.nthreads = threads
    elif args.nworkers < 0:
        args.nworkers += (os.cpu_count() or 1) + 1
    if args.nworkers < 1:
        p.error("--nworkers must come to at least 1")
    try:
        death_timeout = liveness.death_timeout(args.death_timeout)
    except ValueError as e:
        p.error(f"--death-timeout: {e}")
    try:
        lifetime = configured_lifetime(args.lifetime, args.lifetime_stagger, args.lifetime_restart)
    except config.ConfigError as e:
        p.error(str(e))
    try:
        args.scheduler = scheduler_address(args, death_timeout)
    except (ValueError, TimeoutError) as e:
        print(f"squall worker: {e}", file=sys.stderr)
        return 1
    if args.nworkers > 1:
        if args.listen is not None and comm.parse_address(args.listen)[1] != 0:
            p.error("--listen-address with a fixed port needs --nworkers 1")
        for flag in ("worker_port", "nanny_port"):
            ports = getattr(args, flag)
            if ports is not None and ports != (0, 0) and ports[1] - ports[0] + 1 < args.nworkers:
                p.error(f"--{flag.replace('_', '-')} {_ports(ports)}: fewer ports than --nworkers")
        return _run_workers(args)
    config.setup_logging(*levels)
    try:
        memory_limit = worker_memory_limit(args)
        address = listen_address(args)
    except (config.ConfigError, ValueError) as e:
        print(f"squall worker: {e}", file=sys.stderr)
        return 1
    if args.nanny:
        command = worker_command(args, args.name)
        try:
            return run_nanny(
                args.scheduler,
                command,
                args.death_timeout,
                memory_limit,
                args.preload_nanny,
                address=nanny_address(args),
            )
        except (PreloadError, ValueError) as e:
            print(f"squall worker: {e}", file=sys.stderr)
            return 1
    try:
        restart = asyncio.run(
            run_worker(
                args.scheduler,
                nthreads=args.nthreads,
                name=args.name,
                address=address,
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
                scheduler_sni=args.scheduler_sni,
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
    remove_pid_file()  # atexit is skipped
    os._exit(0)


#: distributed's default ``--worker-class``, and the other names of squall's worker
#: that ``--worker-class`` takes.
DISTRIBUTED_WORKER = "dask.distributed.Worker"
WORKER_CLASSES = frozenset(
    {
        DISTRIBUTED_WORKER,
        "distributed.Worker",
        "distributed.worker.Worker",
        "squall.Worker",
        "squall.worker.worker.Worker",
    }
)


def check_flags(args: argparse.Namespace) -> None:
    """``ValueError`` naming a flag squall cannot honour, or flags that contradict."""
    if args.worker_class not in WORKER_CLASSES:
        raise ValueError(
            f"--worker-class {args.worker_class}: squall runs its own worker only "
            f"({DISTRIBUTED_WORKER} or squall.Worker)"
        )
    if args.listen is not None and (args.host is not None or args.worker_port is not None):
        raise ValueError("--listen-address cannot be combined with --host or --worker-port")
    listen_scheme = None if args.listen is None else comm.scheme_of(args.listen)
    if args.protocol is not None and listen_scheme not in (None, args.protocol):
        raise ValueError(f"--listen-address {args.listen} and --protocol {args.protocol} disagree")
    if args.host is not None:
        scheme, _, port = split_host("--host", args.host)
        if port is not None and args.worker_port is not None:
            raise ValueError(f"--host {args.host} has a port: give --worker-port or a port there")
        if scheme is not None and args.protocol is not None and scheme != args.protocol:
            raise ValueError(f"--host {args.host} and --protocol {args.protocol} disagree")


def scheduler_address(args: argparse.Namespace, death_timeout: float | None) -> str:
    """The scheduler's address as distributed's worker finds it: from
    ``--scheduler-file`` (waiting for it up to the death timeout), else the positional
    argument, else ``DASK_SCHEDULER_ADDRESS`` (Dask's ``scheduler-address``)."""
    if args.scheduler_file is not None:
        if not os.path.exists(args.scheduler_file):
            print(f"squall worker: waiting for {args.scheduler_file}", file=sys.stderr, flush=True)
        return wait_for_scheduler_file(args.scheduler_file, death_timeout)
    if args.scheduler:
        return str(args.scheduler)
    env = dask.config.get("scheduler-address", None)
    if env:
        return str(env)
    raise ValueError(
        "no scheduler: give its address (tcp://HOST:PORT), --scheduler-file, or "
        "DASK_SCHEDULER_ADDRESS"
    )


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
            nanny = ["--nanny"] if args.nanny else ["--no-nanny"]
            nanny_ports = share_ports(args.nanny_port, args.nworkers, i)
            if args.nanny and nanny_ports is not None:
                nanny += ["--nanny-port", _ports(nanny_ports)]
            worker_ports = share_ports(args.worker_port, args.nworkers, i)
            cmd = worker_command(args, name, *nanny, worker_port=worker_ports)
            procs.append(subprocess.Popen(cmd))
        codes = [proc.wait() for proc in procs]
    except BaseException:
        forward(signal.SIGTERM, None)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if all(code == 0 for code in codes) else 1


def _parse_ports(text: str) -> tuple[int, int]:
    """``--worker-port``/``--nanny-port``: ``PORT`` or ``FIRST:LAST`` (both included)."""
    first, sep, last = text.partition(":")
    try:
        ports = int(first), int(last) if sep else int(first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PORT or FIRST:LAST, not {text!r}") from None
    if not 0 <= ports[0] <= ports[1] <= 65535 or (ports[0] == 0 and ports[1] != 0):
        raise argparse.ArgumentTypeError(f"invalid port range {text!r}")
    return ports


def _ports(ports: tuple[int, int]) -> str:
    return str(ports[0]) if ports[0] == ports[1] else f"{ports[0]}:{ports[1]}"


def share_ports(ports: tuple[int, int] | None, n: int, i: int) -> tuple[int, int] | None:
    """Process ``i`` of ``n``'s part of a port range: consecutive slices, none shared
    (0, a free port, is everyone's)."""
    if ports is None or ports == (0, 0):
        return ports
    size = (ports[1] - ports[0] + 1) // n
    first = ports[0] + i * size
    return first, ports[1] if i == n - 1 else first + size - 1


def free_port(flag: str, host: str, ports: tuple[int, int]) -> int:
    """The first port of the range that ``host`` can bind now (a single port as it
    is: binding it reports its own error)."""
    if ports[0] == ports[1]:
        return ports[0]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in range(ports[0], ports[1] + 1):
        with socket.socket(family) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listener
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise ValueError(f"{flag} {_ports(ports)}: no free port in that range on {host or '*'}")


def _bind_host(args: argparse.Namespace) -> tuple[str | None, str | None, int | None]:
    """(protocol, host, port) the flags give for this process's listeners: from
    ``--listen-address``, or ``--interface``/``--host`` with ``--protocol``; None where
    they say nothing."""
    if args.listen is not None:
        bound, port = comm.parse_address(args.listen)
        return comm.scheme_of(args.listen), bound, port
    scheme, host, given = split_host("--host", args.host) if args.host else (None, "", None)
    if args.interface is not None:
        host = comm.interface_ip(args.interface)
    return scheme or args.protocol, host or None, given


def listen_address(args: argparse.Namespace) -> str | None:
    """Where the worker serves peers: ``--listen-address``, else ``--host`` or
    ``--interface`` on ``--worker-port`` (the first free one of a range; default
    ``squall.worker.port``) over ``--protocol``. None: the worker's default host, on
    the ``--worker-port`` given, which is then set as ``squall.worker.port``."""
    if args.listen is not None:
        return args.listen  # type: ignore[no-any-return]
    scheme, host, port = _bind_host(args)
    if port is None and args.worker_port is not None:
        port = free_port("--worker-port", host or "", args.worker_port)
    if host is None:
        default = "tls" if security.default().tls else "tcp"
        if scheme is not None and scheme != default:
            raise ValueError(
                f"--protocol {scheme}: this worker's security makes it {default} "
                "(--tls-* flags make it tls)"
            )
        if port is not None:
            dask.config.set({"squall.worker.port": port})
        return None
    return comm.format_address(host, config.port("worker.port") if port is None else port, scheme)


def nanny_address(args: argparse.Namespace) -> str | None:
    """Where the nanny serves: the worker's host (``--host``, ``--interface``,
    ``--listen-address``) on ``--nanny-port``; None: the nanny's default."""
    scheme, host, _ = _bind_host(args)
    if host is None and args.nanny_port is None:
        return None
    host = host or str(config.get("worker.host"))
    port = 0 if args.nanny_port is None else free_port("--nanny-port", host, args.nanny_port)
    return comm.format_address(host, port, scheme)


def worker_command(
    args: argparse.Namespace,
    name: str | None,
    *flags: str,
    worker_port: tuple[int, int] | None = None,
) -> list[str]:
    """The command running one ``squall worker`` process of these arguments, named
    ``name``, with ``flags``, serving on ``worker_port`` (default ``--worker-port``);
    options left unset stay unset, so it reads the same config defaults. It ends with
    the preload argv (``--preload-argv`` takes the rest)."""
    ports = args.worker_port if worker_port is None else worker_port
    cmd = [sys.executable, "-m", "squall.worker", args.scheduler]
    for flag, value in (
        ("--memory-limit", args.memory_limit),
        ("--local-directory", args.local_directory),
        ("--nthreads", args.nthreads),
        ("--listen-address", args.listen),
        ("--host", args.host),
        ("--worker-port", None if ports is None else _ports(ports)),
        ("--interface", args.interface),
        ("--protocol", args.protocol),
        ("--contact-address", args.contact_address),
        ("--scheduler-sni", args.scheduler_sni),
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
    if not args.dashboard:
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
