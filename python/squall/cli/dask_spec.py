"""``python -m squall.cli.dask_spec``: distributed's ``dask_spec`` program (what
``SSHCluster`` runs on each host): start the servers a JSON or YAML spec names, in this
process, and run them until SIGINT/SIGTERM, a client's ``shutdown``, or until all of
them have finished (docs/deploy.md#ssh).

The spec is one server, ``{"cls": CLASS, "opts": {...}}``, or several, ``{NAME: {"cls":
..., "opts": ...}, ...}``; arguments before the options (a worker's scheduler address)
go to every class. Classes are squall's server classes, by squall's import paths or
distributed's (``distributed.Nanny`` is ``squall.Nanny``)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import signal
import sys
from collections.abc import Awaitable
from typing import Any

import yaml  # type: ignore[import-untyped]

from squall import config
from squall._core import __version__
from squall.deploy import lifeline
from squall.deploy.servers import Nanny, Scheduler, listen_address
from squall.protocol import comm
from squall.worker.worker import Worker

#: squall's server classes under distributed's import paths.
DISTRIBUTED_CLASSES: dict[str, type[Any]] = {
    f"{package}{name}": cls
    for name, cls in [
        ("Scheduler", Scheduler),
        ("scheduler.Scheduler", Scheduler),
        ("Nanny", Nanny),
        ("nanny.Nanny", Nanny),
        ("Worker", Worker),
        ("worker.Worker", Worker),
    ]
    for package in ("distributed.", "dask.distributed.")
}

Server = Scheduler | Nanny | Worker


def server_class(path: str) -> type[Server]:
    """The class a spec's ``cls`` names: distributed's name for a squall server class,
    or the import path of one (or of a subclass); anything else is a ``ValueError``."""
    if path in DISTRIBUTED_CLASSES:
        return DISTRIBUTED_CLASSES[path]
    module, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ValueError(f"cannot import the server class {path!r}: {e}") from e
    if isinstance(found, type) and issubclass(found, (Scheduler, Nanny, Worker)):
        return found
    raise ValueError(
        f"{path!r} is not a squall server class: squall runs squall.Scheduler, "
        "squall.Nanny and squall.Worker (or distributed's names for them)"
    )


def make_server(cls: type[Server], args: list[Any], opts: dict[str, Any]) -> Server:
    """``cls(*args, **opts)``; a ``Worker`` also takes distributed's ``host``, ``port``,
    ``interface``, ``protocol`` and ``listen_address`` for where it listens."""
    if issubclass(cls, Worker):
        opts = dict(opts)
        where = {k: opts.pop(k, None) for k in ("host", "port", "interface", "protocol")}
        listen = opts.pop("listen_address", None)
        if listen is None and any(v is not None for v in where.values()):
            host = where["host"] or str(config.get("worker.host"))
            listen = listen_address(
                host, where["port"], where["interface"], where["protocol"], tls=False
            )
        if listen is not None:
            opts["address"] = listen
    return cls(*args, **opts)


def read_spec(spec: str, spec_file: str | None) -> dict[str, dict[str, Any]]:
    """The servers of ``--spec``/``--spec-file``, ``{name: {"cls", "opts"}}``."""
    given: dict[str, Any] = {}
    if spec_file is not None:
        with open(spec_file) as f:
            given.update(yaml.safe_load(f) or {})
    if spec:
        given.update(json.loads(spec))
    if "cls" in given:  # one server
        given = {given.get("opts", {}).get("name", 0): given}
    for name, entry in given.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("cls"), str):
            raise ValueError(f"spec of {name!r}: expected {{'cls': CLASS, 'opts': {{...}}}}")
    return given


async def run(spec: dict[str, dict[str, Any]], args: list[str]) -> None:
    """Start the servers of ``spec`` (with ``args``), run them until a signal, a
    client's ``shutdown`` or all have finished, then close them."""
    servers = [
        make_server(server_class(entry["cls"]), args, dict(entry.get("opts") or {}))
        for entry in spec.values()
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        # Stopped while starting (a nanny waits for its worker to join): close at once.
        starting = asyncio.ensure_future(asyncio.gather(*(_start(s) for s in servers)))
        await _first(stopped, starting)
        if stop.is_set():
            return
        finished: list[Awaitable[Any]] = []
        for server in servers:
            if isinstance(server, Scheduler):
                server.lifecycle.on_shutdown = stop.set
            else:
                finished.append(server.finished())
        if finished:  # a scheduler runs until stopped
            await _first(stopped, asyncio.ensure_future(asyncio.gather(*finished)))
        else:
            await stopped
    finally:
        stopped.cancel()
        await asyncio.gather(*(s.close() for s in servers), return_exceptions=True)


async def _start(server: Server) -> None:
    await server


async def _first(stopped: asyncio.Future[Any], other: asyncio.Future[Any]) -> None:
    """Wait for ``stopped`` or ``other``; ``other``'s error if it ends first, and
    ``other`` cancelled if it has not ended."""
    await asyncio.wait({stopped, other}, return_when=asyncio.FIRST_COMPLETED)
    if other.done():
        other.result()
    else:
        other.cancel()
        await asyncio.gather(other, return_exceptions=True)


@lifeline.server_main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m squall.cli.dask_spec",
        description="run the squall servers of a JSON/YAML spec (distributed's dask_spec)",
    )
    p.add_argument("args", nargs="*", help="arguments for every class (a scheduler address)")
    p.add_argument("--spec", default="", help="JSON: {cls, opts} or {name: {cls, opts}}")
    p.add_argument("--spec-file", help="the spec in a YAML (or JSON) file")
    p.add_argument("--watch-stdin", action="store_true", help=lifeline.WATCH_STDIN_HELP)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    args = p.parse_args(argv)
    if bool(args.spec) == bool(args.spec_file):
        p.error("give exactly one of --spec and --spec-file")
    try:
        spec = read_spec(args.spec, args.spec_file)
        config.setup_logging(config.log_level())
        if args.watch_stdin:
            lifeline.watch_stdin()
        asyncio.run(run(spec, args.args))
    except (ValueError, TypeError, OSError, RuntimeError, comm.CommError) as e:
        print(f"squall dask_spec: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
