"""A simulated power loss for a store open in this process: keep what was flushed, tear the rest.

A real power cut cannot be produced in a test; what it leaves on disk can. Every byte the store
made durable (fdatasync returned) stays. Of the bytes written since, only part reached the disk:
the kernel writes dirty 4 KiB pages back in no particular order, and a page being written when
the power went can be torn. So after ``cut_power`` (stop the store's threads and release its files
without closing: no final flush, ``abort`` stays), ``tear`` rewrites every region that was not
durable as: a prefix kept as written up to a random 512-byte sector boundary (so possibly cut
mid-record: sectors are the most a disk writes atomically), then per 4 KiB page — kept as
written, reverted to its durable content, torn (each sector kept or reverted), or garbage.

Where durability ends comes from the store's own bookkeeping, read after its threads stopped:

- commit-log segments and consume-queue files: ``MappedSegment.flushed_position``; the dirty
  region runs to ``written_position``. Its durable content is zeros: files are preallocated with
  zeros and written front to back.
- key-index files: all but the newest were flushed whole when they filled or at the last open.
  The newest is dirty where it differs from ``IndexSnapshot`` (its bytes right after the last open,
  which flushed it; zeros for a file created later); those pages revert to the snapshot.
- ``checkpoint``: written with pwrite + fdatasync, kept as is. ``abort``, ``lock``, ``layout``:
  kept.

The bookkeeping is trusted here: a flush that updates ``flushed_position`` without syncing would
go unnoticed. ``page_cache.py`` checks that side with the kernel's own dirty-page counts.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from postbox.storage_engine import MessageStore

PAGE_SIZE_BYTES = 4096
SECTOR_BYTES = 512  # the unit a disk writes atomically (at best)
PAGE_FATES = ("kept", "reverted", "torn", "garbage")
PAGE_FATE_WEIGHTS = (3, 3, 2, 1)


class Dirty(NamedTuple):
    """Bytes of one file not known durable: [start, end); ``durable`` is the file's durable
    content (None: zeros from ``start``); ``in_order`` when written front to back."""

    path: Path
    start: int
    end: int
    durable: bytes | None
    in_order: bool


class IndexSnapshot(NamedTuple):
    """The newest key-index file right after an open flushed it."""

    path: Path | None
    content: bytes

    @classmethod
    def take(cls, store: MessageStore) -> IndexSnapshot:
        """Call right after ``MessageStore.open`` returned."""
        files = store.key_index.files
        if not files:
            return cls(None, b"")
        return cls(files[-1].path, bytes(files[-1].file.buffer))


def cut_power(store: MessageStore, snapshot: IndexSnapshot) -> list[Dirty]:
    """Crash the store in place: stop its threads, note what is not durable, release the files.

    Nothing is flushed on the way (``_release_files`` flushes the commit log, but the regions
    were noted before and ``tear`` overwrites them).
    """
    for service in reversed(store._services):
        service.stop()
    dirty = list(_segment_regions(store.commit_log.segments.segments))
    for queue in list(store.queues.queues.values()):
        dirty.extend(_segment_regions(queue.segments.segments))
    files = store.key_index.files
    if files:
        newest = files[-1]
        durable = snapshot.content if snapshot.path == newest.path else None
        dirty.append(Dirty(newest.path, 0, newest.file.size_bytes, durable, in_order=False))
    store._release_files()
    store._closed = True
    return dirty


def _segment_regions(segments: Iterable) -> Iterable[Dirty]:
    for segment in segments:
        if segment.flushed_position < segment.written_position:
            yield Dirty(segment.path, segment.flushed_position, segment.written_position, None,
                        in_order=True)


def tear(dirty: list[Dirty], rng: random.Random) -> list[str]:
    """Rewrite every dirty region as a power cut could have left it; returns what it did."""
    report = []
    for region in dirty:
        if not region.path.exists():
            continue
        with region.path.open("r+b") as handle:
            data = bytearray(handle.read())
            fates = _tear_region(data, region, rng)
            handle.seek(0)
            handle.write(data)
        if fates:
            report.append(f"{region.path.parent.name}/{region.path.name} "
                          f"[{region.start}, {region.end}): {' '.join(fates)}")
    return report


def _tear_region(data: bytearray, region: Dirty, rng: random.Random) -> list[str]:
    """Tear ``data`` in place; returns the fate of each page touched."""
    durable = region.durable if region.durable is not None else bytes(len(data))
    cut = region.start
    if region.in_order:  # everything before a random sector boundary reached the disk
        cut = max(region.start, _round_down(rng.randint(region.start, region.end), SECTOR_BYTES))
    fates = [f"cut@{cut}"] if region.in_order else []
    page_start = _round_down(cut, PAGE_SIZE_BYTES)
    while page_start < region.end:
        low = max(page_start, cut)
        high = min(page_start + PAGE_SIZE_BYTES, len(data))
        page_start += PAGE_SIZE_BYTES
        if low >= high or data[low:high] == durable[low:high]:
            continue  # nothing changed since the last flush: the disk has it
        fate = rng.choices(PAGE_FATES, PAGE_FATE_WEIGHTS)[0]
        fates.append(f"{low // PAGE_SIZE_BYTES}:{fate}")
        if fate == "reverted":
            data[low:high] = durable[low:high]
        elif fate == "garbage":
            data[low:high] = rng.randbytes(high - low)
        elif fate == "torn":  # each sector made it, or did not
            for sector in range(_round_down(low, SECTOR_BYTES), high, SECTOR_BYTES):
                if rng.random() < 0.5:
                    start = max(sector, low)
                    data[start:sector + SECTOR_BYTES] = durable[start:sector + SECTOR_BYTES]
    return fates


def _round_down(value: int, unit: int) -> int:
    return value - value % unit
