"""``GroupCommitFile``: the bare group-commit harness, the baseline for the store's SYNC flush.

No store: producers append pre-built records to one preallocated file and each waits until a
single flusher thread has ``fdatasync``'ed past the end of its record. The flusher loops: take the
current end, ``fdatasync`` the file (outside the lock; it releases the GIL), publish the flushed
position, ``notify_all``. Every ``fdatasync`` covers whatever was appended while the previous one
ran, so with N producers one flush confirms up to N appends (group commit).

Two ways to write, as ``WriteMode``:

* ``MMAP``: slice assignment into an ``mmap`` of the file, then ``fdatasync`` on the fd (what
  ``storage_engine.store.segment.MappedSegment`` does: the like-for-like baseline for the store);
* ``PWRITE``: ``os.pwrite`` into the fd, then ``fdatasync``.

Layout: records are appended back to back from position 0; ``end_position`` is one past the last
appended byte, ``flushed_position`` one past the last byte a finished ``fdatasync`` covered
(``flushed_position <= end_position`` always). Thread-safety: ``append`` may be called from any
number of threads; appends are serialised by one lock, which the flusher holds only to read the
end and to publish. What survives a crash: bytes below ``flushed_position``. The file is the
caller's to delete.
"""

from __future__ import annotations

import enum
import mmap
import os
import threading
import time
from pathlib import Path

from bench.peers import BenchError

FLUSH_WAIT_MAX_S = 10.0  # an append waiting longer than this for its flush is a failure


class WriteMode(enum.Enum):
    """How a record gets into the file."""

    MMAP = "mmap + fdatasync"
    PWRITE = "pwrite + fdatasync"


class GroupCommitFile:
    """A preallocated file with serialised appends and one group-flushing thread."""

    def __init__(self, path: Path, size_bytes: int, mode: WriteMode) -> None:
        self.mode = mode
        self.size_bytes = size_bytes
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.posix_fallocate(self._fd, 0, size_bytes)
        self._map = mmap.mmap(self._fd, size_bytes) if mode is WriteMode.MMAP else None
        self._lock = threading.Lock()
        self._has_data = threading.Condition(self._lock)
        self._flushed = threading.Condition(self._lock)
        self.end_position = 0
        self.flushed_position = 0
        self.sync_count = 0
        self.sync_ns: list[int] = []  # duration of every fdatasync
        self.failure: BaseException | None = None
        self._stopping = False
        self._flusher = threading.Thread(target=self._flush_loop, name="bare-flusher")
        self._flusher.start()

    def append(self, record: bytes) -> None:
        """Write ``record`` at the end and return once a ``fdatasync`` covered it."""
        with self._lock:
            position = self.end_position
            end = position + len(record)
            if end > self.size_bytes:
                raise BenchError(f"bare harness file full: {end} > {self.size_bytes} bytes")
            if self._map is not None:
                self._map[position:end] = record
            else:
                os.pwrite(self._fd, record, position)
            self.end_position = end
            self._has_data.notify()
            deadline = time.monotonic() + FLUSH_WAIT_MAX_S
            while self.flushed_position < end:
                if self.failure is not None:
                    raise BenchError("bare harness flusher failed") from self.failure
                if not self._flushed.wait(deadline - time.monotonic()):
                    raise BenchError(f"bare harness: no flush past position={end} within "
                                     f"{FLUSH_WAIT_MAX_S} s (flushed={self.flushed_position})")

    def _flush_loop(self) -> None:
        try:
            while self._flush_once():
                pass
        except BaseException as error:  # handed to the waiting producers
            with self._lock:
                self.failure = error
                self._flushed.notify_all()

    def _flush_once(self) -> bool:
        """Wait for unflushed bytes, ``fdatasync`` once, publish; False when stopping."""
        with self._lock:
            while self.end_position == self.flushed_position and not self._stopping:
                self._has_data.wait()
            if self.end_position == self.flushed_position:
                return False
            target = self.end_position
        start_ns = time.perf_counter_ns()
        os.fdatasync(self._fd)
        self.sync_ns.append(time.perf_counter_ns() - start_ns)
        with self._lock:
            self.flushed_position = target
            self.sync_count += 1
            self._flushed.notify_all()
        return True

    def close(self) -> None:
        """Flush what is left, join the flusher, unmap and close the file."""
        with self._lock:
            self._stopping = True
            self._has_data.notify()
        self._flusher.join()
        if self._map is not None:
            self._map.close()
        os.close(self._fd)
