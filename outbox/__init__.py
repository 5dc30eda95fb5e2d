"""Transactional outbox (DESIGN §5): the stub table written in the caller's transaction, the
relay that publishes stubs to the broker, and the schema both share.

    import outbox
    box = outbox.Outbox(app)                       # engine + relay, started with the app
    with box.session.begin() as session:
        session.add(order)
        message_id = outbox.send(session, "orders", {"order": 1}, tags="created")

May import the public API of ``framework``; never ``idempotency`` or ``storage_engine``.
"""

from .claims import ClaimedStub, claim_stubs
from .database import create_database_engine, database_engine
from .errors import BodyNotSerializableError, InvalidMessageError, NoTransactionError, OutboxError
from .facade import Outbox
from .relay import Relay, RelayOptions, RelayStats
from .send import send
from .tables import StubStatus, message_log, message_processed, message_stub, metadata

__all__ = [
    "BodyNotSerializableError", "ClaimedStub", "InvalidMessageError", "NoTransactionError",
    "Outbox", "OutboxError", "Relay", "RelayOptions", "RelayStats", "StubStatus", "claim_stubs",
    "create_database_engine", "database_engine", "message_log", "message_processed",
    "message_stub", "metadata", "send",
]
