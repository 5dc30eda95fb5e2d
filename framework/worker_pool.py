"""``WorkerPool``: the consume threads, with a count of outstanding work so shutdown can drain.

Wraps ``concurrent.futures.ThreadPoolExecutor``; ``wait_idle`` returns once every submitted
task finished (graceful shutdown), ``inline=True`` runs each task on the caller's thread
(deterministic tests). A task's exception is logged, never lost silently. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)


class WorkerPool:
    """A fixed number of consume threads."""

    def __init__(self, thread_count: int, name: str, *, inline: bool = False) -> None:
        self._inline = inline
        self._executor = None if inline else ThreadPoolExecutor(
            max_workers=thread_count, thread_name_prefix=f"postbox-{name}")
        self._outstanding = 0
        self._idle = threading.Condition()

    @property
    def outstanding(self) -> int:
        """Tasks submitted and not finished."""
        return self._outstanding

    def submit(self, task: Callable[..., None], *args: Any) -> None:
        """Run ``task(*args)`` on a consume thread (or inline)."""
        with self._idle:
            self._outstanding += 1
        if self._executor is None:
            self._run(task, args)
        else:
            self._executor.submit(self._run, task, args)

    def _run(self, task: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            task(*args)
        except Exception:
            log.exception("[consume] task %r failed", task)
        finally:
            with self._idle:
                self._outstanding -= 1
                if self._outstanding == 0:
                    self._idle.notify_all()

    def wait_idle(self, timeout_ms: int) -> bool:
        """Wait until no task is outstanding; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout_ms / 1000)

    def shutdown(self) -> None:
        """Stop the threads after the running tasks finish."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
