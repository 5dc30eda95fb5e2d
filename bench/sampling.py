"""``PeriodicSampler``: the benchmarks' samplers of a running process or database (memory, CPU
time) share one life cycle: a sample when the measured span starts, one every ``interval_s`` on
a daemon thread, one more when it ends."""

from __future__ import annotations

import threading
from typing import Self


class PeriodicSampler:
    """Calls ``sample()`` on entering, every ``interval_s`` on a thread, and on leaving; a
    subclass says what a sample reads and keeps."""

    def __init__(self, interval_s: float, name: str) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def sample(self) -> object:
        """Take one sample."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> Self:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10 * self.interval_s + 5)
        self.sample()


__all__ = ["PeriodicSampler"]
