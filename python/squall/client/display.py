"""How a client shows itself: its dashboard link and its text and HTML reprs
(docs/dashboard.md#from-a-client)."""

from __future__ import annotations

import html
import os
from typing import Any

from dask.utils import format_bytes

from squall import config
from squall.protocol import comm
from squall.protocol import messages as m

#: The link's template when Dask's ``distributed.dashboard.link`` is not configured.
DEFAULT_LINK = "{scheme}://{host}:{port}/status"


def dashboard_link(scheduler_address: str, port: int | None, scheme: str = "http") -> str | None:
    """The dashboard's address as a person reaches it: the scheduler's host and the
    dashboard's port, through Dask's ``distributed.dashboard.link`` template (which may
    name environment variables, e.g. for a Jupyter proxy). None: no dashboard."""
    if port is None:
        return None
    host = comm.parse_address(scheduler_address)[0]
    host = f"[{host}]" if ":" in host else host
    template = config.dask_value("dashboard.link", DEFAULT_LINK)
    return str(template).format(**{**os.environ, "scheme": scheme, "host": host, "port": port})


def cluster_summary(identity: m.SchedulerInfoReply | None) -> dict[str, Any]:
    """Workers, threads and memory from a ``scheduler-info`` answer (empty if none)."""
    if identity is None:
        return {}
    return {
        "workers": len(identity.workers),
        "threads": identity.total_threads,
        "memory": format_bytes(identity.total_memory),
    }


def text_repr(
    address: str, status: str, link: str | None, identity: m.SchedulerInfoReply | None
) -> str:
    """Dask's, with the dashboard: ``<Client: 'tcp://…' processes=2 threads=4,
    memory=8.00 GiB, dashboard=http://…/status>``; once closed, Dask's ``<Client: No
    scheduler connected>``."""
    if status == "closed":
        return "<Client: No scheduler connected>"
    s = cluster_summary(identity)
    shown = f"dashboard={link}" if link is not None else "no dashboard"
    if not s or status != "running":
        return f"<Client: {address!r} status={status}, {shown}>"
    return (
        f"<Client: {address!r} processes={s['workers']} threads={s['threads']}, "
        f"memory={s['memory']}, {shown}>"
    )


def html_repr(
    client_id: str,
    address: str,
    status: str,
    link: str | None,
    identity: m.SchedulerInfoReply | None,
) -> str:
    """A small table for notebooks, with the dashboard as a link."""
    rows: list[tuple[str, str]] = [("Client", html.escape(client_id))]
    rows.append(("Scheduler", html.escape(address)))
    rows.append(("Status", html.escape(status)))
    if link is not None:
        url = html.escape(link, quote=True)
        rows.append(("Dashboard", f'<a href="{url}" target="_blank">{url}</a>'))
    for name, value in cluster_summary(identity).items():
        rows.append((name.capitalize(), html.escape(str(value))))
    body = "".join(
        f'<tr><th style="text-align:left">{k}</th><td style="text-align:left">{v}</td></tr>'
        for k, v in rows
    )
    return f'<div class="squall-client"><h3>squall Client</h3><table>{body}</table></div>'
