"""What a person watches while the cluster works, ``progress``, and the plugins that
extend the scheduler, workers and nannies (``squall.diagnostics.plugin``, imported
first: the built-in plugins' modules build on its base classes)."""

from squall.diagnostics.plugin import NannyPlugin, SchedulerPlugin, WorkerPlugin
from squall.diagnostics.progressbar import progress

__all__ = ["NannyPlugin", "SchedulerPlugin", "WorkerPlugin", "progress"]
