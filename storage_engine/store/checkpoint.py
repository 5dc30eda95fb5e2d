"""``Checkpoint``: the 4 KiB ``checkpoint`` file of flush timestamps (layout in
``formats.checkpoint_layout``).

Fields and who advances them (reference §5.1):

- ``log_flushed_timestamp_ms``: store time of the newest record known durable in the commit log,
  set by the commit-log flush service after each flush;
- ``queue_flushed_timestamp_ms``: store time of the newest record whose consume-queue unit is
  known durable, set after each thorough consume-queue flush;
- ``key_index_flushed_timestamp_ms``: end time of the newest key-index file flushed whole (when it
  filled, or at a clean close);
- ``confirm_position``: the commit log's flushed position; ``master_flushed_position`` stays 0
  until replication exists.

Recovery after an unclean stop starts from ``min(log, queue) - 3 s``: every record stored before
that is durable in the log and in the consume queues. Written in place with ``pwrite`` +
``fdatasync`` (one page; the meaningful 40 bytes sit in one sector). A missing, short or
implausible page (a timestamp beyond the newest record, a negative field) reads as all zeros,
which recovery treats as "no safe point" and answers with a full re-dispatch.

Thread-safety: ``update`` and ``persist`` may be called from any thread (one lock).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from ..errors import StorageIOError
from ..formats import (
    CHECKPOINT_FILE_SIZE_BYTES,
    CheckpointState,
    decode_checkpoint,
    encode_checkpoint,
)

log = logging.getLogger(__name__)

CHECKPOINT_FILE_NAME = "checkpoint"


class Checkpoint:
    """The store's checkpoint file."""

    def __init__(self, root_dir: Path) -> None:
        self.path = root_dir / CHECKPOINT_FILE_NAME
        self.state = CheckpointState()
        self._persisted: CheckpointState | None = None  # what the file holds (None: unknown)
        self._lock = threading.Lock()

    def load(self) -> CheckpointState:
        """Read the file (zeros when absent or short)."""
        try:
            page = self.path.read_bytes()
        except FileNotFoundError:
            page = b""
        if 0 < len(page) < CHECKPOINT_FILE_SIZE_BYTES:
            log.warning("[checkpoint] %s is %d bytes, expected %d: ignored", self.path,
                        len(page), CHECKPOINT_FILE_SIZE_BYTES)
        whole = len(page) >= CHECKPOINT_FILE_SIZE_BYTES
        self.state = decode_checkpoint(page) if whole else CheckpointState()
        self._persisted = self.state if whole else None  # None: the next persist writes
        return self.state

    def update(self, **fields: int) -> None:
        """Change some fields in memory (``persist`` writes them)."""
        with self._lock:
            self.state = self.state._replace(**fields)

    def persist(self) -> bool:
        """Write the in-memory state durably if it changed; returns whether it wrote."""
        with self._lock:
            state = self.state
            if state == self._persisted:
                return False
            self.write(state)
            return True

    def write(self, state: CheckpointState) -> None:
        """Persist ``state`` durably (the caller holds no lock or the checkpoint's own)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, encode_checkpoint(state), 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            raise StorageIOError(f"cannot write checkpoint {self.path}: {error}",
                                 path=str(self.path)) from error
        self.state = self._persisted = state


def plausible(state: CheckpointState, newest_store_timestamp_ms: int) -> bool:
    """Whether a checkpoint read from disk can be trusted by recovery.

    A flush timestamp can never be newer than the newest record in the log, nor negative; a page
    that says otherwise was garbled and must not narrow recovery.
    """
    timestamps = (state.log_flushed_timestamp_ms, state.queue_flushed_timestamp_ms,
                  state.key_index_flushed_timestamp_ms)
    if any(value < 0 for value in state):
        return False
    return all(value <= newest_store_timestamp_ms for value in timestamps)
