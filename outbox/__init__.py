"""Transactional outbox: message-stub table, relay and resend rules (DESIGN §5). Later issue.

May import the public API of ``framework``; never ``idempotency`` or ``storage_engine``.
"""

__all__: list[str] = []
