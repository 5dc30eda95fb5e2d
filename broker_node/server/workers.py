"""``WorkerPool``: a few threads that run the handlers which may block, with a bounded queue;
``WorkerLanes``: one such pool per lane, so one kind of request cannot starve another.

``submit`` never blocks: when ``queue_max`` tasks already wait it raises ``ServerLimitError``
(answered 2 SYSTEM_BUSY, as a Java broker whose pool is full answers ``[OVERLOAD]``), so a flood
of requests costs bounded memory. ``stop`` lets queued tasks finish, then ends every thread.

Lanes: every handler that does not run inline names its lane (``HandlerTable.register(...,
lane=...)``): ``SEND_LANE`` for sends (a producer waits on each one, and under SYNC_FLUSH each
one waits for the disk), ``CLIENT_LANE`` for heartbeats (they may create groups and retry
topics), ``QUERY_LANE`` (the default) for queries and administration. Each lane has its own
threads and its own bounded queue: a flood of queries fills the query lane and is answered
SYSTEM_BUSY there, while sends keep their threads.

Thread-safety: ``submit`` from any thread; ``start``/``stop`` from the owner.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from .errors import ServerLimitError

log = logging.getLogger(__name__)

_STOP = None
SEND_LANE = "send"
CLIENT_LANE = "client"
QUERY_LANE = "query"
LANES = (SEND_LANE, CLIENT_LANE, QUERY_LANE)


class WorkerPool:
    """``size`` daemon threads named ``{name}-N`` over one bounded queue."""

    def __init__(self, name: str, size: int, queue_max: int) -> None:
        if size < 1 or queue_max < 1:
            raise ValueError("a worker pool needs at least one thread and one queue slot")
        self._name = name
        self._size = size
        self._queue_max = queue_max
        self._tasks: queue.Queue[Callable[[], None] | None] = queue.Queue(queue_max)
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start the threads."""
        for number in range(self._size):
            thread = threading.Thread(target=self._run, name=f"{self._name}-{number}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def submit(self, task: Callable[[], None]) -> None:
        """Queue ``task``; raises ``ServerLimitError`` when the queue is full."""
        try:
            self._tasks.put_nowait(task)
        except queue.Full:
            raise ServerLimitError(f"[OVERLOAD] {self._queue_max} requests already wait for a "
                                   f"{self._name} thread; retry later") from None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Finish the queued tasks, then end every thread."""
        for _ in self._threads:
            self._tasks.put(_STOP)
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()

    def _run(self) -> None:
        while (task := self._tasks.get()) is not _STOP:
            try:
                task()
            except Exception:  # a task answers its own errors; this is a bug, logged
                log.exception("[remoting] %s task failed", self._name)


class WorkerLanes:
    """One ``WorkerPool`` of ``size`` threads and ``queue_max`` queue slots per lane."""

    def __init__(self, name: str, size: int, queue_max: int,
                 lanes: tuple[str, ...] = LANES) -> None:
        self._pools = {lane: WorkerPool(f"{name}-{lane}", size, queue_max) for lane in lanes}

    def start(self) -> None:
        """Start every lane's threads."""
        for pool in self._pools.values():
            pool.start()

    def submit(self, task: Callable[[], None], lane: str = QUERY_LANE) -> None:
        """Queue ``task`` on ``lane`` (an unknown lane: the query lane); ``ServerLimitError``
        when that lane's queue is full."""
        self._pools.get(lane, self._pools[QUERY_LANE]).submit(task)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Finish every lane's queued tasks, then end its threads."""
        for pool in self._pools.values():
            pool.stop(timeout_s)
