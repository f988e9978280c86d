"""The ``squall scheduler`` program around a ``SchedulerServer``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from squall import config, security
from squall.deploy.lifeline import log_levels, parse_process_args
from squall.http import options as http_options
from squall.protocol import comm
from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")


async def run_scheduler(
    address: str,
    dashboard_address: str | int | None,
    config: dict[str, Any] | None = None,
    preload: list[str] | None = None,
    preload_argv: list[str] | None = None,
) -> None:
    """Run a scheduler until SIGINT/SIGTERM or a client's ``shutdown`` (``squall
    scheduler``)."""
    server = SchedulerServer(
        address,
        config,
        dashboard_address=dashboard_address,
        preload=preload,
        preload_argv=preload_argv,
    )
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Once signals close it gracefully: its starter may stop it as soon as it reads this.
    print(f"squall scheduler listening at {server.address}", flush=True)
    server.lifecycle.on_shutdown = stop.set  # Client.shutdown()
    try:
        await stop.wait()
    finally:
        logger.info("scheduler at %s shutting down", server.address)
        await server.close()


def main(argv: list[str] | None = None) -> int:
    """``squall scheduler [--host HOST] [--port PORT] [--log-level LEVEL] [--preload
    MODULE]``; flags override ``squall.scheduler.host``, ``.port``, ``.preload`` and
    ``squall.logging.level``."""
    p = argparse.ArgumentParser(prog="squall scheduler", description="run a squall scheduler")
    p.add_argument("--host", help="address to bind (default: squall.scheduler.host)")
    p.add_argument("--interface", help="network interface to bind, e.g. eth0 (for --host)")
    p.add_argument(
        "--port", type=int, help="port, 0 picks a free one (default: squall.scheduler.port)"
    )
    security.add_cli_options(p)
    http_options.add_cli_options(p, "scheduler.dashboard.address")
    args = parse_process_args(p, argv)
    try:
        security.apply_cli_options(args, "scheduler")
        levels = log_levels(args)
        host = comm.scheduler_host() if args.host is None else args.host
        if args.interface is not None:
            host = comm.interface_ip(args.interface)
        port = config.port("scheduler.port") if args.port is None else args.port
        address = comm.format_address(host, port)
        comm.parse_address(address)
        config.setup_logging(*levels)
        dashboard = http_options.address_from(args, "scheduler.dashboard.address")
        asyncio.run(run_scheduler(address, dashboard, None, args.preload, args.preload_argv))
    except (ValueError, OSError, comm.CommError) as e:
        print(f"squall scheduler: {e}", file=sys.stderr)
        return 1
    return 0
