"""Ask the kernel which pages of a file are not yet on disk (``cachestat(2)``, Linux 6.5+).

A page the kernel counts as dirty or under writeback is exactly what a power cut at this instant
could lose. So "after X returned, no page of file F is dirty" is a direct, mock-free check that X
made F durable — it catches a flush that silently did nothing, which a check of the store's own
bookkeeping (``flushed_position``) cannot. The kernel may write pages back on its own at any time
(after ``vm.dirty_expire_centisecs``, 30 s by default), which can only hide a missing flush, never
invent one; the tests using this finish within milliseconds of the writes they check.

``available()`` is False on other systems and older kernels; tests then skip.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from functools import cache
from pathlib import Path

_SYSCALL_CACHESTAT = 451  # the same number on every architecture using the generic table


class _Range(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint64), ("length", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [("nr_cache", ctypes.c_uint64), ("nr_dirty", ctypes.c_uint64),
                ("nr_writeback", ctypes.c_uint64), ("nr_evicted", ctypes.c_uint64),
                ("nr_recently_evicted", ctypes.c_uint64)]


def unsynced_pages(path: Path, offset: int = 0, length: int = 0) -> int:
    """Pages of ``path`` in [offset, offset + length) (0: to the end) not yet on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        stat = _Stat()
        result = _libc().syscall(_SYSCALL_CACHESTAT, fd, ctypes.byref(_Range(offset, length)),
                                 ctypes.byref(stat), 0)
        if result != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"cachestat({path}): {os.strerror(error)}")
        return stat.nr_dirty + stat.nr_writeback
    finally:
        os.close(fd)


def unsynced_files(root: Path, ignore: frozenset[str] = frozenset()) -> dict[str, int]:
    """Every file under ``root`` (relative name) with pages not yet on disk, and how many."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_file() and name not in ignore:
            pages = unsynced_pages(path)
            if pages:
                found[name] = pages
    return found


@cache
def available() -> bool:
    """Whether ``cachestat`` works here."""
    if platform.system() != "Linux":
        return False
    try:
        unsynced_pages(Path(__file__))
    except OSError as error:
        if error.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            return False
        raise
    return True


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)
