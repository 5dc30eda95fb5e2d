"""Producer/consumer SDK applications embed (DESIGN §4). Built in a later issue.

May import only the public surface of ``storage_engine``.
"""

__all__: list[str] = []
