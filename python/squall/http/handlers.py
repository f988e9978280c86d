"""Request handlers shared by the scheduler's and the workers' routes: each wraps one
function of the process, so the routes are a table (docs/dashboard.md)."""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import tornado.web

logger = logging.getLogger("squall.http")


class TextHandler(tornado.web.RequestHandler):
    """GET → ``text()`` as ``content_type``."""

    def initialize(self, text: Callable[[], str | bytes], content_type: str) -> None:
        self._text = text
        self._content_type = content_type

    def get(self) -> None:
        self.set_header("Content-Type", self._content_type)
        self.write(self._text())


class JsonHandler(tornado.web.RequestHandler):
    """GET → ``get(query arguments)`` as JSON; POST → ``await post(JSON body)``. A
    ``ValueError`` (bad input) answers 400, any other error 500, each with
    ``{"Error": reason}``."""

    def initialize(
        self,
        get: Callable[[dict[str, str]], Any] | None = None,
        post: Callable[[Any], Awaitable[Any]] | None = None,
    ) -> None:
        self._get = get
        self._post = post

    async def get(self) -> None:
        if self._get is None:
            raise tornado.web.HTTPError(405)
        get, args = self._get, {k: self.get_argument(k) for k in self.request.arguments}
        await self._answer(lambda: get(args))

    async def post(self) -> None:
        if self._post is None:
            raise tornado.web.HTTPError(405)
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError as e:
            return self._fail(400, f"the body is not JSON: {e}")
        await self._answer(functools.partial(self._post, body))

    async def _answer(self, compute: Callable[[], Any]) -> None:
        """``compute()`` (awaited if it gives an awaitable) as JSON, or the error."""
        try:
            result = compute()
            if inspect.isawaitable(result):
                result = await result
        except ValueError as e:
            return self._fail(400, str(e))
        except Exception as e:
            logger.exception("HTTP %s %s failed", self.request.method, self.request.path)
            return self._fail(500, f"{type(e).__name__}: {e}")
        self._write_json(result)

    def _write_json(self, value: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(value, separators=(",", ":")))

    def _fail(self, status: int, reason: str) -> None:
        self.set_status(status)
        self._write_json({"Error": reason})


class PageHandler(tornado.web.RequestHandler):
    """A dashboard page: one of the static HTML files, which read their data as JSON."""

    def initialize(self, path: str) -> None:
        self._path = path

    def get(self) -> None:
        with open(self._path, "rb") as f:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.set_header("Cache-Control", "no-cache")
            self.write(f.read())


def health() -> str:
    return "ok"


HEALTH_ROUTE = (
    "/health",
    TextHandler,
    {"text": health, "content_type": "text/plain; charset=utf-8"},
)
