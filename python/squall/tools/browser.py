"""Headless Chromium for looking at the dashboard the way a person does (its browser test
and ``squall bench e2e --dashboard``): Debian's ``chromium`` (or ``$SQUALL_CHROMIUM``)
driven by Playwright, which is in the ``test`` extra."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def find_chromium() -> str | None:
    return os.environ.get("SQUALL_CHROMIUM") or shutil.which("chromium")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``); a clear error if either is missing."""
    path = find_chromium()
    if path is None:
        raise RuntimeError("no Chromium found: apt-get install chromium, or set SQUALL_CHROMIUM")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise RuntimeError("driving Chromium needs playwright (squall's test extra)") from None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def open_page(
    browser: Any,
    url: str,
    *,
    updates: int = 1,
    timeout: float = 30.0,
    errors: list[str] | None = None,
) -> Any:
    """A page of the dashboard at ``url``, once it has drawn ``updates`` updates; the
    page's uncaught script errors are appended to ``errors``."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    if errors is not None:
        page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function(
        f"Number(document.getElementById('live').dataset.updates) >= {updates}",
        timeout=timeout * 1000,
    )
    return page
