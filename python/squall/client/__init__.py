"""The client side: ``Client``, its futures, and waiting on them.

``client`` (the API) builds on ``connection`` (the scheduler connection, its event
loop, the futures' reference counts), ``workers`` (the cluster's workers, ``run``,
``restart``) and ``data`` (``gather``, ``scatter``); ``futures``, ``waiting``
(``wait``, ``as_completed``), ``default`` (the default client) and ``loop``
(timeouts, event loops) serve them.
"""
