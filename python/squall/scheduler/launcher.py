"""The ``squall scheduler`` program around a ``SchedulerServer``: the flags of
``dask scheduler`` (docs/deploy.md#command-lines)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from dask.utils import format_time

from squall import config, security
from squall.client.scheduler_file import write_scheduler_file
from squall.deploy.lifeline import (
    add_process_flags,
    log_levels,
    parse_duration,
    parse_process_args,
    server_main,
    split_host,
)
from squall.http import options as http_options
from squall.protocol import comm
from squall.scheduler import snapshot
from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")

#: How often ``--idle-timeout`` looks at the scheduler (distributed's period too).
IDLE_POLL = 0.25


async def run_scheduler(
    address: str,
    dashboard_address: str | int | None,
    config: dict[str, Any] | None = None,
    preload: list[str] | None = None,
    preload_argv: list[str] | None = None,
    *,
    http_prefix: str = "",
    xheaders: bool = False,
    scheduler_file: str | None = None,
    idle_timeout: float | None = None,
) -> None:
    """Run a scheduler until SIGINT/SIGTERM, a client's ``shutdown`` or ``idle_timeout``
    seconds without work (``squall scheduler``); ``scheduler_file`` holds its identity
    while it runs."""
    server = SchedulerServer(
        address,
        config,
        dashboard_address=dashboard_address,
        preload=preload,
        preload_argv=preload_argv,
        http_prefix=http_prefix,
        xheaders=xheaders,
    )
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if scheduler_file is not None:
        services = {} if server.http is None else {"dashboard": server.http.port}
        write_scheduler_file(
            scheduler_file, {**snapshot.identity_json(server), "services": services}
        )
    idle = None
    if idle_timeout:
        idle = loop.create_task(stop_when_idle(server, idle_timeout, stop.set))
    # Once signals close it gracefully: its starter may stop it as soon as it reads this.
    print(f"squall scheduler listening at {server.address}", flush=True)
    server.lifecycle.on_shutdown = stop.set  # Client.shutdown()
    try:
        await stop.wait()
    finally:
        logger.info("scheduler at %s shutting down", server.address)
        if idle is not None:
            idle.cancel()
        await server.close()
        if scheduler_file is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(scheduler_file)


async def stop_when_idle(
    server: SchedulerServer, timeout: float, stop: Callable[[], object]
) -> None:
    """``--idle-timeout``: call ``stop`` once nothing has been processing, queued or
    waiting for a worker, and no task has finished, for ``timeout`` seconds (as
    distributed's scheduler; connected clients without work do not count)."""
    computed, since = -1, time.time()
    while True:
        await asyncio.sleep(IDLE_POLL)
        now = int(server.core.counters()["tasks_computed"])
        if server.lifecycle.check_idle() is None or now != computed:
            computed, since = now, time.time()
        elif time.time() > since + timeout:
            logger.info("Scheduler closing after being idle for %s", format_time(timeout))
            stop()
            return


def default_idle_timeout() -> float | None:
    """``--idle-timeout``'s default: Dask's ``distributed.scheduler.idle-timeout``
    (squall has no key of its own), seconds; None: never."""
    value = config.dask_value("scheduler.idle-timeout")
    if value is None:
        return None
    try:
        return parse_duration(str(value))
    except argparse.ArgumentTypeError as e:
        raise ValueError(f"distributed.scheduler.idle-timeout: {e}") from None


def _bool(text: str) -> bool:
    """A boolean as click reads one (``--use-xheaders``)."""
    value = text.strip().lower()
    if value in ("1", "true", "t", "yes", "y", "on"):
        return True
    if value in ("0", "false", "f", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a valid boolean")


def scheduler_address(args: argparse.Namespace) -> str:
    """``--host`` (an IP, a hostname, or distributed's ``tcp://HOST:PORT`` or
    ``tls://``), ``--interface``, ``--port`` and ``--protocol`` as one address; unset
    parts come from ``squall.scheduler.host`` (unset: every interface) and ``.port``,
    the scheme from TLS config."""
    scheme, host, port = split_host("--host", args.host or "")
    if args.protocol is not None:
        if scheme is not None and scheme != args.protocol:
            raise ValueError(f"--host {args.host} and --protocol {args.protocol} disagree")
        scheme = args.protocol
    host = host or comm.scheduler_host()
    if args.interface is not None:
        host = comm.interface_ip(args.interface)
    if args.port is not None:
        port = args.port
    if port is None:
        port = config.port("scheduler.port")
    address = comm.format_address(host, port, scheme)
    comm.parse_address(address)
    return address


def parser() -> argparse.ArgumentParser:
    """``squall scheduler``'s flags: ``dask scheduler``'s (docs/deploy.md#command-lines)."""
    p = argparse.ArgumentParser(prog="squall scheduler", description="run a squall scheduler")
    p.add_argument(
        "--host",
        help="IP or hostname to bind, or tcp://HOST:PORT, tls:// (default: squall.scheduler.host)",
    )
    p.add_argument("--interface", help="network interface to bind, e.g. eth0 (for --host)")
    p.add_argument(
        "--port", type=int, help="port, 0 picks a free one (default: squall.scheduler.port)"
    )
    security.add_cli_options(p)
    http_options.add_cli_options(p, "scheduler.dashboard.address")
    p.add_argument("--dashboard-prefix", default="", help="serve the HTTP routes under this path")
    p.add_argument(
        "--use-xheaders",
        type=_bool,
        default=False,
        help="trust a TLS-terminating proxy's X-Real-Ip/X-Forwarded-* headers (default: False)",
    )
    p.add_argument(
        "--jupyter",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="not supported: squall runs no Jupyter server",
    )
    p.add_argument(
        "--show",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="deprecated, as in distributed: no effect",
    )
    p.add_argument(
        "--scheduler-file",
        help="write the scheduler's identity (its address) as JSON to this file, for "
        "workers and clients (removed at exit)",
    )
    p.add_argument(
        "--idle-timeout",
        type=parse_duration,
        help='close after this long with no work, e.g. "1 hour" '
        "(default: distributed.scheduler.idle-timeout, none: never)",
    )
    add_process_flags(p)
    return p


@server_main
def main(argv: list[str] | None = None) -> int:
    """``squall scheduler``: the flags of ``dask scheduler`` with its meanings; they
    override ``squall.scheduler.host``, ``.port``, ``.preload`` and
    ``squall.logging.level``."""
    p = parser()
    args = parse_process_args(p, argv)
    if args.jupyter:
        p.error("--jupyter: squall's scheduler runs no Jupyter server")
    if args.show is not None:
        print("squall scheduler: --show is deprecated and has no effect", file=sys.stderr)
    try:
        idle_timeout = default_idle_timeout() if args.idle_timeout is None else args.idle_timeout
        security.apply_cli_options(args, "scheduler")
        levels = log_levels(args)
        address = scheduler_address(args)
        config.setup_logging(*levels)
        dashboard = http_options.address_from(args, "scheduler.dashboard.address")
        asyncio.run(
            run_scheduler(
                address,
                dashboard,
                None,
                args.preload,
                args.preload_argv,
                http_prefix=args.dashboard_prefix,
                xheaders=args.use_xheaders,
                scheduler_file=args.scheduler_file,
                idle_timeout=idle_timeout,
            )
        )
    except (ValueError, OSError, comm.CommError) as e:
        print(f"squall scheduler: {e}", file=sys.stderr)
        return 1
    return 0
