"""``Checkpoint``: the 4 KiB ``checkpoint`` file of flush timestamps (layout in
``formats.checkpoint_layout``).

Written in place with ``pwrite`` + ``fdatasync`` (a single page; the meaningful 40 bytes sit in
one sector). A missing or short file reads as all zeros, which recovery treats as "no safe point".
Not thread-safe: owned by the store, updated by its flush paths one at a time.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import StorageIOError
from .formats import (
    CHECKPOINT_FILE_SIZE_BYTES,
    CheckpointState,
    decode_checkpoint,
    encode_checkpoint,
)

CHECKPOINT_FILE_NAME = "checkpoint"


class Checkpoint:
    """The store's checkpoint file."""

    def __init__(self, root_dir: Path) -> None:
        self.path = root_dir / CHECKPOINT_FILE_NAME
        self.state = CheckpointState()

    def load(self) -> CheckpointState:
        """Read the file (zeros when absent)."""
        try:
            page = self.path.read_bytes()
        except FileNotFoundError:
            page = b""
        self.state = decode_checkpoint(page) if len(page) >= 40 else CheckpointState()
        return self.state

    def write(self, state: CheckpointState) -> None:
        """Persist ``state`` durably."""
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
        self.state = state


assert CHECKPOINT_FILE_SIZE_BYTES == 4096
