"""Poll until a condition holds: the one helper every test uses for "this happens soon".

For states nothing announces (a row a relay wrote, a record another process stored, a thread now
blocked in a wait). Where an event, a condition variable or a fake clock can tell the test, it
uses that instead; this is for what only polling can see.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

WAIT_S = 30.0  # a generous bound for "happens soon": on a loaded CI machine, not a latency bound
INTERVAL_S = 0.01


def wait_until(condition: Callable[[], T], timeout_s: float = WAIT_S, what: str = "condition",
               *, interval_s: float = INTERVAL_S, detail: Callable[[], object] | None = None,
               fail: bool = True) -> T:
    """Call ``condition`` every ``interval_s`` until it returns something truthy, and return
    that. After ``timeout_s`` fail with an ``AssertionError`` naming ``what`` (and
    ``detail()``, when given, for the state that was not reached), or with ``fail=False``
    return the last (falsy) value: the caller checks the outcome itself, after its clean-up.
    An exception from ``condition`` ends the wait at once (a process that died, say)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            if not fail:
                return value
            context = f": {detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{context}")
        time.sleep(interval_s)


def wait_stopped(pid: int, timeout_s: float = 10) -> None:
    """Until the kernel reports every thread of ``pid`` stopped. SIGSTOP lands asynchronously,
    thread by thread: a thread inside a system call (an ``open`` creating a file, a write) ends
    it first, so a test that needs the process frozen waits for this after ``os.kill``."""

    def states() -> list[str]:
        tasks = Path(f"/proc/{pid}/task")
        found = []
        for task in tasks.iterdir():
            try:
                found.append((task / "stat").read_text().rpartition(")")[2].split()[0])
            except FileNotFoundError:  # a thread that ended meanwhile
                continue
        return found

    wait_until(lambda: all(state in "Tt" for state in states()), timeout_s,
               f"every thread of process {pid} to stop", interval_s=0.001, detail=states)
