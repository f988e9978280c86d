"""Dask integration: collections as squall graphs, and ``squall.order``.

``graphs`` turns collections into the graphs the client sends; ``ordering`` puts the
core's ordering behind dask's ``order`` interface; ``subgraph`` runs dask's fused
tasks with it.
"""
