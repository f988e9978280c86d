"""The scheduler process: the core's state machine behind the wire protocol
(``server``) and the ``squall scheduler`` program that runs it (``launcher``)."""
