"""The asyncio side of ``outbox.send``: checks and execution for an ``AsyncSession`` or
``AsyncConnection``.

``outbox.send(async_session, ...)`` checks the transaction and the message at once (so bad input
raises before anything is awaited, with nothing written), then returns the coroutine that runs
the insert: ``run_sync_in_transaction`` hands the very statement and commit-hook report of the
sync path to the session's connection through ``AsyncConnection.run_sync`` — one code path for
both, the driver's I/O awaited on the caller's loop. The stub therefore commits or rolls back
with the caller's async transaction exactly as with a sync one, and a relay watching the async
engine's ``sync_engine`` (``Outbox(app, async_engine=...)``) gets the id after the commit.

Nothing here blocks the event loop; nothing here keeps state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from .errors import NoTransactionError

T = TypeVar("T")


def check_async_transaction(target: AsyncSession | AsyncConnection) -> None:
    """Raise ``NoTransactionError`` unless ``target`` has a transaction in progress."""
    if isinstance(target, AsyncSession):
        if not target.in_transaction():
            raise NoTransactionError("outbox.send needs an open transaction: use `async with "
                                     "session.begin():` (or async_sessionmaker.begin())")
    elif target.closed or not target.in_transaction():
        raise NoTransactionError("outbox.send needs an open transaction: use `async with "
                                 "engine.begin() as connection:`")


async def run_sync_in_transaction(target: AsyncSession | AsyncConnection,
                                  work: Callable[[Connection], T]) -> T:
    """``work(connection)`` on the sync face of ``target``'s connection, in its transaction."""
    connection = await target.connection() if isinstance(target, AsyncSession) else target
    return await connection.run_sync(work)


__all__ = ["check_async_transaction", "run_sync_in_transaction"]
