"""PySpark reconciliation jobs (DESIGN §6). Built in a later issue.

May import only ``storage_engine.formats`` and ``outbox.tables`` (names).
"""

__all__: list[str] = []
