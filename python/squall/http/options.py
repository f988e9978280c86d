"""``--dashboard-address``, ``--dashboard/--no-dashboard`` and ``--dashboard-prefix``,
for ``squall scheduler`` and ``squall worker`` (docs/dashboard.md, docs/deploy.md#command-lines).
Kept apart from the server so that parsing flags imports no web framework."""

from __future__ import annotations

import argparse

from squall import config


def add_cli_options(p: argparse.ArgumentParser, key: str) -> None:
    """The flags; ``key`` is the config key of the default address."""
    p.add_argument(
        "--dashboard-address",
        help=f"where to serve HTTP (dashboard, /health, /metrics): :PORT, HOST:PORT, PORT, "
        f":0 for a free port (default: squall.{key})",
    )
    p.add_argument(
        "--dashboard",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the HTTP routes (--no-dashboard: none, and no dashboard)",
    )


def address_from(args: argparse.Namespace, key: str) -> str | int | None:
    """The address the flags ask for (None: serve none)."""
    if not args.dashboard:
        return None
    if args.dashboard_address is not None:
        return str(args.dashboard_address)
    value = config.get(key)
    return None if value is None else value if isinstance(value, int) else str(value)
