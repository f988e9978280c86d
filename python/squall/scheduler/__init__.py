"""The scheduler process.

``server`` puts the core's state machine behind the wire protocol; ``launcher`` is the
``squall scheduler`` program that runs it (also ``python -m squall.scheduler``).
"""
