"""dask tests that dask's local schedulers pass but no multi-process scheduler can:
each is listed with why, and was checked to fail routed through distributed too
(docs/dask-suite.md). Keys are node ids from ``dask/`` on."""

GAPS: dict[str, str] = {}
