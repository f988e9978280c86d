"""A worker's HTTP routes (docs/dashboard.md): ``/health`` and ``/metrics``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from squall.http.handlers import HEALTH_ROUTE
from squall.http.server import Route

if TYPE_CHECKING:
    from squall.worker.worker import Worker


def worker_routes(worker: Worker) -> list[Route]:
    return [HEALTH_ROUTE]
