"""The wire protocol between squall's processes (docs/runtime.md).

``comm`` (frames, handshakes, batched streams), ``specs`` (run specs),
``update_graph`` (the ``update-graph`` encoding), ``peers`` (requests to workers' peer
listeners) and ``remote_errors`` (how task errors travel).
"""
