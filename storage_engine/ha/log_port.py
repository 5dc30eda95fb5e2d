"""What replication needs of the commit log, stated as protocols.

``ha`` reads the master's log (segments by position, its bounds) and appends to a slave's
(``append_replicated``, the newest store time) through ``ReplicatedLog``, which the store's
``CommitLog`` implements; so ``ha`` imports nothing of ``store`` and the dependency runs one way:
the store imports ``ha``, the replication it owns (``.importlinter``). Pure: types only.
"""

from __future__ import annotations

import mmap
from typing import Protocol

from ..config import CommitLogConfig


class LogSegment(Protocol):
    """One mapped segment file: where it starts, how far it is written, its bytes."""

    base_position: int
    written_position: int
    buffer: mmap.mmap


class LogSegments(Protocol):
    """The log's segment files, found by log position."""

    def find(self, position: int) -> LogSegment | None:
        """The segment holding ``position``, or None."""
        ...

    def truncate(self, position: int) -> int:
        """Cut the log at ``position``; the bytes removed."""
        ...


class ReplicatedLog(Protocol):
    """The commit log as replication reads and appends it."""

    last_store_timestamp_ms: int

    @property
    def config(self) -> CommitLogConfig:
        """The log's configuration (its segment size)."""
        ...

    @property
    def segments(self) -> LogSegments:
        """The segment files."""
        ...

    @property
    def min_position(self) -> int:
        """The first position still in the log."""
        ...

    @property
    def max_position(self) -> int:
        """The position after the last byte written."""
        ...

    def append_replicated(self, position: int, data: bytes | memoryview) -> int:
        """Append bytes the master sent at ``position``; the new end."""
        ...
