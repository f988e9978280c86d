from __future__ import annotations

import pytest

import squall


@pytest.fixture
def sched() -> squall.Scheduler:
    return squall.Scheduler({"validate": True})
