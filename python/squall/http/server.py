"""The HTTP listener of a scheduler or worker (docs/dashboard.md): tornado on the
process's event loop, beside the squall protocol's listener.

Tornado is what Dask's own HTTP endpoints run on, it serves on asyncio, and the routes
here are few and small; the pages are static files that read compact JSON.
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
from collections.abc import Sequence
from typing import Any

import tornado.httpserver
import tornado.netutil
import tornado.web

from squall import config

logger = logging.getLogger("squall.http")

#: (path pattern, handler class, handler arguments), as tornado takes them.
Route = tuple[str, type[tornado.web.RequestHandler], dict[str, Any]]


def dashboard_tls() -> ssl.SSLContext | None:
    """HTTPS for the scheduler's dashboard and, as Dask, the workers' routes too:
    ``squall.scheduler.dashboard.tls.cert`` and ``.key`` (Dask's
    ``distributed.scheduler.dashboard.tls.*`` where squall's are unset), PEM files. The
    server shows its certificate and asks none of browsers."""
    cert = config.get("scheduler.dashboard.tls.cert")
    key = config.get("scheduler.dashboard.tls.key")
    if not cert:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key or None)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"cannot load the dashboard's certificate {cert!r}: {e}") from None
    return ctx


def parse_http_address(address: str | int, default_host: str) -> tuple[str, int]:
    """Dask's forms of a dashboard address: ``":8787"``, ``"host:8787"``, ``8787``,
    ``"tcp://host:port"`` or ``"http://host:port"`` → (host, port); a missing host is
    ``default_host``, the interface the process's main listener binds."""
    if isinstance(address, int):
        return default_host, address
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep:
        host, port = "", rest
    host = host.strip("[]") or default_host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid dashboard address {address!r}: expected HOST:PORT or :PORT")
    return host, int(port)


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """Requests at debug level: a page polling twice a second, or someone probing for
    paths that do not exist, must not fill the process's log (errors are logged by the
    handlers that raise them)."""
    r = handler.request
    logger.debug("HTTP %d %s %s", handler.get_status(), r.method, r.uri)


def normalize_prefix(prefix: str | None) -> str:
    """A dashboard prefix as distributed takes it (``"foo"``, ``"/foo/"``) → ``"/foo"``;
    none (``""``, ``"/"``, None) → ``""``."""
    parts = (prefix or "").strip("/")
    return f"/{parts}" if parts else ""


class HttpServer:
    """``await start()`` binds ``host:port``; if that port is taken, a free one instead,
    with a warning, as Dask's dashboard does (several clusters on one machine).

    ``prefix`` (``--dashboard-prefix``) puts every route under that path; ``xheaders``
    (``--use-xheaders``) has tornado take the client's address and scheme from the
    ``X-Real-Ip``/``X-Forwarded-*`` headers of a proxy terminating TLS in front of it."""

    def __init__(
        self,
        routes: Sequence[Route],
        *,
        static_path: str | None = None,
        prefix: str | None = None,
        xheaders: bool = False,
    ) -> None:
        self.prefix = normalize_prefix(prefix)
        settings: dict[str, Any] = {"compress_response": True, "log_function": _log_request}
        if static_path is not None:
            settings["static_path"] = static_path
            settings["static_url_prefix"] = f"{self.prefix}/statics/"
        # With a prefix, "/" is the prefix with or without its slash.
        prefixed: list[Route] = [
            (f"{self.prefix}/?" if self.prefix and path == "/" else self.prefix + path, h, kw)
            for path, h, kw in routes
        ]
        self._app = tornado.web.Application(prefixed, **settings)
        self._xheaders = xheaders
        self._server: tornado.httpserver.HTTPServer | None = None
        self.host = ""
        self.port = 0
        self.scheme = "http"

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Serve on ``host:port``, over HTTPS with ``tls``."""
        try:
            sockets = tornado.netutil.bind_sockets(port, host)
        except OSError as e:
            if e.errno != errno.EADDRINUSE or port == 0:
                raise OSError(e.errno, f"cannot serve HTTP on {host}:{port}: {e.strerror}") from e
            sockets = tornado.netutil.bind_sockets(0, host)
            logger.warning(
                "port %d is already in use; serving HTTP on port %d instead",
                port,
                sockets[0].getsockname()[1],
            )
        self._server = tornado.httpserver.HTTPServer(
            self._app, xheaders=self._xheaders, ssl_options=tls
        )
        self.scheme = "http" if tls is None else "https"
        self._server.add_sockets(sockets)
        self.host = host
        self.port = sockets[0].getsockname()[1]

    def url(self, path: str = "") -> str:
        """The address to reach ``path`` (under the prefix) at (the wildcard names no
        host: this host's name)."""
        host = socket.gethostname() if self.host in ("", "0.0.0.0", "::") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}{path}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()
            self._server = None
