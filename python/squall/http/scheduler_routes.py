"""The scheduler's HTTP routes (docs/dashboard.md): the dashboard pages and their data,
``/health``, and the API routes that Kubernetes' Dask operator calls."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import tornado.web
from prometheus_client import CONTENT_TYPE_LATEST

from squall import config
from squall.http.dashboard_data import dashboard_data
from squall.http.handlers import HEALTH_ROUTE, JsonHandler, PageHandler, TextHandler
from squall.http.server import Route
from squall.scheduler import metrics, snapshot

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

STATIC = os.path.join(os.path.dirname(__file__), "static")

#: Dask's module name for these routes in ``distributed.scheduler.http.routes``.
_DASK_API_ROUTES = "distributed.http.scheduler.api"


def api_enabled() -> bool:
    """The API routes act on the cluster (retire workers), so as in Dask they are off
    unless asked for: ``squall.scheduler.dashboard.api``, or Dask's routes list naming
    them (as Kubernetes' Dask operator sets it)."""
    dask_routes = config.dask_value("scheduler.http.routes") or []
    return bool(config.get("scheduler.dashboard.api")) or _DASK_API_ROUTES in dask_routes


class _RedirectToStatus(tornado.web.RequestHandler):
    def get(self) -> None:
        # "/", or the dashboard prefix with or without its slash
        self.redirect(self.request.path.rstrip("/") + "/status")


class _ApiDisabled(tornado.web.RequestHandler):
    def prepare(self) -> None:
        self.set_status(403)
        self.set_header("Content-Type", "application/json")
        self.finish('{"Error":"the API routes are off; set squall.scheduler.dashboard.api: true"}')


def scheduler_routes(server: SchedulerServer) -> list[Route]:
    api = Api(server)

    def identity(args: dict[str, str]) -> dict[str, Any]:
        out = snapshot.identity_json(server)
        out["services"] = {} if server.http is None else {"dashboard": server.http.port}
        return out

    def data(args: dict[str, str]) -> dict[str, Any]:
        try:
            cursor = int(args.get("cursor", "-1"))
        except ValueError:
            raise ValueError(f"cursor must be an integer, not {args['cursor']!r}") from None
        return dashboard_data(server, cursor)

    routes: list[Route] = [
        ("/", _RedirectToStatus, {}),
        HEALTH_ROUTE,
        (
            "/metrics",
            TextHandler,
            {"text": lambda: metrics.exposition(server), "content_type": CONTENT_TYPE_LATEST},
        ),
        ("/json/identity.json", JsonHandler, {"get": identity}),
        ("/json/counts.json", JsonHandler, {"get": lambda a: snapshot.counts_json(server)}),
        ("/dashboard/data.json", JsonHandler, {"get": data}),
        *(
            (f"/{page}", PageHandler, {"path": os.path.join(STATIC, "dashboard.html")})
            for page in ("status", "workers", "system")
        ),
    ]
    if api_enabled():
        routes += [
            ("/api/v1", TextHandler, {"text": lambda: "API V1", "content_type": "text/plain"}),
            ("/api/v1/get_workers", JsonHandler, {"get": api.get_workers}),
            ("/api/v1/adaptive_target", JsonHandler, {"get": api.adaptive_target}),
            ("/api/v1/check_idle", JsonHandler, {"get": api.check_idle}),
            ("/api/v1/retire_workers", JsonHandler, {"post": api.retire_workers}),
        ]
    else:
        routes.append((r"/api/v1(/.*)?", _ApiDisabled, {}))
    return routes


class Api:
    """The answers of ``/api/v1/*``, in the shapes distributed gives them."""

    def __init__(self, server: SchedulerServer) -> None:
        self.server = server

    def get_workers(self, args: dict[str, str]) -> dict[str, Any]:
        core = self.server.core
        workers = [core.worker_info(w) for _, w in core.workers()]
        return {
            "num_workers": len(workers),
            "workers": [{"name": w["name"], "address": w["address"]} for w in workers],
        }

    def adaptive_target(self, args: dict[str, str]) -> dict[str, Any]:
        duration = config.seconds("adaptive.target-duration")
        return {"workers": self.server.core.adaptive_target(duration)}

    def check_idle(self, args: dict[str, str]) -> dict[str, Any]:
        return {"idle_since": self.server.lifecycle.check_idle()}

    async def retire_workers(self, body: Any) -> dict[str, Any]:
        """``{"n": count}`` (the core picks which) or ``{"workers": [address or name,
        ...]}``; answers ``{address: worker info}`` of those retired."""
        if not isinstance(body, dict):
            raise ValueError('expected {"n": count} or {"workers": [addresses]}')
        lifecycle, core = self.server.lifecycle, self.server.core
        n = body.get("n", 0)
        if n:
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"n must be a positive count, not {n!r}")
            ids = core.workers_to_close(n=n)
        else:
            ids = lifecycle.resolve(list(body.get("workers") or []))
        done = await lifecycle.retire(ids, close=False, remove=True)
        return done.retired
