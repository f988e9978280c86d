"""The client side: ``Client``, its futures, and waiting on them.

``client`` (the API) hands each call to a collaborator holding ``connection`` (the
scheduler connection, its event loop, the futures' reference counts): ``submission``
(graphs), ``data`` (``gather``, ``scatter``), ``workers`` (the cluster's workers,
``run``, ``restart``), ``diagnostics`` and ``task_stream``; ``futures``, ``waiting``
(``wait``, ``as_completed``), ``default`` (the default client) and ``loop``
(timeouts, event loops) serve them.
"""
