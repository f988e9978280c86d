"""A worker's HTTP routes (docs/dashboard.md#routes): ``/health`` and ``/metrics``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST

from squall.http.handlers import HEALTH_ROUTE, TextHandler
from squall.http.server import Route
from squall.worker import metrics

if TYPE_CHECKING:
    from squall.worker.worker import Worker


def worker_routes(worker: Worker) -> list[Route]:
    return [
        HEALTH_ROUTE,
        (
            "/metrics",
            TextHandler,
            {"text": lambda: metrics.exposition(worker), "content_type": CONTENT_TYPE_LATEST},
        ),
    ]
