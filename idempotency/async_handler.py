"""The handler transaction of an ``idempotent=True`` ``async def`` handler, on an ``AsyncSession``.

``IdempotencyMiddleware`` keeps one decision flow for both kinds of handler (its module
docstring). Steps 1 and 2 — the receipt row and the Redis ``SET NX`` admission, and the
duplicate check when the mark is held — are blocking calls and stay in the consume thread
(``around_consume``). Step 3 runs on the consumer's event loop, in ``around_consume_async``:

    async with AsyncSession(engine) as session, session.begin():
        claimed = ledger.claim_message(...)   # the sync path's statements, via run_sync
        if claimed:
            await handler(message, session, ...)
            await session.flush()
    # commit: the stub's confirmation, the log row's deletion, the processed row and the
    # handler's effect become visible together, or none of them

``ledger.claim_message`` is the very function the sync path runs: ``AsyncConnection.run_sync``
hands it the sync face of the async connection, so the statements are built once and the
driver's I/O is awaited on the loop. How it ended (``Step3``) is left in ``context.state`` for
the consume thread, which settles the Redis mark (blocking) and counts it.

Errors: a failure of the claim or of the commit is a database error: it propagates as
``RetryLater`` (nothing of the transaction is visible; a commit whose fate is unknown is safe,
the retry finds the processed row). The handler's own exception, or a failed flush of what it
added, rolls everything back and propagates unchanged, so the framework retries or
dead-letters the message as the handler asked.

Engines: pooled asyncpg/aiomysql connections belong to the loop that opened them, and a
consumer's loop ends with the consumer (a restarted consumer has a new one). ``LoopEngines``
therefore keeps one ``AsyncEngine`` per running loop, made on the loop's first idempotent
message, and disposes it *on that loop* when the loop shuts down: an async generator parked on
the loop is closed by ``loop.shutdown_asyncgens()``, which the consumer's loop (and
``asyncio.run``) calls before closing, and its ``finally`` awaits ``engine.dispose()``. An
engine given explicitly is used on every loop as it is, and stays the caller's to dispose.
Thread safety: ``LoopEngines.get`` runs on loops; its map is guarded by a lock.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from postbox.framework import ConsumeContext, RetryLater
from postbox.outbox.async_database import create_async_database_engine

from . import ledger

STEP3_STATE = "postbox.idempotency.async_step3"
"""``ConsumeContext.state`` key of the ``Step3`` outcome ``run_step3`` leaves for the thread."""


class Step3(enum.Enum):
    """How the async handler transaction ended."""

    PROCESSED = "processed"
    """The handler ran and its transaction committed."""
    DUPLICATE = "duplicate"
    """The processed row was there: the handler did not run; the log row's deletion committed."""
    FAILED = "failed"
    """The handler (or the flush of its rows) failed: everything rolled back."""
    DATABASE_ERROR = "database error"
    """The claim or the commit failed: nothing is known to have committed."""


class LoopEngines:
    """One ``AsyncEngine`` per running event loop, disposed on that loop as it shuts down.

    Args:
        url: the database (a sync or an async URL, see ``outbox.async_database``).
        engine: an engine to use on every loop instead (the caller disposes it).
        engine_options: passed to ``create_async_database_engine``.
    """

    def __init__(self, url: str | URL | None = None, *, engine: AsyncEngine | None = None,
                 **engine_options: Any) -> None:
        if (url is None) == (engine is None):
            raise ValueError("LoopEngines needs exactly one of url= and engine=")
        self._url = url
        self._fixed = engine
        self._options = engine_options
        self._engines: dict[asyncio.AbstractEventLoop, AsyncEngine] = {}
        self._keepers: dict[asyncio.AbstractEventLoop, AsyncIterator[None]] = {}
        self._lock = threading.Lock()

    async def get(self) -> AsyncEngine:
        """The engine of the running loop (made on first use)."""
        if self._fixed is not None:
            return self._fixed
        loop = asyncio.get_running_loop()
        with self._lock:
            engine = self._engines.get(loop)
            if engine is not None:
                return engine
            assert self._url is not None
            engine = self._engines[loop] = create_async_database_engine(self._url,
                                                                        **self._options)
            keeper = self._keepers[loop] = self._dispose_at_shutdown(loop, engine)
        await anext(keeper)  # parked on the loop: shutdown_asyncgens closes it
        return engine

    async def _dispose_at_shutdown(self, loop: asyncio.AbstractEventLoop,
                                   engine: AsyncEngine) -> AsyncIterator[None]:
        try:
            yield
        finally:
            with self._lock:
                self._engines.pop(loop, None)
                self._keepers.pop(loop, None)
            await engine.dispose()

    def __len__(self) -> int:
        """Engines alive (one per loop that has not shut down)."""
        with self._lock:
            return len(self._engines)


async def run_step3(context: ConsumeContext, call_next: Callable[[], Awaitable[Any]],
                    engine: AsyncEngine, dialect: str, now: datetime,
                    retry_delay_level: int | None) -> Any:
    """Step 3 for an async handler (module docstring); leaves a ``Step3`` in
    ``context.state[STEP3_STATE]`` and returns what ``call_next`` returned."""
    group, message = context.consumer_group, context.message
    result: Any = None
    context.state[STEP3_STATE] = Step3.DATABASE_ERROR
    try:
        async with AsyncSession(engine, expire_on_commit=False) as session, session.begin():
            connection = await session.connection()
            claimed = await connection.run_sync(ledger.claim_message, dialect, group, message,
                                                now)
            if claimed:
                context.state[STEP3_STATE] = Step3.FAILED
                context.handler_args = [session, *context.handler_args]
                result = await call_next()
                await session.flush()  # the handler's pending rows: its failure if they fail
                context.state[STEP3_STATE] = Step3.DATABASE_ERROR  # the commit is next
    except SQLAlchemyError as error:
        if context.state[STEP3_STATE] is Step3.FAILED:
            raise  # the handler's own database error (or its flush): a handler failure
        raise RetryLater(retry_delay_level, reason=f"database unavailable while processing "
                         f"the message: {type(error).__name__}") from error
    context.state[STEP3_STATE] = Step3.PROCESSED if claimed else Step3.DUPLICATE
    return result


__all__ = ["STEP3_STATE", "LoopEngines", "Step3", "run_step3"]
