"""``CommitHook``: hands a relay the ids of the stubs a transaction wrote once that transaction
has committed — never before, and never those of a transaction or savepoint that rolled back.

``attach()`` sets an execution option on the engine that names the hook; ``outbox.send`` then
calls ``written(connection, message_id)`` after its insert. What happens to the id follows the
connection's transaction, through SQLAlchemy's engine events (so a ``Session`` and a plain
``Connection`` are served alike; a ``Session`` runs its transactions on one):

- ``savepoint`` / ``release_savepoint`` / ``rollback_savepoint``: ids written since a savepoint
  are dropped when it rolls back, kept when it is released (savepoints are matched by nesting:
  SQLAlchemy ends them innermost first);
- ``rollback``: every id of the transaction is dropped;
- ``commit``: fires just *before* the database commits, so the ids are only staged;
- the hand-off, after the commit has succeeded: the connection's return to the pool
  (``checkin``, right after the commit for ``engine.begin()`` and ``Session.begin()``), or the
  start of its next transaction (``begin``), whichever comes first. A commit that fails is
  followed by a rollback (or by ``handle_error``) before either, which drops the staged ids.

A ``Session`` joined to an outer transaction is covered too: nothing is handed over until the
outer connection really commits. A connection left idle after committing hands its ids over
when it is closed or used again; until then, and for everything the hook never saw (the
process died between commit and hand-off, another process or engine wrote the stub, the
connection was invalidated and its state lost), the relay's polling pass finds the stub.

State lives in each pooled connection's ``info`` dict: only the thread holding the connection
touches it, so the hook needs no lock. ``deliver`` is called from that thread and must be
quick (the relay's ``notify`` appends to a bounded queue). Nothing here survives a crash, by
design: the stub row is the record, the hook only saves the relay a polling interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, event

from .send import RELAY_EXECUTION_OPTION


@dataclass(slots=True)
class _Writes:
    """The stub ids of one connection's transaction, in the order they were written."""

    pending: list[str] = field(default_factory=list)
    savepoints: list[int] = field(default_factory=list)
    """``len(pending)`` when each open savepoint was taken, innermost last."""
    committed: list[str] = field(default_factory=list)
    """Staged by the commit event, handed over once the commit is known to have succeeded."""


class CommitHook:
    """Calls ``deliver(ids)`` with the stub ids each committed transaction on ``engine`` wrote.

    Args:
        engine: the engine ``outbox.send`` writes through.
        deliver: receives the ids, in the committing thread, after the commit.
    """

    def __init__(self, engine: Engine, deliver: Callable[[list[str]], None]) -> None:
        self.engine = engine
        self._deliver = deliver
        self._key = f"postbox.outbox.writes.{id(self):x}"
        self._attached = False
        self._listeners: dict[str, Callable[..., None]] = {
            "begin": self._on_begin, "commit": self._on_commit,
            "rollback": self._on_rollback, "savepoint": self._on_savepoint,
            "rollback_savepoint": self._on_rollback_savepoint,
            "release_savepoint": self._on_release_savepoint,
            "handle_error": self._on_error, "checkin": self._on_checkin}

    @property
    def attached(self) -> bool:
        """Whether the hook is listening on its engine."""
        return self._attached

    def attach(self) -> None:
        """Listen on the engine and have ``outbox.send`` report to this hook."""
        if self._attached:
            return
        for name, listener in self._listeners.items():
            event.listen(self.engine, name, listener)
        self.engine.update_execution_options(**{RELAY_EXECUTION_OPTION: self})
        self._attached = True

    def detach(self) -> None:
        """Stop listening; ids written but not handed over are left to the polling pass."""
        if not self._attached:
            return
        self.engine.update_execution_options(**{RELAY_EXECUTION_OPTION: None})
        for name, listener in self._listeners.items():
            event.remove(self.engine, name, listener)
        self._attached = False

    def written(self, connection: Connection, message_id: str) -> None:
        """Record that ``connection``'s current transaction inserted the stub ``message_id``."""
        self._writes_of(connection).pending.append(message_id)

    # ---- the connection's transaction --------------------------------------------------------

    def _writes(self, connection: Connection) -> _Writes | None:
        if connection.invalidated:
            # the DBAPI connection was lost (the database went away) and its transaction with
            # it: so are the ids it recorded (the pool clears ``info`` when it connects again).
            # Reading ``info`` now would raise PendingRollbackError from the rollback listener,
            # over the error that caused the rollback
            return None
        return connection.info.get(self._key)

    def _writes_of(self, connection: Connection) -> _Writes:
        writes = connection.info.get(self._key)
        if writes is None:
            writes = connection.info[self._key] = _Writes()
        return writes

    def _on_savepoint(self, connection: Connection, _name: str | None) -> None:
        # SQLAlchemy names the savepoint only after this event: they are matched by nesting
        # (savepoints end innermost first), so every one is tracked, even with nothing written
        writes = self._writes_of(connection)
        writes.savepoints.append(len(writes.pending))

    def _on_release_savepoint(self, connection: Connection, _name: str, _context: Any) -> None:
        writes = self._writes(connection)
        if writes is not None and writes.savepoints:
            writes.savepoints.pop()

    def _on_rollback_savepoint(self, connection: Connection, _name: str, _context: Any) -> None:
        writes = self._writes(connection)
        if writes is not None and writes.savepoints:
            del writes.pending[writes.savepoints.pop():]

    def _on_rollback(self, connection: Connection) -> None:
        writes = self._writes(connection)
        if writes is not None:
            writes.pending.clear()
            writes.savepoints.clear()
            writes.committed.clear()

    def _on_commit(self, connection: Connection) -> None:
        writes = self._writes(connection)
        if writes is not None and writes.pending:
            writes.committed.extend(writes.pending)
            writes.pending.clear()
        if writes is not None:
            writes.savepoints.clear()

    def _on_error(self, context: Any) -> None:
        """A failed statement or commit: staged ids may not have committed; the poll decides."""
        connection = context.connection
        writes = self._writes(connection) if connection is not None else None
        if writes is not None:
            writes.committed.clear()

    # ---- the hand-off ------------------------------------------------------------------------

    def _on_begin(self, connection: Connection) -> None:
        self._hand_off(connection.info)

    def _on_checkin(self, _dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            self._hand_off(record.info)

    def _hand_off(self, info: dict) -> None:
        writes = info.get(self._key)
        if writes is None or not writes.committed:
            return
        ids, writes.committed = writes.committed, []
        self._deliver(ids)


__all__ = ["CommitHook"]
