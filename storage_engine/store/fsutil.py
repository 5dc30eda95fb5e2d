"""File-system helpers: the store lock, preallocation, atomic replace, directory fsync.

The ``lock`` file holds the 4 ASCII bytes ``lock`` (as RocketMQ writes it). Ownership is an
exclusive ``flock`` (which also excludes a second opener inside the same process) plus a POSIX
record lock on byte 0 (the lock a Java broker takes, so a RocketMQ broker and Postbox exclude each
other too). Locks die with the process, so a crash never leaves the store locked.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from ..errors import DiskFullError, StorageIOError, StoreLockedError

LOCK_FILE_NAME = "lock"
_LOCK_CONTENT = b"lock"


class StoreLock:
    """Exclusive ownership of a store directory."""

    def __init__(self, root_dir: Path) -> None:
        self.path = root_dir / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ``StoreLockedError`` naming the path."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreLockedError(
                    f"store {self.path.parent} is already open in another process or store "
                    f"object (lock file {self.path} is held)", path=str(self.path)) from error
            raise StorageIOError(f"cannot lock {self.path}: {error}",
                                 path=str(self.path)) from error
        if os.pread(fd, 4, 0) != _LOCK_CONTENT:
            os.pwrite(fd, _LOCK_CONTENT, 0)
            os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays, as RocketMQ leaves it)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases both locks
            self._fd = None


def preallocate(fd: int, size_bytes: int, path: Path) -> None:
    """Give a new file its full size with real blocks, so a full disk fails here, cleanly.

    A sparse file would let a later write through the mapping hit ENOSPC as SIGBUS, which kills
    the process; ``posix_fallocate`` reports it as an error instead.

    Raises:
        DiskFullError: the file system has no room for the file.
        StorageIOError: another file-system error.
    """
    try:
        os.posix_fallocate(fd, 0, size_bytes)
    except OSError as error:
        if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            os.ftruncate(fd, size_bytes)  # file system without fallocate (e.g. some tmpfs)
            return
        _raise_allocation_error(error, size_bytes, path, "create")


def allocate_range(fd: int, start: int, length: int, path: Path) -> None:
    """Give ``[start, start + length)`` of a (sparse) file real blocks; existing data stays.

    On a file system without ``fallocate`` nothing is reserved (writes still work; a full disk
    may then surface as SIGBUS, as it would with any sparse mapping).

    Raises:
        DiskFullError: the file system has no room for the blocks.
        StorageIOError: another file-system error.
    """
    try:
        os.posix_fallocate(fd, start, length)
    except OSError as error:
        if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            return
        _raise_allocation_error(error, length, path, "grow")


def _raise_allocation_error(error: OSError, size_bytes: int, path: Path, verb: str) -> None:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        raise DiskFullError(
            f"no space left on the disk holding {path}: cannot {verb} it by {size_bytes} bytes "
            f"({os.strerror(error.errno)}); writes are refused until space is freed (reads "
            "keep working). Free space, or lower retention.disk_space_warning_level_ratio "
            "(diskSpaceWarningLevelRatio) so writes stop before the disk fills",
            setting="retention.disk_space_warning_level_ratio", path=str(path)) from error
    raise StorageIOError(f"cannot allocate {size_bytes} bytes for {path}: {error}",
                         path=str(path)) from error


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync it, rename, fsync the directory."""
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(path.parent)
