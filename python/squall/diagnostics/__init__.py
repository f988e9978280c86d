"""What a person watches while the cluster works: ``progress``."""

from squall.diagnostics.progressbar import progress

__all__ = ["progress"]
