"""``DiskGuard``: back-pressure at the disk's high watermark.

Writes are refused with ``DiskFullError`` (naming ``retention.disk_space_warning_level_ratio``)
*before* the partition holding the store passes the warning level: every put asks ``admit``,
which measures the disk again when ``retention.disk_check_interval_ms`` (100 ms) passed or
``retention.disk_check_bytes`` (1 MiB) were admitted since the last measurement, and whenever
the put will create a commit-log segment. When the probe reports sizes (the real one does), the
refusal is a projection: the usage measured, plus the bytes admitted since, plus this put and
the segment it may create, must stay at or below the level. A measurement is one ``statvfs``
call (a few microseconds). The retention service measures through the same guard on its own
schedule, and a refused put measures again (at most every interval), so writes resume as soon
as space is freed.

``read_only_reason`` is set when the store opened on a disk too full to write even its
``abort`` marker: every put is refused with that reason until ``writable`` succeeds in writing
it (the store calls it before each put while the reason is set).

The probe is injectable: a callable taking the store root and returning a ``DiskUsage`` or a
plain used fraction (tests; no projection then).

Thread-safety: ``admit`` runs under no lock; the counters it updates are advisory (a race costs
at most one extra measurement or one put's bytes in the projection). What survives a crash:
nothing; the state is measured again at open.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ..clock import Clock
from ..config import RetentionConfig
from ..errors import DiskFullError

log = logging.getLogger(__name__)

SETTING = "retention.disk_space_warning_level_ratio"


class DiskUsage(NamedTuple):
    """Used and still available bytes of a partition (blocks reserved for root excluded)."""

    used_bytes: int
    available_bytes: int

    @property
    def total_bytes(self) -> int:
        """Used + available (what ``df`` shows as the size an unprivileged writer has)."""
        return self.used_bytes + self.available_bytes

    @property
    def ratio(self) -> float:
        """``ceil(used * 100 / (used + available)) / 100``: RocketMQ 5's formula, ``df``'s Use%."""
        total = self.total_bytes
        return 0.0 if total <= 0 else math.ceil(self.used_bytes * 100 / total) / 100


DiskUsageProbe = Callable[[Path], "DiskUsage | float"]
"""Usage of the partition holding a path: a ``DiskUsage``, or a used fraction (0.0–1.0)."""


def disk_usage(path: Path) -> DiskUsage:
    """``DiskUsage`` of the partition holding ``path`` (one ``statvfs``)."""
    stats = os.statvfs(path)
    return DiskUsage((stats.f_blocks - stats.f_bfree) * stats.f_frsize,
                     stats.f_bavail * stats.f_frsize)


class DiskGuard:
    """Measures the disk and admits or refuses writes."""

    def __init__(self, root_dir: Path, config: RetentionConfig, clock: Clock,
                 probe: DiskUsageProbe = disk_usage) -> None:
        self._root_dir = root_dir
        self._config = config
        self._clock = clock
        self._probe = probe
        self._level = config.disk_space_warning_level_ratio / 100
        self._checked_ms: int | None = None
        self._admitted_bytes = 0  # since the last measurement
        self._usage: DiskUsage | None = None
        self.used_ratio = 0.0
        self.full = False
        self.read_only_reason: str | None = None
        self.refused_count = 0
        self.last_refusal: str | None = None  # why the latest refused write was refused

    def check(self, now_ms: int | None = None) -> float:
        """Measure the disk now; update and return the used fraction."""
        measured = self._probe(self._root_dir)
        if isinstance(measured, DiskUsage):
            self._usage, ratio = measured, measured.ratio
        else:
            self._usage, ratio = None, float(measured)
        self._checked_ms = self._clock.now_ms() if now_ms is None else now_ms
        self._admitted_bytes = 0
        self.used_ratio = ratio
        full = ratio > self._level
        if full != self.full:
            if full:
                log.error("[disk] %.0f%% used, above the %d%% of %s: writes refused until "
                          "space is freed", ratio * 100,
                          self._config.disk_space_warning_level_ratio, SETTING)
            else:
                log.warning("[disk] %.0f%% used: writes accepted again", ratio * 100)
        self.full = full
        return ratio

    def admit(self, size_bytes: int, new_segment_bytes: int = 0) -> None:
        """Let a write of ``size_bytes`` (creating a segment of ``new_segment_bytes``) through,
        or refuse it.

        Raises:
            DiskFullError: the disk is at (or the write would take it past) the warning level,
                or the store is read-only because its disk was full at open.
        """
        if self.read_only_reason is not None:
            raise self._refuse(self.read_only_reason)
        now_ms = self._clock.now_ms()
        self._admitted_bytes += size_bytes
        if (new_segment_bytes or self._checked_ms is None
                or self._admitted_bytes >= self._config.disk_check_bytes
                or now_ms - self._checked_ms >= self._config.disk_check_interval_ms):
            self._admitted_bytes -= size_bytes
            self.check(now_ms)
            self._admitted_bytes += size_bytes
        projected = self._projected_ratio(new_segment_bytes)
        if self.full or projected > self._level:
            self._admitted_bytes -= size_bytes
            raise self._refuse(self._refusal(projected))

    def _refuse(self, reason: str) -> DiskFullError:
        """Count a refused write and remember why; the error to raise."""
        self.refused_count += 1
        self.last_refusal = reason
        return DiskFullError(reason, path=str(self._root_dir), used_ratio=self.used_ratio)

    def _projected_ratio(self, new_segment_bytes: int) -> float:
        usage = self._usage
        if usage is None or usage.total_bytes <= 0:
            return self.used_ratio
        return (usage.used_bytes + self._admitted_bytes + new_segment_bytes) / usage.total_bytes

    def _refusal(self, projected: float) -> str:
        level = self._config.disk_space_warning_level_ratio
        what = (f"disk {self.used_ratio:.0%} used" if self.full
                else f"disk {self.used_ratio:.0%} used and this write would take it to "
                     f"{projected:.1%}")
        return (f"store {self._root_dir}: {what}, above {SETTING} ({level}%, broker.conf "
                "diskSpaceWarningLevelRatio): write refused, nothing stored. Writes resume "
                "once space is freed (consumed segments are deleted under pressure; reads keep "
                "working); free disk space, or raise the setting")

    def set_read_only(self, reason: str) -> None:
        """Refuse every write with ``reason`` (the disk was too full to open writable)."""
        log.error("[disk] store opened read-only: %s", reason)
        self.read_only_reason = reason

    def clear_read_only(self) -> None:
        """Accept writes again (the reason went away); the disk is measured again."""
        if self.read_only_reason is not None:
            log.warning("[disk] store %s is writable again", self._root_dir)
            self.read_only_reason = None
            self.check()


__all__ = ["DiskGuard", "DiskUsage", "DiskUsageProbe", "disk_usage"]
