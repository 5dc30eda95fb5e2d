"""Transactional outbox: the stub table written in the caller's transaction, the
relay that publishes stubs to the broker, the resend rule, alerts and cleanup run by
``OutboxWorker`` (as Celery tasks through ``outbox.celery_app``), and the schema they share.

    from postbox import outbox
    box = outbox.Outbox(app)                       # engine + relay, started with the app
    with box.session.begin() as session:
        session.add(order)
        message_id = outbox.send(session, "orders", {"order": 1}, tags="created")
    # asyncio: box = outbox.Outbox(app, async_engine=outbox.create_async_database_engine(url))
    async with box.async_session.begin() as session:
        message_id = await outbox.send(session, "orders", {"order": 1})

May import the public API of ``framework``; never ``idempotency`` or ``storage_engine``.
"""

from .alerts import Alert, Alerter, AlertKind, AlertSettings
from .async_database import async_database_url, create_async_database_engine
from .claims import ClaimedStub, claim_stubs
from .cleanup import CleanupPolicy, CleanupReport, run_cleanup
from .database import create_database_engine, database_engine
from .errors import (
    BodyNotSerializableError,
    DatabaseDriverError,
    InvalidMessageError,
    MissingTablesError,
    NoTransactionError,
    OutboxError,
)
from .facade import Outbox
from .options import RelayOptions, ResendRules
from .relay import Relay, RelayStats
from .resend import Resender, ResendReport
from .send import send
from .tables import (
    StubStatus,
    message_log,
    message_processed,
    message_resend,
    message_stub,
    metadata,
    outbox_task,
)
from .worker import OutboxWorker, TaskSchedule

__all__ = [
    "Alert", "AlertKind", "AlertSettings", "Alerter", "BodyNotSerializableError", "ClaimedStub",
    "CleanupPolicy", "CleanupReport", "DatabaseDriverError", "InvalidMessageError",
    "MissingTablesError", "NoTransactionError", "Outbox",
    "OutboxError", "OutboxWorker", "Relay", "RelayOptions", "RelayStats", "ResendReport",
    "ResendRules", "Resender", "StubStatus", "TaskSchedule", "async_database_url",
    "claim_stubs", "create_async_database_engine", "create_database_engine", "database_engine",
    "message_log", "message_processed", "message_resend", "message_stub", "metadata",
    "outbox_task", "run_cleanup", "send",
]
