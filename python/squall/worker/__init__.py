"""The worker process.

``worker`` runs tasks and serves their results; ``context`` is what tasks can ask of it
(``get_worker``, ``get_client``, ``secede``, ``rejoin``); ``launcher`` is the ``squall
worker`` program (also ``python -m squall.worker``).
"""
