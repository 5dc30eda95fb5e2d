"""The seeded fault schedule and the injector that plays it.

``schedule(profile, seed, ...)`` draws every fault up front (printed before the run, so a seed
names one run): a ``kill9`` of a random producer, relay, consumer or broker every
``kill_every_s`` (restarted ``restart_s`` later), and, placed at random in the run, Redis
restarts, PostgreSQL restarts (``pg_ctl stop -m immediate``: a crash), broker outages (a clean
stop held longer than the relay's retry horizon, ``RULES.horizon()``) and full disks on the
broker (a filler file on its tmpfs past ``diskMaxUsedSpaceRatio``, the store's
``retention.disk_space_warning_level_ratio``, 90 %). Faults overlap.

``Injector.play`` runs the schedule: a piece is down while any fault holds it and is started
again when the last one ends (a kill of a piece already down only extends the hold). Each
fault records when it began and when it was repaired (the piece answered again); ``figures``
turns that into recovery times.
"""

from __future__ import annotations

import heapq
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.soak.tables import RULES

log = logging.getLogger("soak")


@dataclass(frozen=True)
class Profile:
    """How long and how hard."""

    name: str
    duration_s: float
    rate_per_producer: float
    kill_every_s: tuple[float, float] = (4.0, 8.0)
    restart_s: tuple[float, float] = (1.0, 3.0)
    restarts: int = 2
    """Redis restarts, and as many PostgreSQL restarts."""
    service_down_s: tuple[float, float] = (2.0, 6.0)
    outages: int = 1
    disk_fulls: int = 1
    disk_full_s: float = 15.0
    drain_timeout_s: float = 300.0


PROFILES = {
    "ci": Profile("ci", duration_s=180, rate_per_producer=10.0),
    "smoke": Profile("smoke", duration_s=60, rate_per_producer=5.0, restarts=1,
                     disk_full_s=8.0, drain_timeout_s=120),
    "long": Profile("long", duration_s=1800, rate_per_producer=10.0, restarts=10, outages=4,
                    disk_fulls=4),
}
OUTAGE_S = RULES.horizon().total_seconds() + 5
"""A broker outage: longer than the resend rule's horizon (every backoff and grace period)."""


@dataclass
class Fault:
    """One fault of the schedule, and what happened when it was played."""

    at_s: float
    kind: str  # kill9, redis, postgres, broker-outage, disk-full
    target: str
    duration_s: float
    began: float | None = None
    repaired: float | None = None


def schedule(profile: Profile, seed: int, targets: list[str], *, disk: bool) -> list[Fault]:
    """The run's faults, by start time (``targets``: what a ``kill9`` may hit)."""
    draw = random.Random(seed)
    faults: list[Fault] = []
    at = draw.uniform(*profile.kill_every_s)
    while at < profile.duration_s:
        faults.append(Fault(at, "kill9", draw.choice(targets), draw.uniform(*profile.restart_s)))
        at += draw.uniform(*profile.kill_every_s)
    long_faults = [("redis", "redis", profile.service_down_s)] * profile.restarts \
        + [("postgres", "postgres", profile.service_down_s)] * profile.restarts \
        + [("broker-outage", "broker", (OUTAGE_S, OUTAGE_S))] * profile.outages \
        + [("disk-full", "disk", (profile.disk_full_s,) * 2)] * (profile.disk_fulls if disk else 0)
    slot = profile.duration_s / max(len(long_faults), 1)
    draw.shuffle(long_faults)
    for index, (kind, target, span) in enumerate(long_faults):
        duration = draw.uniform(*span)
        latest = max(slot * index, min(slot * (index + 1), profile.duration_s - duration) - 1)
        faults.append(Fault(draw.uniform(slot * index, latest), kind, target, duration))
    return sorted(faults, key=lambda fault: fault.at_s)


@dataclass
class Piece:
    """Something a fault takes down: how, how it comes back, and who holds it down."""

    down: Callable[[Fault], None]
    up: Callable[[], None]
    holds: int = 0
    ended: list[Fault] = field(default_factory=list)
    """Faults that ended while another still held the piece down."""
    background: bool = False
    """``up`` runs in a thread (a process that may need several attempts to start, e.g. while
    the broker is away); a fault on the piece meanwhile is not played."""
    starting: threading.Thread | None = None


@dataclass
class Injector:
    """Plays a schedule against ``pieces`` (name → ``Piece``)."""

    pieces: dict[str, Piece]
    events: list[tuple[float, int, str, Fault]] = field(default_factory=list)
    skipped: int = 0
    """Faults not played: their piece was still starting after a previous one."""

    def play(self, faults: list[Fault], start: float, until: float) -> None:
        """Every fault of ``faults`` (times relative to ``start``); returns once all ended."""
        for number, fault in enumerate(faults):
            heapq.heappush(self.events, (start + fault.at_s, number * 2, "begin", fault))
        while self.events:
            at, number, action, fault = heapq.heappop(self.events)
            time.sleep(max(at - time.time(), 0))
            if action == "begin":
                if time.time() >= until or not self._begin(fault):
                    continue  # the fault phase is over (what began still ends), or skipped
                heapq.heappush(self.events, (time.time() + fault.duration_s, number + 1,
                                             "end", fault))
            else:
                self._end(fault)
        for piece in self.pieces.values():
            if piece.starting is not None:
                piece.starting.join()

    def _begin(self, fault: Fault) -> bool:
        piece = self.pieces[fault.target]
        if piece.starting is not None and piece.starting.is_alive():
            self.skipped += 1
            return False
        fault.began = time.time()
        if piece.holds == 0:
            log.warning("fault %s %s: down", fault.kind, fault.target)
            piece.down(fault)
        piece.holds += 1
        return True

    def _end(self, fault: Fault) -> None:
        piece = self.pieces[fault.target]
        piece.holds -= 1
        piece.ended.append(fault)
        if piece.holds == 0:
            ended, piece.ended = piece.ended, []
            if piece.background:
                piece.starting = threading.Thread(target=self._up, args=(piece, ended),
                                                  daemon=True)
                piece.starting.start()
            else:
                self._up(piece, ended)

    @staticmethod
    def _up(piece: Piece, ended: list[Fault]) -> None:
        piece.up()
        for fault in ended:  # repaired when the piece is back
            fault.repaired = time.time()
            log.warning("fault %s %s: back", fault.kind, fault.target)


def fill_disk(mount: Path) -> Callable[[], None]:
    """Take the tmpfs at ``mount`` past the 90 % warning level with a filler file; returns the
    function that removes it."""
    filler = mount / "soak-filler"
    stats = os.statvfs(mount)
    total = stats.f_blocks * stats.f_frsize
    used = total - stats.f_bavail * stats.f_frsize
    size = max(int(total * 0.96) - used, 4096)
    with filler.open("wb") as file:
        os.posix_fallocate(file.fileno(), 0, size)
    return lambda: filler.unlink(missing_ok=True)
