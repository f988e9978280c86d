"""The dashboard as a person sees it: headless Chromium (Debian's ``chromium``, driven
by Playwright) opens the pages of a live cluster while it computes. Skipped where no
Chromium is installed (``.ci/run`` installs it).

Screenshots go to ``tmp_path``, and also to ``$SQUALL_SCREENSHOTS`` when that is set,
to be looked at."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import pytest

import squall
from squall.tools.browser import chromium, find_chromium, open_page

pytest.importorskip("playwright.sync_api", reason="needs playwright")
cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.skipif(
    find_chromium() is None, reason="needs Chromium (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def shoot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get("SQUALL_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)
    return path


def slow_inc(x: int) -> int:
    time.sleep(0.02)
    return x + 1


def slow_double(x: int) -> int:
    time.sleep(0.02)
    return 2 * x


def test_status_workers_and_system_pages_during_a_computation(
    browser: Any, tmp_path: Path
) -> None:
    with (
        squall.LocalCluster(n_workers=2, threads_per_worker=2) as cluster,
        squall.Client(cluster) as client,
    ):
        link = client.dashboard_link
        assert link is not None
        base = link.removesuffix("/status")
        incs = client.map(slow_inc, range(600))
        doubles = client.map(slow_double, incs)
        errors: list[str] = []
        page = open_page(browser, link, updates=4, errors=errors)
        try:
            # Updates keep arriving while it computes, and the stream fills.
            page.wait_for_function(
                "Number(document.getElementById('task-stream').dataset.rects) > 20",
                timeout=20_000,
            )
            rows = page.eval_on_selector_all(
                ".progress-row", "els => els.map(e => e.dataset.prefix)"
            )
            assert {"slow_inc", "slow_double"} <= set(rows)
            groups = page.eval_on_selector_all(
                ".group-row", "els => els.map(e => e.dataset.group)"
            )
            assert {"slow_inc", "slow_double"} <= {g.split("-")[0] for g in groups}
            # A row per thread: 2 workers of 2 threads.
            assert int(page.get_attribute("#task-stream", "data-rows") or 0) == 4
            assert page.inner_text("#live") == "live"
            shoot(page, tmp_path, "status")

            client.gather(doubles)
            # At the end the bars show everything done.
            page.wait_for_function(
                "[...document.querySelectorAll('.figure')]"
                ".some(e => e.textContent.startsWith('600 / 600'))",
                timeout=20_000,
            )

            page.goto(base + "/workers")
            assert errors == []
            page.wait_for_selector("tr[data-worker]", timeout=20_000)
            addresses = page.eval_on_selector_all(
                "tr[data-worker]", "els => els.map(e => e.dataset.worker)"
            )
            assert sorted(addresses) == sorted(client.scheduler_info()["workers"])
            shoot(page, tmp_path, "workers")

            page.goto(base + "/system")
            page.wait_for_selector("section[data-figure]", timeout=20_000)
            page.wait_for_function(
                "Number(document.getElementById('live').dataset.updates) >= 3", timeout=20_000
            )
            shoot(page, tmp_path, "system")
            assert errors == []
        finally:
            page.close()


def test_a_performance_report_opens_in_the_browser(browser: Any, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    with (
        squall.LocalCluster(n_workers=2, threads_per_worker=1) as cluster,
        squall.Client(cluster) as client,
        squall.performance_report(filename=str(report)),
    ):
        client.gather(client.map(slow_double, client.map(slow_inc, range(100))))
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(report.as_uri())
        text = page.inner_text("body")
        assert "slow_inc" in text and "slow_double" in text
        assert page.locator("svg rect").count() >= 200  # a rectangle per task at least
        shoot(page, tmp_path, "performance-report")
    finally:
        page.close()
    assert errors == []
    assert requests == [report.as_uri()]  # self-contained: nothing else is fetched
