"""The worker process: the worker (``worker``), what tasks can ask of it
(``context``) and the ``squall worker`` program (``launcher``)."""
