"""Exactly-once handler middleware: Redis SET NX hint plus database authority (DESIGN §5).

Built in a later issue. May import ``framework`` and ``outbox.tables``.
"""

__all__: list[str] = []
