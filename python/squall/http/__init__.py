"""HTTP: the dashboard, ``/health``, ``/metrics`` and the JSON and API routes of the
scheduler and workers (docs/dashboard.md)."""
