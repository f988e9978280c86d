"""Dask integration: collections as squall graphs (``graphs``) and ``squall.order``,
the core's ordering behind dask's ``order`` interface (``ordering``)."""
